"""A verified webhook signature is recorded with what the delivery left, on every backend:
on its record, its quarantine row, its dead letter, and through a dead letter's replay.
Only what the signature vouched for (scheme, signed time, whether it covers the key) is
kept: never the secret, nor the signature itself."""

from __future__ import annotations

import pytest

from conftest import BoxFactory
from oncebox import Delivery, InboxSpec
from oncebox.engine.views import signature_of
from oncebox.errors import ConfigError
from oncebox.formats import Verified
from oncebox.surfaces.views import as_json

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STANDARD = {"scheme": "standard-webhooks", "secret": SECRET}


def hooks(max_depth: int = 20) -> InboxSpec:
    return InboxSpec("hooks", codec="json", settings={"max_depth": max_depth}, webhook=STANDARD)


def test_the_signature_is_kept_beside_the_record_the_newcomer_and_the_dead_letter(
    make_box: BoxFactory,
) -> None:
    box = make_box([hooks(max_depth=2)])
    signed = Verified("standard-webhooks", "msg_1", 1_800_000_000, key_signed=True)
    fact = {"scheme": "standard-webhooks", "signed_at": 1_800_000_000, "key_signed": True}

    first = box.ingest("hooks", Delivery(b'{"n": 1}', key="msg_1", signature=signed))
    again = box.ingest("hooks", Delivery(b'{"n": 2}', key="msg_1", signature=signed))
    deep = box.ingest("hooks", Delivery(b'{"a": {"b": {"c": 1}}}', key="msg_2", signature=signed))
    unsigned = box.ingest("hooks", Delivery(b'{"n": 3}', key="bearer-1"))
    assert (first.verdict, again.verdict, deep.reason) == ("accepted", "conflict", "too_deep")

    record = box.record("hooks", "msg_1")
    [newcomer] = box.quarantined("hooks")
    [letter] = box.dead_letters("hooks")
    assert record is not None and unsigned.record_id is not None
    assert signature_of(record) == signature_of(newcomer) == signature_of(letter) == fact
    assert as_json(letter)["signature"] == fact  # what the CLI and HTTP views show
    plain = box.record("hooks", "bearer-1")
    assert plain is not None and plain.signature is None
    for kept in (record, newcomer, letter):
        assert SECRET.removeprefix("whsec_") not in (kept.signature or "")

    # The bound is raised, and the dead letter replayed: its record keeps the signature
    # the sender's request was verified with when it came.
    box.declare(hooks(max_depth=5))
    replayed = box.replay(letter.id, actor="ops")
    assert replayed.verdict == "accepted"
    again_record = box.record("hooks", "msg_2")
    assert again_record is not None and signature_of(again_record) == fact


def test_a_webhook_inbox_cannot_be_lease_fenced(make_box: BoxFactory) -> None:
    spec = InboxSpec("hooks", codec="keyed", webhook=STANDARD, fenced=True)
    with pytest.raises(ConfigError, match="cannot be lease-fenced"):
        make_box([spec])
