"""What a codec is: the pure step that turns one delivery into comparable content.

A codec never touches storage. It bounds, decodes and validates a delivery, and names
the content whose SHA-256 is the witness and (in ``key`` identity mode) the declared
identity. Users add their own by implementing :class:`Codec` and calling
:func:`register`.

A codec that takes settings (``json``'s pointers, ``sp-api-listing``'s expected
application) also has ``configure(settings, webhook)``, which returns the inbox's own
instance. That instance's ``name`` is what the store keeps for the inbox, so a codec
whose settings decide identity or witness spells them into its name (``family{...}``):
the store then refuses an inbox re-declared with other ones, as it refuses another
codec. Its ``settings`` (a JSON-ready mapping, never a secret) are what operators see.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from oncebox.errors import ConfigError
from oncebox.formats.webhook_config import WebhookConfig
from oncebox.formats.webhooks import Verified

IdentityMode = Literal["content", "key"]
HEAD_KEPT = 65_536  # what a dead letter keeps of a body (engine.ingest.DEAD_LETTER_HEAD)


@dataclass(frozen=True)
class Delivery:
    """One arrival as received: the bytes plus the transport's facts about them.

    None of the transport facts is identity: a snapshot id is provenance, a device time
    is recorded but never trusted, a transport delivery id changes on every redelivery.
    ``signature`` is what a verified webhook signature vouched for, recorded beside them.
    """

    body: bytes
    key: str | None = None
    snapshot_id: str | None = None
    device_time: str | None = None
    delivery_id: str | None = None
    lease_token: int | None = None
    signature: Verified | None = None
    # The dead letter this delivers again (a replay, or a line of a dead letters'
    # export): deciding it closes that dead letter, or counts one attempt more on it.
    dead_letter: int | None = None


@dataclass(frozen=True)
class Unreadable(Delivery):
    """A transport message its adapter could not take apart (a line nested past any
    bound, a key the store cannot hold as text). Dead-lettered as it arrived, whatever
    the inbox's codec, so that one hostile line cannot fail the batch it came in: the
    ``body`` is the raw message, ``detail`` says why it could not be read, ``reason`` is
    the dead letter's reason (``bad_envelope`` when the transport's own facts are bad)."""

    detail: str = ""
    reason: str = "bad_format"


@dataclass(frozen=True)
class Oversize(Delivery):
    """A delivery over a bound, as its transport kept it while reading: its first bytes
    (``body``, at most 64 KiB), its whole ``length`` and the ``sha256`` (hex) of all of
    it, computed as it streamed, so that the whole never has to be held. Dead-lettered
    ``too_large`` whatever the inbox's codec; ``detail`` names the bound it is over."""

    length: int = 0
    sha256: str = ""
    detail: str = ""


class Overflow:
    """What is kept of a body once it is past its bound, while the rest streams by: its
    first :data:`HEAD_KEPT` bytes, and the length and SHA-256 of all of it."""

    def __init__(self, start: bytes = b"") -> None:
        self._head = bytearray()
        self._hash = hashlib.sha256()
        self.length = 0
        self.update(start)

    def update(self, chunk: bytes) -> None:
        room = HEAD_KEPT - len(self._head)
        if room > 0:
            self._head += chunk[:room]
        self._hash.update(chunk)
        self.length += len(chunk)

    def delivery(self, detail: str = "", **facts: Any) -> Oversize:
        """The :class:`Oversize` delivery of what streamed by, with the transport's facts."""
        digest = self._hash.hexdigest()
        return Oversize(bytes(self._head), length=self.length, sha256=digest, detail=detail,
                        **facts)  # fmt: skip

    def instead_of(self, delivery: Delivery, detail: str = "") -> Oversize:
        """:meth:`delivery`, with the transport's facts ``delivery`` carries."""
        facts = {f.name: getattr(delivery, f.name) for f in fields(Delivery) if f.name != "body"}
        return self.delivery(detail, **facts)


def read_bounded(chunks: Iterable[bytes], bound: int, **facts: Any) -> Delivery:
    """The delivery of the body ``chunks`` make up, holding at most ``bound`` bytes of
    it: a body past the bound is its :class:`Oversize` (its head, length and SHA-256),
    whose rest was never held. ``facts`` are the transport's (``key``, ...)."""
    kept: list[bytes] = []
    size = 0
    overflow: Overflow | None = None
    for chunk in chunks:
        if overflow is not None:
            overflow.update(chunk)
            continue
        size += len(chunk)
        kept.append(chunk)
        if size > bound:
            overflow = Overflow(b"".join(kept))
            kept = []
    if overflow is not None:
        return overflow.delivery(**facts)
    return Delivery(b"".join(kept), **facts)


class Decoded(NamedTuple):
    """A valid delivery: ``content`` is canonical, ``key`` the declared identity.

    ``fields_text``, where the codec has it, is ``fields`` as a record keeps them: the
    compact JSON object, members sorted, ASCII only (what the engine writes otherwise).
    A codec that writes the same members for its canonical form hands them on, instead
    of having them written a second time for each new record.

    A named tuple: every delivery builds one, and a frozen dataclass costs several times
    more to build."""

    content: bytes
    key: str | None = None
    fields: Mapping[str, Any] = MappingProxyType({})
    fields_text: str | None = None


# A Decoded from all four of its fields at C speed (a named tuple's own __new__ is
# Python), for the built-in codecs: each decoded delivery makes one.
decoded_of = partial(tuple.__new__, Decoded)
NO_FIELDS: Mapping[str, Any] = Decoded._field_defaults["fields"]


@runtime_checkable
class Codec(Protocol):
    """The interface a codec implements.

    ``decode`` raises :class:`oncebox.formats.invalid.Invalid` for anything it refuses;
    it must not raise anything else on bad input. ``max_bytes`` bounds the raw body
    before ``decode`` is called.
    """

    name: str
    identity: IdentityMode
    max_bytes: int

    def decode(self, delivery: Delivery) -> Decoded: ...


_REGISTRY: dict[str, Codec] = {}


def register(codec: Codec) -> Codec:
    """Make a codec available to inboxes by its name."""
    if codec.identity not in ("content", "key"):
        raise ConfigError(f"codec {codec.name!r}: identity must be 'content' or 'key'")
    bound = getattr(codec, "max_bytes", None)
    if type(bound) is not int or bound < 1:  # else every ingest fails on it, not here
        raise ConfigError(f"codec {codec.name!r}: max_bytes must be a positive int, not {bound!r}")
    _REGISTRY[codec.name] = codec
    return codec


def get_codec(name: str) -> Codec:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ConfigError(f"unknown codec {name!r} (known: {known})") from None


def codec_names() -> list[str]:
    return sorted(_REGISTRY)


def configure(codec: Codec, settings: Mapping[str, Any], webhook: WebhookConfig | None) -> Codec:
    """The inbox's own instance of ``codec`` under ``settings`` (and how its sender
    signs); a codec without ``configure`` takes neither."""
    make = getattr(codec, "configure", None)
    if make is not None:
        configured = make(settings, webhook)
        if not isinstance(configured, Codec):
            raise ConfigError(f"codec {codec.name}: configure() did not return a codec")
        return configured
    if webhook is not None:
        raise ConfigError(f"codec {codec.name} takes no webhook (keyed and json do)")
    if settings:
        raise ConfigError(
            f"codec {codec.name} takes no settings (got {', '.join(sorted(settings))})"
        )
    return codec


def check_settings(codec: str, settings: Mapping[str, Any], known: frozenset[str]) -> None:
    """Refuse a setting ``codec`` does not have, naming the ones it does."""
    unknown = sorted(set(settings) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, 1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"codec {codec}: unknown setting(s) {', '.join(unknown)} "
            f"(its settings: {', '.join(sorted(known)) or 'none'}{hint})"
        )


def codec_family(name: str) -> str:
    """The registered codec a (possibly configured) codec's name belongs to."""
    return name.split("{", 1)[0]


def needs_key(codec: Codec) -> bool:
    """Whether the codec's identity is the key its transport gives (``Oncebox-Key``, a
    line's ``key``), so that a delivery without one is its sender's misconfiguration.
    A codec says so with ``needs_key = True``; one whose key comes from the body does
    not. A webhook sender's verified message id is its key: only a delivery a token
    sends is asked for ``Oncebox-Key``."""
    return bool(getattr(codec, "needs_key", False))


def codec_settings(codec: Codec) -> dict[str, Any]:
    """A codec's settings as operators see them (empty for a codec that has none)."""
    return dict(getattr(codec, "settings", None) or {})
