"""Canonical JSON: the bytes whose SHA-256 is a JSON delivery's witness.

Member order and insignificant whitespace vanish; everything else (array order, values,
the exact spelling of numbers) is kept, so two texts share a canonical form only when
no reasonable consumer could tell them apart. Members sort by UTF-16 code units, as in
RFC 8785, so the order is the same in every language.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json import encoder as _std
from json.encoder import encode_basestring
from typing import Any

from oncebox.formats.jsontext import compact_encoder
from oncebox.formats.strictjson import JsonNumber, loads

# A NUL can reach the encoder's output only escaped, so a marked number never collides
# with a string from the text as long as the text holds no NUL escape itself.
_MARK = "\x00"
_MARKED_OPEN = '"\\u0000'  # how the encoder writes a marked number's opening
_NUL_ESCAPE = "\\u0000"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _utf16_key(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be", "surrogatepass")


def _members(value: dict[str, Any]) -> list[tuple[str, Any]]:
    # Code point order equals UTF-16 order unless a key holds a character beyond the
    # Basic Multilingual Plane; only then is the slower key needed.
    if any(key and max(key) > "\uffff" for key in value):
        return sorted(value.items(), key=_utf16_key)
    return sorted(value.items())


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, JsonNumber):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(encode_basestring(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, member) in enumerate(_members(value)):
            if i:
                out.append(",")
            out.append(encode_basestring(key))
            out.append(":")
            _write(member, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, member in enumerate(value):
            if i:
                out.append(",")
            _write(member, out)
        out.append("]")
    elif isinstance(value, int):
        out.append(str(value))
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """Encode a value read by :func:`oncebox.formats.strictjson.loads` canonically."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _marked(spelling: str) -> str:
    return _MARK + spelling


# Built once: json.loads and json.dumps build a new decoder or encoder on every call
# that passes options, which costs more than the work on a small event.
_DECODER = json.JSONDecoder(parse_int=_marked, parse_float=_marked)
_ENCODE = compact_encoder(sort_keys=True, ensure_ascii=False)


def canonical_json(text: str) -> bytes:
    """The canonical form of a JSON text the strict reader already accepted.

    Same bytes as ``canonical(loads(text))``, a dozen times faster: the standard
    library's C parser and encoder do the work, numbers travel through them as marked
    strings (so their spelling survives) and are unmarked afterwards. Texts where that
    shortcut could be wrong (a NUL escape, or characters beyond the Basic Multilingual
    Plane, whose keys sort differently in UTF-16) take the exact path.
    """
    if (
        _NUL_ESCAPE in text
        or _SURROGATE_ESCAPE.search(text)
        or (not text.isascii() and _ASTRAL.search(text))
    ):
        return canonical(loads(text))
    head, *numbers = _ENCODE(_DECODER.decode(text)).split(_MARKED_OPEN)
    # Each piece after a marker starts with the number's spelling and its closing quote.
    return "".join([head, *(piece.replace('"', "", 1) for piece in numbers)]).encode("utf-8")


def _spelling(text: str) -> str:
    """How :data:`_READ_ENCODE` writes a string: a number as it was spelled, any other
    string as JSON (what :func:`_write` does with each)."""
    return text if type(text) is JsonNumber else encode_basestring(text)


def _not_json(value: Any) -> Any:
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _c_encoder(write_string: Callable[[str], str], sample: Any) -> Any:
    """The standard library's C encoder, built once, writing strings through
    ``write_string``: members sorted, compact. None where this Python's private encoder
    takes other arguments or writes ``sample`` otherwise than :func:`canonical`."""
    make = getattr(_std, "c_make_encoder", None)
    if make is None:
        return None
    try:
        once = make(None, _not_json, write_string, None, ":", ",", True, False, True)
        agrees = "".join(once(sample, 0)).encode("utf-8") == canonical(sample)
    except Exception:
        return None
    return once if agrees else None


# Numbers as spelled (JsonNumber strings), for what the strict reader read.
_READ_ENCODE = _c_encoder(
    _spelling, loads('{"b":[1,2.50,-0,"1",true,false,null],"a":"\u00e9\u2028\\"","":{}}')
)


def canonical_read(value: Any, text: str) -> bytes:
    """``canonical(value)`` for the ``value`` the strict reader read from ``text``,
    without a second parse: the C encoder writes the value already read, numbers as
    spelled. Member order is code point order there, which is UTF-16 order unless a key
    holds a character beyond the Basic Multilingual Plane; texts that may hold one (such
    a character, or a surrogate escape) take the exact path."""
    return canonical_read_text(value, text).encode("utf-8")


def canonical_read_text(value: Any, text: str) -> str:
    """:func:`canonical_read` as text, for a writer that puts it inside its own."""
    if (
        _READ_ENCODE is None
        or ("\\" in text and _SURROGATE_ESCAPE.search(text))
        or (not text.isascii() and _ASTRAL.search(text))
    ):
        return canonical(value).decode("utf-8")
    return "".join(_READ_ENCODE(value, 0))


# For values whose numbers are all ``int``: no callback into Python for any string.
_PLAIN_ENCODE = _c_encoder(
    encode_basestring, {"b": [1, -20, "1", True, False, None], "a": '\u00e9\u2028"\x7f', "": {}}
)


def quick_canonical_text(value: Any, spelled: bool, text: str) -> str | None:
    """The canonical form (as text) of what :func:`~oncebox.formats.strictjson.quick_read`
    read from ``text``, or None where this writer cannot tell: a text that may hold a
    key beyond the Basic Multilingual Plane (sorted otherwise in UTF-16). Integers are
    written by the C encoder itself, other numbers (``spelled``) through the spelling
    writer. Check the result with :func:`kept_every_member` before trusting it."""
    encode = _READ_ENCODE if spelled else _PLAIN_ENCODE
    if encode is None or (not text.isascii() and _ASTRAL.search(text)):
        return None
    return "".join(encode(value, 0))


def kept_every_member(text: str, canonical_text: str) -> bool:
    """Whether ``canonical_text``, :func:`quick_canonical_text` of ``text``, has every
    member and every number of ``text`` as it was written.

    Why it can tell: ``text`` holds no backslash and no whitespace but spaces (what
    ``quick_read`` reads), so each string, key and number is written back with the same
    characters, and only three things change the count of characters other than
    spaces: member order (never), a member dropped for a repeated name (fewer, by its
    name, colon, value and comma) and ``-0`` read as 0 (one fewer). Spaces are either
    inside strings (kept alike) or between tokens (gone); they are not counted.
    """
    if " " in text:
        return len(text) - text.count(" ") == len(canonical_text) - canonical_text.count(" ")
    return len(text) == len(canonical_text)
