"""HTTP models made from the domain's entities, so that an entity's shape is written once.

``@shaped(Record)`` on a model class gives it a field for each of the entity's fields,
typed as the API sends it (the entity's kinds: a digest as hex, a server-clock time as
ISO 8601, content as text or base64, JSON text as the JSON it holds) and described by the
entity's own sentence, then the fields the class declares itself (what the API adds, or
says otherwise). :func:`oncebox.surfaces.views.as_json` shows an entity the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from typing import Any, Literal, TypeVar, cast, get_args, get_origin

from pydantic import BaseModel, Field, JsonValue, create_model

from oncebox.domain import Kind
from oncebox.domain.kinds import Meaning, meanings

M = TypeVar("M", bound=BaseModel)

Hex = str  # documented per field: SHA-256 digests as 64 lowercase hex digits
JsonObject = dict[str, JsonValue]


class TextContent(BaseModel):
    """Content that is UTF-8 text."""

    text: str = Field(description="The content as text.")


class Base64Content(BaseModel):
    """Content that is not UTF-8 text."""

    base64: str = Field(description="The content's bytes in base64.")


Content = TextContent | Base64Content


class SignatureOut(BaseModel):
    """What the sender's webhook signature vouched for when it was verified on arrival
    (never the secret, nor the signature)."""

    scheme: Literal["github", "standard-webhooks", "stripe"] = Field(
        description="The signing scheme the inbox declares."
    )
    signed_at: int | None = Field(
        description="The unix time the sender signed; null for github, which signs none."
    )
    key_signed: bool = Field(
        description="Whether the signature covers the message id used as the key "
        "(standard-webhooks: yes; github's X-GitHub-Delivery: no)."
    )


_SENT_AS: dict[Kind, Any] = {
    Kind.DIGEST: Hex,
    Kind.INSTANT: str,
    Kind.CONTENT: Content,
    Kind.JSON: JsonObject,
    Kind.SIGNED: SignatureOut,
}


def sent_as(meaning: Meaning) -> Any:
    """The type the API sends a field of this meaning as."""
    kind, python = meaning.kind, meaning.type
    optional = type(None) in get_args(python)
    if optional:
        [python] = [arg for arg in get_args(python) if arg is not type(None)]
    if kind is not None:
        sent = _SENT_AS[kind]
    elif isinstance(python, type) and issubclass(python, Enum):
        sent = Literal[tuple(member.value for member in python)]
    elif get_origin(python) is tuple:
        sent = list[get_args(python)[0]]  # type: ignore[misc]
    else:
        sent = python
    return sent | None if optional else sent


def _defaults(entity: type) -> dict[str, Any]:
    if is_dataclass(entity):
        return {f.name: f.default for f in fields(entity) if f.default is not MISSING}
    return dict(getattr(entity, "_field_defaults", {}))


def shaped(entity: type, *, leave_out: Collection[str] = ("cut",)) -> Callable[[type[M]], type[M]]:
    """The model class it decorates, with ``entity``'s fields first (but those in
    ``leave_out``), then its own."""

    def make(cls: type[M]) -> type[M]:
        defaults = _defaults(entity)
        found: dict[str, Any] = {}
        for name, meaning in meanings(entity).items():
            if name not in leave_out:
                default = defaults.get(name, ...)
                found[name] = (sent_as(meaning), Field(default, description=meaning.doc))
        for name, info in cls.model_fields.items():
            found[name] = (info.annotation, info)
        made = create_model(
            cls.__name__,
            __doc__=cls.__doc__,
            __config__=cls.model_config or None,
            __module__=cls.__module__,
            **found,
        )
        return cast(type[M], made)

    return make
