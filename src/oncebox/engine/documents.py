"""A read document: what a trusted reader returned for a work key, held to the bounds of
an event before it is kept."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from oncebox.errors import InvalidDocument
from oncebox.formats.canonical import canonical
from oncebox.formats.invalid import Invalid
from oncebox.formats.strictjson import loads

MAX_DOCUMENT_BYTES = 65_536


def document_text(document: Mapping[str, Any] | str | bytes | Any) -> str:
    """The canonical text of a read document, or :class:`InvalidDocument`.

    Read documents obey the event bounds: strict JSON, an object, nesting up to 20 and
    at most 65,536 bytes raw and canonical.
    """
    if not isinstance(document, str | bytes):
        try:
            raw: str | bytes = json.dumps(document, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidDocument(f"not JSON: {exc}", reason="bad_json") from None
        except RecursionError:  # far past the bound: json.dumps itself cannot go so deep
            raise InvalidDocument("nesting too deep to encode", reason="too_deep") from None
    else:
        raw = document
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > MAX_DOCUMENT_BYTES:
        raise InvalidDocument(f"{size} bytes exceeds {MAX_DOCUMENT_BYTES}", reason="too_large")
    try:
        value = loads(raw, max_depth=20)
    except Invalid as invalid:
        raise InvalidDocument(str(invalid), reason=invalid.reason) from None

    if not isinstance(value, dict):
        raise InvalidDocument("a read document must be a JSON object", reason="bad_shape")
    text = canonical(value)
    if len(text) > MAX_DOCUMENT_BYTES:
        raise InvalidDocument("canonical form too large", reason="too_large")
    return text.decode("utf-8")
