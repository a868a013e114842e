"""Canonical JSON: the bytes whose SHA-256 is a JSON delivery's witness.

Member order and insignificant whitespace vanish; everything else (array order, values,
the exact spelling of numbers) is kept, so two texts share a canonical form only when
no reasonable consumer could tell them apart. Members sort by UTF-16 code units, as in
RFC 8785, so the order is the same in every language.
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any

from oncebox.formats.strictjson import JsonNumber


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
