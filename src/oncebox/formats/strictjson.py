"""A strict JSON reader: the standard parser plus the rules that make content comparable.

The standard library's parser is correct on grammar but lenient where oncebox cannot be:
it accepts NaN and Infinity, keeps the last of duplicate members, decodes lone surrogate
escapes, turns ``1e999`` into infinity and recurses without bound. Each of those is
refused here with a reason that names the rule. Numbers are kept exactly as spelled
(:class:`JsonNumber`), so ``1`` and ``1.0`` stay different content.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

from oncebox.formats.invalid import Invalid

UTF8_BOM = "\ufeff"
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# A surrogate escape somewhere in the text; only then are the parsed strings checked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonNumber(str):
    """A JSON number kept as its exact spelling."""

    __slots__ = ()


def _float(text: str) -> JsonNumber:
    # Spelling is what we keep, but a number no IEEE double can hold is refused:
    # most consumers would read it as infinity.
    if math.isinf(float(text)):
        raise Invalid("non_finite_number", f"number {text[:40]} overflows a double")
    return JsonNumber(text)


def _constant(name: str) -> Any:
    raise Invalid("non_finite_number", f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise Invalid("duplicate_member", f"member {key[:60]!r} appears twice")
            seen.add(key)
    return obj


def nesting_depth(text: str) -> int:
    """Deepest container nesting, found by a scan that never recurses."""
    depth = deepest = 0
    for token in _TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _check_unicode(value: Any) -> None:
    """Refuse strings holding lone surrogates (from ``\\ud800``-style escapes)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise Invalid("invalid_unicode", "string holds a lone surrogate") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# Built once: json.loads builds a new decoder on every call that passes options. An
# integer is the class itself: the parser calls it with the spelling, no frame between.
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_int=JsonNumber, parse_float=_float, parse_constant=_constant
)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by its __init__


def loads(data: bytes | str, *, max_depth: int = 20) -> Any:
    """Parse one JSON text under the strict rules, or raise :class:`Invalid`."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid("invalid_unicode", f"not UTF-8 at byte {exc.start}") from None
    else:
        text = data
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Invalid("invalid_unicode", f"lone surrogate at {exc.start}") from None
    return loads_utf8(text, max_depth)


def loads_utf8(text: str, max_depth: int = 20) -> Any:
    """:func:`loads` of a text already known to be UTF-8 (decoded from bytes): a codec
    that needs the text as well decodes its body once."""
    if text.startswith(UTF8_BOM):
        raise Invalid("bad_json", "a byte order mark is not JSON")
    # Counting brackets is cheap and bounds the depth; only text with more brackets
    # than the bound pays for the exact scan.
    brackets = text.count("[") + text.count("{")
    depth = nesting_depth(text) if brackets > max_depth else 0
    if depth > max_depth:
        raise Invalid("too_deep", f"nesting depth {depth} exceeds {max_depth}")
    try:
        # The scanner itself, as the decoder calls it for a text with no whitespace
        # around its value (the usual body); anything else (whitespace, trailing data,
        # no value at all) is parsed again by the decoder, for its exact answer.
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise Invalid("bad_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise Invalid("too_deep", "nesting too deep to parse") from None
    if "\\" in text and _SURROGATE_ESCAPE.search(text):
        _check_unicode(value)
    return value


# The scanner as the standard decoder builds it (objects made in C, integers as int),
# with the strict rules for other numbers and constants. What it cannot see is left to
# its caller: a repeated member name (the last value stays) and ``-0`` (read as 0).
_FLOAT_TICKS = itertools.count()


def _ticked_float(text: str) -> JsonNumber:
    next(_FLOAT_TICKS)
    return _float(text)


_QUICK_DECODER = json.JSONDecoder(parse_float=_ticked_float, parse_constant=_constant)
_QUICK_SCAN = _QUICK_DECODER.scan_once  # type: ignore[attr-defined]  # set by its __init__


def quick_read(text: str) -> tuple[Any, bool] | None:
    """``text``'s value read by the C scanner alone, with ``spelled``: whether it may hold
    a number other than an integer (a :class:`JsonNumber`); integers are ``int``.

    Why: the strict reader's duplicate-member hook builds every object in Python.
    Trust it only once the caller has shown that nothing was dropped or respelled
    (:func:`oncebox.formats.canonical.kept_every_member`). None for a text where
    the strict reader may answer otherwise on any other ground: a backslash (an escape,
    perhaps a lone surrogate), whitespace other than spaces, anything the scanner
    refuses (not JSON, NaN, an overflowing number) and space around the value. Nesting
    is not bounded here; the caller bounds it.
    """
    if "\\" in text or "\n" in text or "\r" in text or "\t" in text:
        return None
    # Floats tick a counter shared by all threads: the counter moving by more than one
    # between these two reads means a float may be in this text (another thread's float
    # only costs this text the slower, spelling-aware writer).
    before = next(_FLOAT_TICKS)
    try:
        value, end = _QUICK_SCAN(text, 0)
    except Exception:  # the strict reader, on the same text, says what it is
        return None
    if end != len(text):
        return None
    return value, next(_FLOAT_TICKS) != before + 1
