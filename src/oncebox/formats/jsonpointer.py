"""JSON Pointers (RFC 6901): where a configured value lives inside a delivery.

A pointer is parsed once, when the inbox is declared, so a malformed one is a
configuration error and never a per-delivery surprise. Resolution follows the RFC
exactly: ``~1`` is ``/`` and ``~0`` is ``~`` inside a token, an array index is ``0`` or
a number without leading zeros, and ``-`` (the element after the last) never exists.
"""

from __future__ import annotations

import re
from typing import Any, Final

Tokens = tuple[str, ...]


class _Missing:
    """What a pointer resolves to when its target does not exist."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
_BAD_ESCAPE = re.compile(r"~(?![01])")
_INDEX = re.compile(r"0|[1-9][0-9]*")


def parse(pointer: str) -> Tokens:
    """The reference tokens of ``pointer``; ValueError names what is wrong with it."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON Pointer {pointer!r} must be empty or start with '/'")
    if _BAD_ESCAPE.search(pointer):
        raise ValueError(f"JSON Pointer {pointer!r}: '~' must be followed by 0 or 1")
    # ~1 first: unescaping ~0 first would turn "~01" into "/" instead of "~1".
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def spell(tokens: Tokens) -> str:
    """The pointer text of ``tokens`` (the inverse of :func:`parse`)."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _step(value: Any, token: str) -> Any:
    if isinstance(value, dict):
        return value.get(token, MISSING)
    if isinstance(value, list) and _INDEX.fullmatch(token) and int(token) < len(value):
        return value[int(token)]
    return MISSING


def resolve(document: Any, tokens: Tokens) -> Any:
    """The value ``tokens`` point at in ``document``, or :data:`MISSING`."""
    value = document
    for token in tokens:
        value = _step(value, token)
        if value is MISSING:
            break
    return value


def remove(document: Any, tokens: Tokens) -> None:
    """Delete the object member ``tokens`` point at, in place, if there is one.

    Only object members are removed: deleting an array element would renumber its
    siblings, so what the other pointers see would depend on the order of removal.
    """
    if not tokens:
        return
    parent = resolve(document, tokens[:-1])
    if isinstance(parent, dict):
        parent.pop(tokens[-1], None)
