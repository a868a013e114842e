"""A key or transport fact no store can hold as text is that delivery's dead letter
(issue 19, item 10), never a raw encoding error that decides nothing of its batch."""

from __future__ import annotations

import pytest

from conftest import SESSION, BoxFactory
from oncebox import Delivery, InvalidOperation, Verdict

LONE = "bad\udfff"
NUL = "bad\x00key"
FRAME = SESSION[0][1].encode()


@pytest.mark.parametrize("value", [LONE, NUL], ids=["lone surrogate", "NUL"])
@pytest.mark.parametrize("inbox", ["ussd", "listing", "feed"])
def test_an_unstorable_key_is_a_bad_key_dead_letter(
    make_box: BoxFactory, inbox: str, value: str
) -> None:
    box = make_box()
    body = {"ussd": FRAME, "listing": b"{}", "feed": b"row"}[inbox]
    token = box.lease("feed", "S", 60).token if inbox == "feed" else None
    batch = [
        Delivery(body, key=value, snapshot_id="S", lease_token=token),
        Delivery(FRAME, key="rec1", snapshot_id="S", lease_token=token),
    ]
    first, second = box.ingest_batch(inbox, batch)
    assert (first.verdict, first.reason, first.may_ack) == (Verdict.REJECTED, "bad_key", True)
    assert second.verdict is not None  # decided, whatever the codec makes of it
    [letter, *_] = box.dead_letters(inbox)
    assert letter.reason == "bad_key" and letter.key is not None
    assert letter.key.encode("utf-8") and "\x00" not in letter.key  # stored escaped


@pytest.mark.parametrize("fact", ["snapshot_id", "device_time", "delivery_id"])
def test_an_unstorable_fact_is_a_bad_envelope_dead_letter(make_box: BoxFactory, fact: str) -> None:
    box = make_box()
    odd = Delivery(FRAME, key="rec1", **{fact: LONE})  # type: ignore[arg-type]
    decisions = box.ingest_batch("ussd", [odd, Delivery(FRAME, key="rec1")])
    assert [d.reason for d in decisions] == ["bad_envelope", None]
    assert decisions[1].verdict is Verdict.ACCEPTED
    assert box.triage("ussd")["headcount"] == 3


def test_a_lease_scope_that_is_not_text_is_a_clear_error(make_box: BoxFactory) -> None:
    box = make_box()
    with pytest.raises(InvalidOperation, match="lease scope"):
        box.lease("feed", LONE, 60)
