"""Canonical JSON: the bytes whose SHA-256 is a JSON delivery's witness.

Member order and insignificant whitespace vanish; everything else (array order, values,
the exact spelling of numbers) is kept, so two texts share a canonical form only when
no reasonable consumer could tell them apart. Members sort by UTF-16 code units, as in
RFC 8785, so the order is the same in every language.
"""

from __future__ import annotations

import json
from typing import Any

from oncebox.formats.strictjson import JsonNumber


def _utf16_key(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be", "surrogatepass")


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, JsonNumber):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, member) in enumerate(sorted(value.items(), key=_utf16_key)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
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
