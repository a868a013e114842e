"""Compact JSON encoders built once, for text written once per delivery."""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _std
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
