"""What a value means beside its Python type, declared once on the entity that holds it.

The surfaces read these marks to show a value (a digest in hex, a server-clock time in
ISO 8601, content as text or base64, JSON text parsed) and to describe it (:class:`Doc`,
the sentence an API schema and the docs give for the field), so that an entity's shape
is written in one place: its type here.
"""

from __future__ import annotations

from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin, get_type_hints


class Kind(StrEnum):
    DIGEST = "digest"  # a SHA-256, shown in hex
    INSTANT = "instant"  # seconds since the epoch on the server clock, shown ISO 8601
    CONTENT = "content"  # bytes as received, shown as text where they are UTF-8
    JSON = "json"  # JSON text the engine wrote, shown parsed
    SIGNED = "signed"  # JSON text of what a sender's verified signature vouched for


class Doc(NamedTuple):
    """The sentence that describes a field to people (API schemas, the docs)."""

    text: str


Digest = Annotated[bytes, Kind.DIGEST]
Instant = Annotated[float, Kind.INSTANT]
Content = Annotated[bytes, Kind.CONTENT]
JsonText = Annotated[str, Kind.JSON]
Signed = Annotated[str, Kind.SIGNED]


class Meaning(NamedTuple):
    """What a field of an entity is: its type without the marks (``bytes | None``), its
    kind if it has one, and its sentence."""

    type: Any
    kind: Kind | None
    doc: str | None


_MEANINGS: dict[type, dict[str, Meaning]] = {}


def meanings(cls: type) -> dict[str, Meaning]:
    """Every field of an entity (a dataclass or named tuple) and what it is, in order."""
    found = _MEANINGS.get(cls)
    if found is None:
        found = _MEANINGS[cls] = {
            name: _meaning(hint) for name, hint in get_type_hints(cls, include_extras=True).items()
        }
    return found


def _meaning(hint: Any) -> Meaning:
    kind: Kind | None = None
    doc: str | None = None
    optional = False
    # ``Annotated[Digest | None, Doc(...)]``: the marks sit on the union's member.
    if get_origin(hint) is Annotated:
        hint, *marks = get_args(hint)
        kind, doc = _marks(marks, kind, doc)
    if get_origin(hint) in (Union, UnionType) and type(None) in get_args(hint):
        optional = True
        [hint] = [arg for arg in get_args(hint) if arg is not type(None)]
    if get_origin(hint) is Annotated:
        hint, *marks = get_args(hint)
        kind, doc = _marks(marks, kind, doc)
    return Meaning(hint | None if optional else hint, kind, doc)


def _marks(marks: list[Any], kind: Kind | None, doc: str | None) -> tuple[Kind | None, str | None]:
    for mark in marks:
        if isinstance(mark, Kind):
            kind = mark
        elif isinstance(mark, Doc):
            doc = mark.text
    return kind, doc
