"""NDJSON transport adapter: one delivery per line, in each codec's documented form.

- ``json-event``, ``json`` and ``sp-api-listing``: the line is the object itself (so
  the raw-size bound and duplicate member checks see exactly what arrived); for
  ``sp-api-listing``, the SQS message body or the EventBridge event.
- ``ussd-h1``: ``{"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}``.
- ``feed``: ``{"payload": "...", "snapshot_id": "S1"}`` (or ``payload_b64``); a line
  that is not such an object is the payload itself.
- any other codec: ``{"body": "...", "key": "..."}`` (or ``body_b64``).

Envelopes may also carry the transport facts ``device_time``, ``snapshot_id``,
``delivery_id`` and ``lease_token``, and ``dead_letter``: the id of the dead letter a
line of a dead letters' export re-delivers (deciding it closes that dead letter, or
counts one attempt more on it; a bare-form line is the object itself, so it has none).
A line that is not a valid envelope (not JSON, not an object, no body field) is still
delivered, its raw bytes as the body, so the codec refuses it and it is dead-lettered
(``feed``: it is the payload itself): nothing read is dropped.

A line longer than :func:`line_bound` (a bare-form codec's body bound, else room for an
envelope around the largest body) is never held whole: :func:`bounded_lines` reads it in
pieces, keeping its first 64 KiB and the length and SHA-256 of all of it
(:class:`~oncebox.formats.Overflow`), and it is delivered as an
:class:`~oncebox.formats.Oversize`, a ``too_large`` dead letter whatever the codec.

A line that is JSON but cannot be read (nested deeper than 20, a duplicate member, a
lone surrogate escape, NaN) or whose key or facts are no text (an object, an array, a
boolean: a number is its spelling) or none a store can hold as text (a NUL) is
an :class:`~oncebox.formats.Unreadable` delivery: a ``bad_format`` dead letter of the
raw line, whatever the codec (a bare-form line is the body: its codec refuses it, for
the reader's own reason). :func:`delivery_from_line` never raises, so one hostile
line cannot fail the batch it came in; the other lines are decided as usual.

:func:`line_for` goes the other way (a dead letter downloaded as a line): the line that
re-delivers a delivery, when one can.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import IO, Any

from oncebox.formats import (
    Codec,
    Delivery,
    Invalid,
    Overflow,
    Oversize,
    Unreadable,
    codec_family,
)
from oncebox.formats.strictjson import JsonNumber, loads

# codec name -> (body field, identity key field)
ENVELOPES: dict[str, tuple[str, str | None]] = {
    "ussd-h1": ("frame", "frame_id"),
    "feed": ("payload", None),
}
BARE = frozenset({"json-event", "json", "sp-api-listing"})
ENVELOPE_DEPTH = 20  # as deep as an event may nest; an envelope needs far less
ENVELOPE_ROOM = 65_536  # an envelope's key and facts, beside its body
_FACTS = ("snapshot_id", "device_time", "delivery_id")
_TOKEN = re.compile(r"[0-9]{1,19}")
INT64_MAX = 2**63 - 1  # tokens are 64-bit in both stores


def line_bound(codec: Codec) -> int:
    """The longest line read whole for ``codec``: its body bound where the line is the
    body, else room for an envelope around the largest body (JSON spells a byte in at
    most six characters, ``\\u001f``)."""
    if codec_family(codec.name) in BARE:
        return codec.max_bytes
    return 6 * codec.max_bytes + ENVELOPE_ROOM


def bounded_lines(stream: IO[bytes], bound: int) -> Iterator[bytes | Overflow]:
    """The stream's lines (each with its newline, as iterating the stream gives them);
    a line over ``bound`` bytes (its newline aside) as the :class:`Overflow` of it,
    read in pieces of at most ``bound + 2`` bytes, or a bare newline where it is blank."""
    while True:
        line = stream.readline(bound + 2)
        if not line:
            return
        # A piece that filled the read without its newline may have stopped inside the
        # line: CRs at its end leave it within the bound only if the line ends with them.
        ended = line.endswith(b"\n") or len(line) < bound + 2
        if ended and len(line.rstrip(b"\r\n")) <= bound:
            yield line
            continue
        # Over the bound: trailing CRs are held back (counted) until the line goes on or
        # ends, so that what is kept is the line as rstrip(b"\r\n") would give it.
        first, overflow, held, blank = line, Overflow(), 0, True
        while True:
            ended = line.endswith(b"\n")
            piece = line[:-1] if ended else line
            blank = blank and not piece.strip()
            stripped = piece.rstrip(b"\r")
            if stripped:
                for start in range(0, held, bound + 2):
                    overflow.update(b"\r" * min(bound + 2, held - start))
                overflow.update(stripped)
                held = 0
            held += len(piece) - len(stripped)
            if ended:
                break
            line = stream.readline(bound + 2)
            if not line:
                break
        # Only CRs after a first piece within the bound: that was the whole line. A blank
        # line is no delivery, however long (the caller skips it).
        if blank or overflow.length <= bound:
            yield b"\n" if blank else first.rstrip(b"\r\n") + b"\n"
        else:
            yield overflow


def oversize_line(codec: Codec, overflow: Overflow) -> Oversize:
    """What a line over :func:`line_bound` delivers: where the line is the body, that
    body over its bound; else the raw line, whose envelope was never read."""
    if codec_family(codec.name) in BARE:
        return overflow.delivery()
    bound = line_bound(codec)
    return overflow.delivery(f"a line of {overflow.length} bytes, over the {bound} one may have")


def delivery_from_line(codec: str, line: bytes) -> Delivery:
    """The delivery one NDJSON line carries for ``codec`` (the module docstring gives
    the forms); never raises."""
    line = line.rstrip(b"\r\n")
    if codec_family(codec) in BARE:  # a configured json inbox's codec is json{...}
        return Delivery(body=line)
    body_field, key_field = ENVELOPES.get(codec, ("body", "key"))
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return Delivery(body=line)  # not JSON (a binary feed payload, a stray frame)
    try:
        envelope = loads(text, max_depth=ENVELOPE_DEPTH)
    except Invalid as exc:
        if exc.reason == "bad_json":
            return Delivery(body=line)
        return Unreadable(body=line, detail=f"the line cannot be read: {exc}")
    if not isinstance(envelope, dict):
        return Delivery(body=line)
    body = _body(envelope, body_field)
    if body is None:
        return Delivery(body=line)
    key = envelope.get(key_field or "key")
    texts = {"key": key, **{name: envelope.get(name) for name in _FACTS}}
    if not all(value is None or isinstance(value, str) for value in texts.values()):
        # An object, array or boolean has no spelling a sender gave (str() writes Python's:
        # {"a": 1} and {"a": "1"} would both be the key "{'a': '1'}"). A number is a
        # JsonNumber, its spelling.
        return Unreadable(body=line, detail="the line's key or a fact is not a string or number")
    facts = {name: str(value) for name, value in texts.items() if value is not None}
    if any("\x00" in value for value in facts.values()):
        # PostgreSQL cannot hold a NUL in text: storing it would fail the whole batch.
        return Unreadable(body=line, detail="the line's key or a fact holds a NUL character")
    return Delivery(
        body=body,
        key=facts.get("key"),
        snapshot_id=facts.get("snapshot_id"),
        device_time=facts.get("device_time"),
        delivery_id=facts.get("delivery_id"),
        lease_token=_lease_token(envelope.get("lease_token")),
        dead_letter=_lease_token(envelope.get("dead_letter")),
    )


def line_for(codec: str, delivery: Delivery) -> bytes | None:
    """The NDJSON line that :func:`delivery_from_line` reads back as ``delivery`` (its
    body, key and facts; never a lease token), or None when no line can carry it: a
    bare-form codec's line is the body itself, so a body spanning lines, or one that
    came with a key or facts, has no line of its own (nor says which dead letter it
    re-delivers)."""
    if codec_family(codec) in BARE:
        line = delivery.body
        delivery = replace(delivery, dead_letter=None)
    else:
        body_field, key_field = ENVELOPES.get(codec, ("body", "key"))
        envelope: dict[str, str | int] = {}
        try:
            envelope[body_field] = delivery.body.decode("utf-8")
        except UnicodeDecodeError:
            envelope[f"{body_field}_b64"] = base64.b64encode(delivery.body).decode("ascii")
        if delivery.key is not None:
            envelope[key_field or "key"] = delivery.key
        for name in _FACTS:
            value = getattr(delivery, name)
            if value is not None:
                envelope[name] = value
        if delivery.dead_letter is not None:
            envelope["dead_letter"] = delivery.dead_letter
        line = json.dumps(envelope, ensure_ascii=True).encode("ascii")
    # What the line gives back decides: a form that cannot hold this delivery never
    # writes a line that would re-deliver something else.
    back = delivery_from_line(codec, line)
    wanted = replace(delivery, lease_token=None)
    if b"\n" in line or not line.strip() or type(back) is not Delivery or back != wanted:
        return None
    return line


def _lease_token(value: Any) -> int | None:
    """An integer that can be a token (or a dead letter's id), else None (the fence then
    refuses the delivery; a line then names no dead letter)."""
    if isinstance(value, JsonNumber) and _TOKEN.fullmatch(value) and int(value) <= INT64_MAX:
        return int(value)
    return None


def _body(envelope: dict[str, Any], field: str) -> bytes | None:
    text = envelope.get(field)
    if isinstance(text, str) and not isinstance(text, JsonNumber):
        return text.encode("utf-8")
    encoded = envelope.get(f"{field}_b64")
    if isinstance(encoded, str) and not isinstance(encoded, JsonNumber):
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
