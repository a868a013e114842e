"""What the engine shows of its state: the types the library, the CLI and the HTTP service
read, owned here so that no surface depends on how a store lays out its rows.

Each view is built from the store's row by field name (:func:`view`); a store may keep
more than a view shows, and a view may say more than a row (``is_tombstone``, ``dirty``).
Digests are bytes, times are seconds since the epoch on the server clock, and ``fields``
is the JSON text of a record's named values (:func:`fields_of` reads it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from oncebox.store.listing import WHOLE
from oncebox.store.listing import Preview as Preview  # what a listing shows of a value

V = TypeVar("V")

_NAMES: dict[tuple[type, type], tuple[str, ...]] = {}
# What a listing shows of each value (the whole is one request away: the row's own view).
LISTED = Preview(content=1024, text=512, fields=2048)
# The text values a sender chose, which a listing shows cut to ``Preview.text``.
_TEXTS = ("identity", "key", "detail", "note", "device_time", "snapshot_id", "delivery_id",
          "last_error")  # fmt: skip
# JSON texts, which a listing leaves out (None) when longer than ``Preview.fields``.
_JSON = ("fields", "document")


def view(cls: type[V], row: Any) -> V:
    """``cls`` built from the same-named attributes of ``row`` (a field the row lacks
    keeps its default)."""
    names = _NAMES.get((cls, type(row)))
    if names is None:
        names = tuple(f.name for f in fields(cls) if hasattr(row, f.name))  # type: ignore[arg-type]
        _NAMES[cls, type(row)] = names
    return cls(**{name: getattr(row, name) for name in names})


def read_cut(preview: Preview) -> Preview:
    """What to read of each value to show ``preview``: one character more of a text
    than is shown, so that a text cut is told from one exactly as long."""
    return replace(preview, text=preview.text + 1, fields=preview.fields + 1)


def to_read(preview: Preview | None) -> Preview:
    """What to read for ``preview`` (None: every value whole)."""
    return WHOLE if preview is None else read_cut(preview)


def listed(cls: type[V], rows: Any, preview: Preview | None) -> list[V]:
    """Rows read with :func:`to_read` as views, shown cut to ``preview`` if given."""
    return views(cls, rows) if preview is None else [shown(cls, row, preview) for row in rows]


def shown(cls: type[V], row: Any, preview: Preview) -> V:
    """A row read cut (:func:`read_cut`) as the view a listing shows: each text longer
    than ``preview.text`` cut to it, fields longer than ``preview.fields`` left out
    (None), and ``cut`` naming every value shown only in part (a content or head is by
    its whole length, ``content_length`` or ``kept``)."""
    item = view(cls, row)
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


def views(cls: type[V], rows: Any) -> list[V]:
    return [view(cls, row) for row in rows]


@dataclass(frozen=True)
class Record:
    """A record: what the first valid arrival of an identity left, or its tombstone."""

    id: int
    inbox_id: int
    ident: bytes  # SHA-256 of the identity
    identity: str | None  # None once evicted
    witness: bytes  # SHA-256 of the canonical content
    revision: int
    content: bytes | None
    fields: str | None
    first_seen: float
    last_seen: float
    seen_count: int
    evicted_at: float | None
    late_replays: int
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None
    signature: str | None = None  # JSON text: see signature_of
    log_seq: int | None = None
    revised_at: float | None = None
    content_length: int | None = None  # bytes of the whole content (None once evicted)
    cut: tuple[str, ...] = ()  # in a listing: the values shown only in part (see shown)

    @property
    def is_tombstone(self) -> bool:
        return self.evicted_at is not None


@dataclass(frozen=True)
class Quarantined:
    """A conflicting newcomer kept for an operator, with how often it came."""

    id: int
    inbox_id: int
    ident: bytes
    identity: str
    record_id: int | None
    witness: bytes
    content: bytes
    fields: str | None  # None only in a listing, when too long to list (see cut)
    reason: str
    status: str  # open | kept | accepted
    note: str | None
    first_seen: float
    last_seen: float
    seen_count: int
    resolved_at: float | None
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None
    signature: str | None = None  # JSON text: see signature_of
    resolved_by: str | None = None  # the actor: an API token's name
    content_length: int | None = None  # bytes of the whole content
    cut: tuple[str, ...] = ()  # in a listing: the values shown only in part (see shown)


@dataclass(frozen=True)
class DeadLetter:
    """An invalid delivery: a bounded copy (``head``), its length, digest and reason."""

    id: int
    inbox_id: int
    reason: str
    detail: str
    head: bytes
    length: int
    sha256: str
    key: str | None
    received_at: float
    device_time: str | None
    snapshot_id: str | None
    delivery_id: str | None
    signature: str | None = None  # JSON text: see signature_of
    replayed_at: float | None = None
    replayed_by: str | None = None
    replay_verdict: str | None = None
    kept: int | None = None  # bytes of the kept head (``length`` bytes arrived)
    cut: tuple[str, ...] = ()  # in a listing: the values shown only in part (see shown)


@dataclass(frozen=True)
class Revision:
    """A revision of a record that an operator's accepted newcomer superseded."""

    record_id: int
    revision: int
    witness: bytes
    content: bytes | None
    fields: str | None
    decided_at: float
    superseded_at: float
    note: str | None


@dataclass(frozen=True)
class LeaseState:
    """A scope's current lease: its token, and when it runs out on the server clock."""

    inbox_id: int
    scope: str
    token: int
    issued_at: float
    expires_at: float
    released_at: float | None


@dataclass(frozen=True)
class Entry:
    """One log entry: ``hash = SHA-256(prev | step | state)``."""

    seq: int
    step: str
    state: str
    hash: str


@dataclass(frozen=True)
class Eviction:
    """One eviction retention made: a record turned tombstone, or a tombstone dropped."""

    id: int
    inbox_id: int
    kind: str  # record | tombstone
    ident: bytes
    witness: bytes
    first_seen: float
    evicted_at: float


@dataclass(frozen=True)
class WorkItem:
    """A work key (seed 002) and the reconciler's state on it."""

    seller_id: str
    sku: str
    marketplace_id: str
    generation: int
    applied_generation: int
    document: str | None = None
    document_generation: int | None = None
    applied_token: int | None = None
    refreshed_at: float | None = None
    claim_token: int | None = None
    claim_generation: int | None = None
    claimed_by: str | None = None
    claim_expires: float | None = None
    failures: int = 0
    next_attempt: float = 0.0
    last_error: str | None = None
    in_review: int = 0
    document_length: int | None = None  # of the whole document
    cut: tuple[str, ...] = ()  # in a listing: the values shown only in part (see shown)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.seller_id, self.sku, self.marketplace_id)

    @property
    def dirty(self) -> bool:
        return self.generation > self.applied_generation


def fields_of(item: Record | Quarantined | Revision) -> dict[str, Any]:
    """A record's (or newcomer's) named values."""
    return json.loads(item.fields) if item.fields else {}


def signature_of(item: Record | Quarantined | DeadLetter) -> dict[str, Any] | None:
    """What the sender's verified webhook signature vouched for when it arrived:
    ``scheme``, ``signed_at`` (the signed unix time, or None for a scheme that signs
    none) and ``key_signed``; None for a delivery its sender did not sign."""
    return json.loads(item.signature) if item.signature else None
