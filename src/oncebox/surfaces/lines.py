"""NDJSON transport adapter: one delivery per line, in each codec's documented form.

- ``json-event``: the line is the event itself (so the raw-size bound and duplicate
  member checks see exactly what arrived).
- ``ussd-h1``: ``{"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}``.
- ``feed``: ``{"payload": "...", "snapshot_id": "S1"}`` (or ``payload_b64``); a line
  that is not such an object is the payload itself.
- any other codec: ``{"body": "...", "key": "..."}`` (or ``body_b64``).

Envelopes may also carry the transport facts ``device_time``, ``snapshot_id``,
``delivery_id`` and ``lease_token``. A line that is not a valid envelope is still
delivered (its raw bytes as the body) so the codec refuses it and it is dead-lettered:
nothing read is dropped.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from oncebox.formats import Delivery

# codec name -> (body field, identity key field)
ENVELOPES: dict[str, tuple[str, str | None]] = {
    "ussd-h1": ("frame", "frame_id"),
    "feed": ("payload", None),
}
BARE = frozenset({"json-event"})
_FACTS = ("snapshot_id", "device_time", "delivery_id")


def delivery_from_line(codec: str, line: bytes) -> Delivery:
    line = line.rstrip(b"\r\n")
    if codec in BARE:
        return Delivery(body=line)
    body_field, key_field = ENVELOPES.get(codec, ("body", "key"))
    try:
        envelope = json.loads(line)
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        return Delivery(body=line)
    body = _body(envelope, body_field)
    if body is None:
        return Delivery(body=line)
    key = envelope.get(key_field) if key_field else envelope.get("key")
    facts: dict[str, Any] = {
        name: str(envelope[name]) for name in _FACTS if envelope.get(name) is not None
    }
    token = envelope.get("lease_token")
    return Delivery(
        body=body,
        key=str(key) if key is not None else None,
        lease_token=token if isinstance(token, int) and not isinstance(token, bool) else None,
        **facts,
    )


def _body(envelope: dict[str, Any], field: str) -> bytes | None:
    text = envelope.get(field)
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    encoded = envelope.get(f"{field}_b64")
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def split_json_array(text: bytes) -> list[bytes]:
    """The raw text of each element of a top-level JSON array, without parsing them.

    Each element goes to :func:`delivery_from_line` exactly as it arrived, so the codec
    still sees duplicate members, number spelling and invalid input for itself (parsing
    and re-serializing would hide them). Only the array's own brackets, commas and string
    quoting are read here. Raises ValueError when the text is not an array.
    """
    data = text.strip()
    if not data.startswith(b"[") or not data.endswith(b"]"):
        raise ValueError("the body is not a JSON array")
    elements: list[bytes] = []
    depth, start, in_string, escaped = 0, 1, False, False
    for i in range(1, len(data) - 1):
        c = data[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced brackets at byte {i}")
        elif c == 0x2C and depth == 0:  # comma
            elements.append(data[start:i].strip())
            start = i + 1
    if in_string or depth != 0:
        raise ValueError("the JSON array is not closed")
    last = data[start:-1].strip()
    if last or elements:
        elements.append(last)
    if any(not e for e in elements):
        raise ValueError("the JSON array has an empty element")
    return elements
