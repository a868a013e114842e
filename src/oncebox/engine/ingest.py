"""The ingest pipeline's pure half, in the ingest order (docs/concepts.md#ingest-order):
bound, decode, identify.

Everything before the transaction is here (:func:`prepare`) and touches no storage;
everything inside it is :mod:`oncebox.engine.decide`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import NamedTuple

from oncebox.domain import Arrival, Decision, Inbox
from oncebox.engine.destinations import Destination
from oncebox.engine.step import FieldCheck, Step, field_check
from oncebox.formats import (
    Codec,
    Decoded,
    Delivery,
    Identity,
    Invalid,
    Oversize,
    Unreadable,
    Verified,
    identify,
)
from oncebox.formats.jsontext import compact_encoder, sorted_ascii_strings
from oncebox.logtext import escaped

logger = logging.getLogger("oncebox")

DEAD_LETTER_HEAD = 65_536


@dataclass(frozen=True)
class ActiveInbox:
    """A declared inbox with its codec and apply step resolved."""

    row: Inbox
    codec: Codec
    apply: Step
    forward: tuple[Destination, ...] = ()  # where what it accepts is forwarded

    @property
    def name(self) -> str:
        return self.row.name

    @cached_property
    def check(self) -> FieldCheck | None:
        """What the apply step needs of a delivery's fields, checked at decode (asked of
        the step once: every ingest reads it)."""
        return field_check(self.apply)


class Prepared(NamedTuple):
    """One delivery after the pure steps: decoded and identified, or refused.

    ``ident`` (the identity's SHA-256, what stores key records by) and ``witness`` (the
    witness as bytes) are computed here, once per delivery. A named tuple: one is built
    per delivery, and a frozen dataclass costs several times more to build.
    """

    delivery: Delivery
    decoded: Decoded | None = None
    identity: Identity | None = None
    invalid: Invalid | None = None
    ident: bytes | None = None
    witness: bytes | None = None


# A Prepared from all six of its fields, at C speed (a named tuple's own __new__ is Python).
_prepared = partial(tuple.__new__, Prepared)


def prepare(codec: Codec, delivery: Delivery, check: FieldCheck | None = None) -> Prepared:
    """Bound the raw size, then decode, validate (the codec's rules, then ``check``: what
    the apply step needs of the fields) and identify; never touches storage."""
    if _usual(delivery, codec.max_bytes):
        return _decoded(codec, delivery, check)  # none of the checks below
    unstorable = _unstorable(delivery)
    if unstorable is not None:
        # Kept with its text facts escaped, so its dead letter can be stored at all.
        delivery = _escaped(delivery)
    if isinstance(delivery, Oversize):  # its transport kept only the head of it
        detail = delivery.detail or f"{delivery.length} bytes exceeds {codec.max_bytes}"
        return Prepared(delivery, invalid=Invalid("too_large", detail))
    if len(delivery.body) > codec.max_bytes:
        invalid = Invalid("too_large", f"{len(delivery.body)} bytes exceeds {codec.max_bytes}")
        return Prepared(delivery, invalid=invalid)
    if isinstance(delivery, Unreadable):  # its transport adapter could not read it
        return Prepared(delivery, invalid=Invalid(delivery.reason, delivery.detail))
    if unstorable is not None:
        return Prepared(delivery, invalid=unstorable)
    return _decoded(codec, delivery, check)


def _usual(delivery: Delivery, max_bytes: int) -> bool:
    """Whether a delivery is the usual kind, decoded at once: read whole (not an
    Oversize's head or Unreadable), its key plain text, no transport facts to check,
    within the size bound."""
    key = delivery.key
    return (
        type(delivery) is Delivery
        and (key is None or (key.isascii() and "\x00" not in key))
        and delivery.snapshot_id is None
        and delivery.device_time is None
        and delivery.delivery_id is None
        and len(delivery.body) <= max_bytes
    )


def _decoded(codec: Codec, delivery: Delivery, check: FieldCheck | None) -> Prepared:
    try:
        decoded = codec.decode(delivery)
        if check is not None:
            check(decoded.fields)
        identity = identify(codec, decoded)
    except Exception as exc:
        return refused(delivery, exc)
    return _prepared((delivery, decoded, identity, None, identity.digest_bytes,
                      identity.witness_bytes))  # fmt: skip


def refused(delivery: Delivery, exc: Exception) -> Prepared:
    """What a delivery whose decode, field check or identity raised is: refused for the
    rule it broke, or, where the codec itself failed, as ``codec_error`` (a user codec's
    bug must not lose the delivery). Also what one is whose fields the codec gave cannot
    be written (:func:`fields_json`), found where its record or newcomer is made."""
    if isinstance(exc, Invalid):
        return Prepared(delivery, invalid=exc)
    return Prepared(delivery, invalid=Invalid("codec_error", f"{type(exc).__name__}: {exc}"))


def prepare_all(
    codec: Codec, deliveries: Sequence[Delivery], check: FieldCheck | None = None
) -> list[Prepared]:
    """:func:`prepare` of each delivery of a batch, in order. The usual ones (what
    :func:`_usual` takes) are decoded and identified in this one loop, with what
    :func:`_usual`, :func:`_decoded` and :func:`~oncebox.formats.identify` do written out:
    it runs over every delivery of every batch, and their calls and the partials that
    made their tuples cost a keyed duplicate about 4% of its instructions (checked
    against :func:`prepare` in tests/test_cpu_round_four.py and test_cpu_round_six.py)."""
    bound = codec.max_bytes
    try:  # read once a batch: a codec's identity mode and decode are fixed
        decode, by_content = codec.decode, codec.identity == "content"
    except Exception:  # a user codec's bug: each delivery refused for it, as prepare does
        return [prepare(codec, delivery, check) for delivery in deliveries]
    sha256, new, plain = hashlib.sha256, tuple.__new__, Delivery
    prepared: list[Prepared] = []
    add = prepared.append
    for delivery in deliveries:
        key = delivery.key
        if not (
            type(delivery) is plain
            and (key is None or (key.isascii() and "\x00" not in key))
            and delivery.snapshot_id is None
            and delivery.device_time is None
            and delivery.delivery_id is None
            and len(delivery.body) <= bound
        ):
            add(prepare(codec, delivery, check))
            continue
        try:
            decoded = decode(delivery)
            if check is not None:
                check(decoded.fields)
            # identify(codec, decoded), in line.
            witness = sha256(decoded.content).digest()
            witness_hex = witness.hex()
            identity = witness_hex if by_content else decoded.key
            if not identity:
                raise Invalid("missing_key", f"codec {codec.name} gave no identity key")
            ident = sha256(identity.encode("utf-8")).digest()
            if "\x00" in identity:
                raise Invalid("bad_key", f"codec {codec.name} gave an identity key holding a NUL")
        except Exception as exc:
            add(refused(delivery, exc))
            continue
        found = new(Identity, (identity, witness_hex, ident, witness))
        add(new(Prepared, (delivery, decoded, found, None, ident, witness)))
    return prepared


_TEXT_FACTS = ("key", "snapshot_id", "device_time", "delivery_id")


def _unstorable(delivery: Delivery) -> Invalid | None:
    """Why a delivery's key or a transport fact cannot be stored as text, if it cannot:
    a lone surrogate has no UTF-8 form, and PostgreSQL holds no NUL in text. Refused
    here, as that delivery's own dead letter, instead of failing its whole batch."""
    for name in _TEXT_FACTS:
        value = getattr(delivery, name)
        if value is None or (value.isascii() and "\x00" not in value):
            continue
        if "\x00" in value:
            why = "holds a NUL character"
        else:
            try:
                value.encode("utf-8")
                continue
            except UnicodeEncodeError:
                why = "holds a lone surrogate, which is not text"
        reason = "bad_key" if name == "key" else "bad_envelope"
        return Invalid(reason, f"the delivery's {name.replace('_', ' ')} {why}")
    return None


def _escape(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def _escaped(delivery: Delivery) -> Delivery:
    """``delivery`` with its key and text facts escaped as a store can hold them."""
    return replace(
        delivery,
        key=_escape(delivery.key),
        snapshot_id=_escape(delivery.snapshot_id),
        device_time=_escape(delivery.device_time),
        delivery_id=_escape(delivery.delivery_id),
    )


# The arrival of a delivery without transport facts (nearly every one): Arrival is
# immutable, so one serves all.
NO_ARRIVAL = Arrival()


def arrival(delivery: Delivery) -> Arrival:
    """The transport facts a delivery leaves beside its record; never identity."""
    facts = (delivery.device_time, delivery.snapshot_id, delivery.delivery_id)
    if delivery.signature is not None:
        return Arrival(*facts, signature_fact(delivery.signature))
    if facts == (None, None, None):
        return NO_ARRIVAL  # the common case
    return Arrival(*facts)


def signature_fact(signature: Verified) -> str:
    """What a verified signature vouched for, as the store keeps it: the scheme, the
    time the sender signed (None for GitHub, which signs none) and whether the signature
    covers the key. Not the signature itself and never the secret: a record must not
    help anyone forge the next one."""
    fact = {"scheme": signature.scheme, "signed_at": signature.timestamp,
            "key_signed": signature.key_signed}  # fmt: skip
    return json.dumps(fact, separators=(",", ":"))


def signature_of_fact(fact: str | None, key: str | None) -> Verified | None:
    """The :class:`Verified` a stored fact records (for a dead letter's replay)."""
    if fact is None:
        return None
    found = json.loads(fact)
    return Verified(found["scheme"], key, found["signed_at"], found["key_signed"])


_FIELDS_ENCODE = compact_encoder(sort_keys=True, ensure_ascii=True)


def fields_json(decoded: Decoded) -> str:
    """The fields as a record or a newcomer keeps them: compact JSON, members sorted,
    ASCII only. Raises where a codec gave fields JSON cannot write (a user codec's
    datetime, say), or its own ``fields_text`` that is not such text (printable ASCII:
    the encoder escapes every control character, and PostgreSQL holds no NUL)."""
    text = decoded.fields_text
    if text is not None:
        if type(text) is str and text.isascii() and text.isprintable():
            return text  # the codec wrote them with its canonical form
        raise TypeError("the codec's fields_text is not printable ASCII text")
    fields = decoded.fields
    if not fields:
        return "{}"  # opaque codecs (keyed, feed without facts) name no fields
    # The usual fields (plain names to plain strings) written without the encoder.
    plain = sorted_ascii_strings(fields)
    if plain is not None:
        return plain
    return _FIELDS_ENCODE(fields if type(fields) is dict else dict(fields))


def alert(decisions: list[Decision]) -> None:
    """Tell operators about new conflicts, once they are committed. The identity is
    the sender's key, so it is escaped and quoted: no key can end the line or add a
    field to it."""
    for d in decisions:
        if d.first_quarantine:
            logger.warning(
                'conflict quarantined: inbox=%s identity="%s" record=%s quarantine=%s',
                escaped(d.inbox, ' "'),
                escaped(d.identity or "", '"'),
                d.record_id,
                d.quarantine_id,
            )
