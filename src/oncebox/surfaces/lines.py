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
