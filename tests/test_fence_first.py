"""On a lease-fenced inbox the fence comes first (issue 19, item 8): a delivery sent
without the scope's current lease stores nothing at all, valid or not, not even a dead
letter, and may not be acknowledged."""

from __future__ import annotations

import pytest

from conftest import BoxFactory
from oncebox import Delivery, ManualClock, Verdict

OVER = b"x" * (1_048_576 + 1)  # past feed's bound
INVALID = {"empty": b"", "too large": OVER}


@pytest.mark.parametrize("body", list(INVALID.values()), ids=list(INVALID))
@pytest.mark.parametrize("holding", ["no token", "stale token", "expired lease", "no lease"])
def test_invalid_input_without_the_current_lease_stores_nothing(
    make_box: BoxFactory, clock: ManualClock, body: bytes, holding: str
) -> None:
    box = make_box()
    token: int | None = None
    if holding != "no lease":
        old = box.lease("feed", "S1", 60).token
        token = box.lease("feed", "S1", 60).token
        if holding == "no token":
            token = None
        elif holding == "stale token":
            token = old
        else:
            clock.advance(61)
    decision = box.ingest("feed", Delivery(body, snapshot_id="S1", lease_token=token))
    assert decision.verdict is Verdict.REJECTED and not decision.may_ack
    expected = "expired_lease" if holding == "expired lease" else "stale_token"
    assert decision.reason == expected and decision.dead_letter_id is None
    assert box.dead_letters("feed") == []
    assert box.stats("feed")["dead_letters"] == 0


def test_invalid_input_under_the_current_lease_is_dead_lettered(make_box: BoxFactory) -> None:
    box = make_box()
    token = box.lease("feed", "S1", 60).token
    refused = box.ingest_batch(
        "feed",
        [Delivery(body, snapshot_id="S1", lease_token=token) for body in (b"", OVER, b"row-1")],
    )
    assert [(d.verdict, d.reason, d.may_ack) for d in refused] == [
        (Verdict.REJECTED, "bad_format", True),
        (Verdict.REJECTED, "too_large", True),
        (Verdict.ACCEPTED, None, True),
    ]
    assert sorted(letter.reason for letter in box.dead_letters("feed")) == [
        "bad_format",
        "too_large",
    ]


def test_a_batch_mixing_fenced_and_leased_senders_stores_only_the_leased(
    make_box: BoxFactory,
) -> None:
    box = make_box()
    token = box.lease("feed", "S1", 60).token
    batch = [
        Delivery(b"", snapshot_id="S1", lease_token=token + 100),  # forged: nothing
        Delivery(b"", snapshot_id="S2", lease_token=token),  # another scope's: nothing
        Delivery(b"", snapshot_id="S1", lease_token=token),  # held: a dead letter
    ]
    decisions = box.ingest_batch("feed", batch)
    assert [d.reason for d in decisions] == ["stale_token", "stale_token", "bad_format"]
    assert [d.may_ack for d in decisions] == [False, False, True]
    assert len(box.dead_letters("feed")) == 1
