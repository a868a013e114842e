"""Compact JSON encoders built once, for text written once per delivery."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from json import encoder as _std
from operator import itemgetter
from typing import Any

Encode = Callable[[Any], str]

_SAMPLE: Any = {"b": [1, 2.5, None, True, False], "a": '\u00e9\u2028"\\', "\u00e9": {}}


def compact_encoder(*, sort_keys: bool, ensure_ascii: bool) -> Encode:
    """``JSONEncoder(separators=(",", ":"), ...).encode``, same text, same errors.

    Why: the standard ``encode`` builds a new C encoder on every call, which costs more
    than encoding a small dict. This one is built once, without the circular-reference
    check (its table would outlive a failed call); any failure reruns the standard
    encoder, so errors, cycles included, are exactly the standard ones.
    """
    standard = json.JSONEncoder(
        ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=(",", ":")
    )
    make = getattr(_std, "c_make_encoder", None)
    if make is None:
        return standard.encode
    strings = _std.encode_basestring_ascii if ensure_ascii else _std.encode_basestring
    try:
        once = make(None, standard.default, strings, None, ":", ",", sort_keys, False, True)
    except TypeError:  # another Python's private signature: keep the standard path
        return standard.encode

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return standard.encode(value)
        try:
            return "".join(once(value, 0))
        except Exception:
            return standard.encode(value)

    try:
        agrees = encode(_SAMPLE) == standard.encode(_SAMPLE)
    except Exception:
        agrees = False
    return encode if agrees else standard.encode


def _plain(text: str) -> bool:
    """Whether the ASCII-only encoder writes ``text`` as it is (between quotes): printable
    ASCII, neither a quote nor a backslash."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


@lru_cache(maxsize=256)
def _string_object_writer(names: tuple[Any, ...]) -> tuple[Callable[[Any], Any], str] | None:
    """For a mapping with these member names: what reads its values in sorted name order,
    and the ``%`` template that writes them; None where a name is not plain."""
    if len(names) < 2 or not all(type(name) is str and _plain(name) for name in names):
        return None
    order = sorted(names)
    members = ",".join(f'"{name.replace("%", "%%")}":"%s"' for name in order)
    return itemgetter(*order), "{" + members + "}"


def sorted_ascii_strings(fields: Mapping[str, Any]) -> str | None:
    """``compact_encoder(sort_keys=True, ensure_ascii=True)(fields)`` for a mapping of two
    or more plain names to string values the encoder writes as they are (printable ASCII,
    no quote, no backslash): the text, written by one template made once per set of
    names, without the encoder. None for any other mapping, which the encoder writes."""
    names = tuple(fields)
    # The writers made, looked up directly: lru_cache's own bookkeeping costs more than
    # the lookup, and this runs for every new record.
    writer = _WRITERS.get(names, _UNSEEN)
    if writer is _UNSEEN:
        writer = _string_object_writer(names)
        if len(_WRITERS) < 256:
            _WRITERS[names] = writer
    if writer is None:
        return None
    read, template = writer
    values = read(fields)
    try:
        flat = "".join(values)
    except TypeError:  # a value that is not a string
        return None
    kinds = set(map(type, values))
    if kinds != _STR and any(_own_str(kind) for kind in kinds):
        return None  # ``%s`` would write what its own __str__ says, not the string
    # _plain(flat), in line (it runs for every new record)
    plain = flat.isascii() and flat.isprintable() and '"' not in flat and "\\" not in flat
    return template % values if plain else None


_Writer = tuple[Callable[[Any], Any], str]
_UNSEEN: _Writer = (str, "")  # a sentinel, told apart by identity
_WRITERS: dict[tuple[Any, ...], _Writer | None] = {}


_STR = {str}


def _own_str(kind: type) -> bool:
    """Whether a str subclass writes itself otherwise than its string (its own or an
    ancestor's ``__str__``)."""
    return any("__str__" in vars(base) for base in kind.__mro__ if base not in (str, object))
