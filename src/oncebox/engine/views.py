"""How the engine shows what it keeps: a listing's cut of each value, and the JSON texts
an entity carries read back as values.

The entities themselves are :mod:`oncebox.domain`'s, the same types the store builds
from its rows: a listing reads rows cut in the store (:func:`to_read`) and shows them
with :func:`shown`, which says in ``cut`` which values it shows only in part.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, TypeVar

from oncebox.domain import WHOLE, DeadLetter, Preview, Quarantined, Record, Revision

V = TypeVar("V")

# What a listing shows of each value (the whole is one request away: the row's own view).
LISTED = Preview(content=1024, text=512, fields=2048)
# The text values a sender chose, which a listing shows cut to ``Preview.text``.
_TEXTS = ("identity", "key", "detail", "note", "device_time", "snapshot_id", "delivery_id",
          "last_error")  # fmt: skip
# JSON texts, which a listing leaves out (None) when longer than ``Preview.fields``.
_JSON = ("fields", "document")


def read_cut(preview: Preview) -> Preview:
    """What to read of each value to show ``preview``: one character more of a text
    than is shown, so that a text cut is told from one exactly as long."""
    return replace(preview, text=preview.text + 1, fields=preview.fields + 1)


def to_read(preview: Preview | None) -> Preview:
    """What to read for ``preview`` (None: every value whole)."""
    return WHOLE if preview is None else read_cut(preview)


def listed(rows: list[V], preview: Preview | None) -> list[V]:
    """Rows read with :func:`to_read`, shown cut to ``preview`` if given."""
    return rows if preview is None else [shown(row, preview) for row in rows]


def shown(item: V, preview: Preview) -> V:
    """A row read cut (:func:`read_cut`) as a listing shows it: each text longer than
    ``preview.text`` cut to it, fields longer than ``preview.fields`` left out (None),
    and ``cut`` naming every value shown only in part (a content or head is by its
    whole length, ``content_length`` or ``kept``)."""
    changes: dict[str, Any] = {}
    cut = []
    for name in _TEXTS:
        value = getattr(item, name, None)
        if isinstance(value, str) and len(value) > preview.text:
            changes[name] = value[: preview.text]
            cut.append(name)
    for name in _JSON:
        value = getattr(item, name, None)
        if isinstance(value, str) and len(value) > preview.fields:
            changes[name] = None
            cut.append(name)
    if getattr(item, "document", None) is None and getattr(item, "document_length", None):
        cut.append("document")  # the store left it out already (too long to read)
    for name, whole in (("content", "content_length"), ("head", "kept")):
        value, length = getattr(item, name, None), getattr(item, whole, None)
        if value is not None and length is not None and len(value) < length:
            cut.append(name)
    return replace(item, **changes, cut=tuple(cut))  # type: ignore[type-var]


def fields_of(item: Record | Quarantined | Revision) -> dict[str, Any]:
    """A record's (or newcomer's) named values."""
    return json.loads(item.fields) if item.fields else {}


def signature_of(item: Record | Quarantined | DeadLetter) -> dict[str, Any] | None:
    """What the sender's verified webhook signature vouched for when it arrived:
    ``scheme``, ``signed_at`` (the signed unix time, or None for a scheme that signs
    none) and ``key_signed``; None for a delivery its sender did not sign."""
    return json.loads(item.signature) if item.signature else None
