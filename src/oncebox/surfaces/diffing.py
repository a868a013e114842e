"""What differs between a record and a conflicting newcomer, for an operator to see.

Pure: no I/O, no HTML. :func:`field_changes` gives each named value that differs
(``headcount: 3 -> 9``); where the values agree but the witness does not (a trailer in
upper case, a trailing newline, JSON spelled otherwise), :func:`byte_difference` gives
the one span of bytes that differs, with a little of what surrounds it, so the operator
sees why two deliveries that read alike are not the same message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONTEXT = 12  # bytes of agreeing context shown on each side of a difference
SHOWN = 160  # at most this many differing bytes shown per side


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()  # a field one side does not have


def shown(value: Any) -> str:
    """A field's value as an operator reads it: text as it is, anything else as JSON."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class FieldChange:
    """One named value that differs: ``old`` is the record's, ``new`` the newcomer's."""

    name: str
    old: Any
    new: Any

    @property
    def text(self) -> str:
        return f"{shown(self.old)} -> {shown(self.new)}"


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """The fields whose values differ, in the record's order, then the newcomer's own.

    Values compare as JSON does: ``1`` and ``True`` differ, as do ``1`` and ``1.0``."""
    names = [*old, *(n for n in new if n not in old)]
    changes = []
    for name in names:
        a, b = old.get(name, ABSENT), new.get(name, ABSENT)
        if a is ABSENT or b is ABSENT or _json(a) != _json(b):
            changes.append(FieldChange(name, a, b))
    return changes


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class ByteDifference:
    """The span where two byte strings differ: ``before`` and ``after`` agree on both
    sides, ``old`` and ``new`` are the differing bytes (either may be empty)."""

    offset: int  # the first differing byte
    before: bytes
    old: bytes
    new: bytes
    after: bytes
    cut_before: bool  # agreeing bytes before ``before`` were left out
    cut_after: bool


def byte_difference(old: bytes, new: bytes, context: int = CONTEXT) -> ByteDifference | None:
    """The one span from the first to the last differing byte, or None if equal.

    Found from both ends (linear: kept content can be 64 KiB), so two differences far
    apart are shown as one span holding both."""
    if old == new:
        return None
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0  # agreeing bytes at the end, not overlapping the start
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    before = old[max(0, start - context) : start]
    tail = old[len(old) - end :]
    return ByteDifference(
        offset=start,
        before=before,
        old=old[start : len(old) - end],
        new=new[start : len(new) - end],
        after=tail[:context],
        cut_before=start > context,
        cut_after=end > context,
    )


_NAMED = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x5C: "\\\\"}


def visible(data: bytes, limit: int = SHOWN) -> str:
    """Bytes as text where every byte shows: printable ASCII as it is, a newline as
    ``\\n``, anything else as ``\\xNN``; past ``limit`` bytes, an ellipsis."""
    out = []
    for byte in data[:limit]:
        if byte in _NAMED:
            out.append(_NAMED[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    if len(data) > limit:
        out.append(f"… ({len(data) - limit:,} more bytes)")
    return "".join(out)
