"""A batch decides and writes what deciding its deliveries one by one does (the decision
path's contract, docs/architecture.md#decision-path), in the cases a review found it did
not: the same dead letter delivered again twice in one batch, and a user codec whose
fields cannot be written, which must cost its own delivery a dead letter (codec_error)
and not its whole batch (docs/codecs.md#your-own-codec: nothing is lost)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

import oncebox
from oncebox import Decoded, Delivery, InboxSpec, ManualClock
from oncebox.formats.codec import IdentityMode
from oncebox.formats.ussd_h1 import make_frame

BROKEN = b"H1|1|K1|MED|3|50|#zz"  # a broken trailer: bad_format
GOOD = make_frame(1, "K1", "MED", 3, 50).encode()


def _replays(batched: bool, second: bytes) -> tuple[list[Any], list[dict[str, Any]], int]:
    """A dead letter, then two deliveries naming it (the first refused again): their
    decisions, the replay entries of the log, and the dead letter's attempts."""
    inboxes = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    with oncebox.open("sqlite:///:memory:", inboxes=inboxes, clock=ManualClock()) as box:
        letter = box.ingest("ussd", Delivery(BROKEN, key="r-1")).dead_letter_id
        assert letter is not None
        again = [
            Delivery(BROKEN, key="r-1", dead_letter=letter),
            Delivery(second, key="r-1", dead_letter=letter),
        ]
        if batched:
            decisions = box.ingest_batch("ussd", again)
        else:
            decisions = [box.ingest_batch("ussd", [one])[0] for one in again]
        entries = [json.loads(e.state) for e in box.log_entries() if e.step == "replay"]
        found = box.get_dead_letter(letter)
        assert found is not None
        return decisions, entries, found[1].attempts


@pytest.mark.parametrize("second", [BROKEN, GOOD], ids=["refused-again", "accepted"])
def test_one_dead_letter_twice_in_a_batch_logs_each_attempt_as_one_by_one(second: bytes) -> None:
    batch, batch_entries, batch_attempts = _replays(True, second)
    alone, alone_entries, alone_attempts = _replays(False, second)
    assert batch == alone
    assert batch_attempts == alone_attempts == 2
    # The log says which attempt each one was: the first, then the second.
    assert [e["attempts"] for e in alone_entries] == [1, 2]
    assert batch_entries == alone_entries


class _DatedCodec:
    """A user's codec that hands on a field JSON cannot write (a datetime) for a body
    starting with ``d``, its own ``fields_text`` that is no text a store can hold (a lone
    surrogate) for one starting with ``s``, and plain text fields otherwise."""

    name = "dated-review"
    identity: IdentityMode = "key"
    max_bytes = 1024

    def decode(self, delivery: Delivery) -> Decoded:
        if delivery.body.startswith(b"d"):
            return Decoded(delivery.body, delivery.key, {"at": datetime.datetime(2026, 1, 1)})
        if delivery.body.startswith(b"s"):
            return Decoded(delivery.body, delivery.key, {"n": "\ud800"}, '{"n":"\ud800"}')
        return Decoded(delivery.body, delivery.key, {"n": str(len(delivery.body))})


@pytest.mark.parametrize("store", ["memory", "file"])
def test_fields_a_codec_cannot_have_written_cost_only_their_delivery(
    store: str, tmp_path: Any
) -> None:
    url = "sqlite:///:memory:" if store == "memory" else f"sqlite:///{tmp_path / 'o.db'}"
    inboxes = [InboxSpec("dated", codec=_DatedCodec())]
    with oncebox.open(url, inboxes=inboxes, clock=ManualClock()) as box:
        box.ingest("dated", Delivery(b"first", key="c"))
        batch = [
            Delivery(b"plain", key="a"),
            Delivery(b"dated", key="b"),  # new: its record's fields
            Delivery(b"dated", key="c"),  # a conflict: its newcomer's fields
            Delivery(b"plain", key="b"),  # b stays free: a refused delivery leaves no trace
            Delivery(b"surrogate", key="d"),
        ]
        decisions = box.ingest_batch("dated", batch)
        got = [(str(d.verdict), d.reason, d.may_ack) for d in decisions]
        assert got == [
            ("accepted", None, True),
            ("rejected", "codec_error", True),
            ("rejected", "codec_error", True),
            ("accepted", None, True),
            ("rejected", "codec_error", True),
        ]
        letters = box.dead_letters("dated")
        heads = sorted(bytes(letter.head) for letter in letters)
        assert heads == [b"dated", b"dated", b"surrogate"]
        assert {letter.reason for letter in letters} == {"codec_error"}
        assert box.quarantined("dated", status=None) == []
        assert box.verify().ok
        # One by one, the same.
        each = [box.ingest_batch("dated", [one])[0] for one in batch]
        assert [(str(d.verdict), d.reason) for d in each] == [
            ("duplicate", None),
            ("rejected", "codec_error"),
            ("rejected", "codec_error"),
            ("duplicate", None),
            ("rejected", "codec_error"),
        ]


@pytest.mark.parametrize("seal", [True, False], ids=["sealed", "deferred"])
def test_a_replayed_dead_letter_answers_with_its_records_log_position(seal: bool) -> None:
    """A dead letter delivered again by an operator and accepted: its record is sealed
    with the replay, and the answer gives its position, as an ingest's does (None only
    where sealing is deferred, as for an ingest)."""
    inboxes = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    url = "sqlite:///:memory:"
    with oncebox.open(url, inboxes=inboxes, clock=ManualClock(), seal=seal) as box:
        letter = box.ingest("ussd", Delivery(BROKEN, key="r-1")).dead_letter_id
        assert letter is not None
        replayed = box.replay(letter, body=GOOD, note="trailer fixed")
        ingested = box.ingest(
            "ussd", Delivery(make_frame(2, "K1", "MED", 3, 50).encode(), key="r-2")
        )
        assert (str(replayed.verdict), str(ingested.verdict)) == ("accepted", "accepted")
        record = box.record("ussd", "r-1")
        assert record is not None
        assert replayed.log_position == record.log_seq
        if seal:
            assert replayed.log_position is not None
            assert ingested.log_position is not None
            assert replayed.log_position < ingested.log_position
        else:
            assert replayed.log_position is None
            assert ingested.log_position is None
