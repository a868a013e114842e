"""Seed 003's self-test, case by case, on every backend: the USSD receiver."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import oncebox
from conftest import INBOXES, SESSION
from helpers import frame
from oncebox import Oncebox
from oncebox.formats.ussd_h1 import make_frame


def send_session(box: Oncebox, inbox: str = "ussd") -> list[str]:
    return [str(box.ingest(inbox, frame(fid, text)).verdict) for fid, text in SESSION]


def test_first_session_applies_each_frame_once(box: Oncebox) -> None:
    assert send_session(box) == ["accepted"] * 3
    assert box.triage("ussd")["headcount"] == 23


def test_full_retransmit_is_all_duplicates_and_counts_nothing_twice(box: Oncebox) -> None:
    send_session(box)
    assert send_session(box) == ["duplicate"] * 3
    triage = box.triage("ussd")
    assert triage["headcount"] == 23
    assert triage["cases"] == 3
    record = box.record("ussd", "rec1")
    assert record is not None and record.seen_count == 2


def test_partial_session_then_full_retransmit_applies_the_missing_frames(box: Oncebox) -> None:
    assert str(box.ingest("ussd", frame(*SESSION[1])).verdict) == "accepted"
    assert send_session(box) == ["accepted", "duplicate", "accepted"]
    assert box.triage("ussd")["headcount"] == 23


def test_conflicting_frame_is_quarantined_first_write_wins(
    box: Oncebox, caplog: pytest.LogCaptureFixture
) -> None:
    send_session(box)
    with caplog.at_level(logging.WARNING, logger="oncebox"):
        decision = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86)))
    assert str(decision.verdict) == "conflict"
    assert decision.reason == "same_identity_different_content"
    assert decision.may_ack
    assert box.triage("ussd")["headcount"] == 23
    record = box.record("ussd", "rec1")
    assert record is not None and record.content == SESSION[0][1].encode()
    [row] = box.quarantined("ussd")
    assert row.content == make_frame(1, "Kakuma1", "MED", 9, 86).encode()
    assert row.reason == "same_identity_different_content"
    assert row.record_id == record.id
    assert "conflict" in caplog.text and "rec1" in caplog.text


def test_bad_trailer_is_rejected_before_dedup_and_leaves_no_state(box: Oncebox) -> None:
    send_session(box)
    corrupted = SESSION[0][1][:-2] + "00"
    decision = box.ingest("ussd", frame("rec9", corrupted))
    assert (str(decision.verdict), decision.reason) == ("rejected", "bad_checksum")
    assert box.record("ussd", "rec9") is None
    [letter] = box.dead_letters("ussd")
    assert letter.head == corrupted.encode() and letter.reason == "bad_checksum"
    # R1: the corrupted copy did not poison the frame id; a good copy still applies.
    assert str(box.ingest("ussd", frame("rec9", SESSION[0][1])).verdict) == "accepted"
    assert box.triage("ussd")["headcount"] == 26


def test_bad_format_is_rejected(box: Oncebox) -> None:
    decision = box.ingest("ussd", frame("rec9", "H1|9|Kakuma1|MED|3"))
    assert (str(decision.verdict), decision.reason) == ("rejected", "bad_format")
    assert box.record("ussd", "rec9") is None
    assert box.triage("ussd")["headcount"] == 0


def test_eviction_is_by_age_only(box: Oncebox, clock: object) -> None:
    from oncebox import ManualClock

    assert isinstance(clock, ManualClock)
    t0 = clock.now
    assert str(box.ingest("ussd", frame("old", SESSION[0][1])).verdict) == "accepted"
    clock.now = t0 + 72 * 3600
    [kept] = box.evict("ussd")
    assert kept.records == 0
    clock.now = t0 + 31 * 24 * 3600
    [evicted] = box.evict("ussd")
    assert evicted.records == 1
    [logged] = box.evictions("ussd")
    assert logged.kind == "record" and logged.first_seen == t0


def test_double_count_failure_mode_is_visible_in_the_demo() -> None:
    from oncebox.surfaces.demo import run_demo

    ussd = run_demo()["ussd"]
    assert ussd["headcount"] == 23
    assert ussd["headcount_without_dedup"] == 46
    assert ussd["partial_session_headcount"] == 23
    assert ussd["ranking"] == ["MED 3 (pri 86)", "SHE 8 (pri 71)", "WAT 12 (pri 69)"]
    assert not ussd["rec9_has_dedup_state"]


def test_accepting_a_correction_moves_totals_by_the_difference(box: Oncebox) -> None:
    send_session(box)
    corrected = make_frame(3, "Kakuma2", "WAT", 20, 90)
    decision = box.ingest("ussd", frame("rec3", corrected))
    assert decision.quarantine_id is not None
    row = box.resolve(decision.quarantine_id, "accept", "site confirmed 20 people")
    assert row.status == "accepted" and row.note == "site confirmed 20 people"
    triage = box.triage("ussd")
    assert triage["headcount"] == 23 - 12 + 20
    assert triage["cases"] == 3
    buckets = {(t["site"], t["need"]): (t["headcount"], t["cases"]) for t in triage["totals"]}
    assert ("Kakuma1", "WAT") not in buckets
    assert buckets[("Kakuma2", "WAT")] == (20, 1)
    assert triage["ranking"][0]["pri"] == 90
    record = box.record("ussd", "rec3")
    assert record is not None and record.revision == 2 and record.content == corrected.encode()
    [old] = box.revisions(record.id)
    assert old.revision == 1 and old.content == SESSION[2][1].encode()
    # The correction is now the record: a resend of it is a duplicate, and a resend of
    # the original is a new conflict for an operator, never a silent revert.
    assert str(box.ingest("ussd", frame("rec3", corrected)).verdict) == "duplicate"
    assert str(box.ingest("ussd", frame("rec3", SESSION[2][1])).verdict) == "conflict"
    assert box.triage("ussd")["headcount"] == 31


def test_keeping_the_original_closes_the_row_and_changes_nothing(box: Oncebox) -> None:
    send_session(box)
    decision = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86)))
    assert decision.quarantine_id is not None
    row = box.resolve(decision.quarantine_id, "keep", "typo at the kiosk")
    assert row.status == "kept"
    assert box.quarantined("ussd") == []
    assert box.triage("ussd")["headcount"] == 23
    with pytest.raises(Exception, match="already kept"):
        box.resolve(decision.quarantine_id, "accept", "changed my mind")


def test_repeated_conflict_is_counted_not_stored_twice(box: Oncebox) -> None:
    send_session(box)
    newcomer = make_frame(1, "Kakuma1", "MED", 9, 86)
    first = box.ingest("ussd", frame("rec1", newcomer))
    second = box.ingest("ussd", frame("rec1", newcomer))
    assert first.quarantine_id == second.quarantine_id
    [row] = box.quarantined("ussd")
    assert row.seen_count == 2
    other = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 7, 86)))
    assert other.quarantine_id != first.quarantine_id
    assert len(box.quarantined("ussd")) == 2


def test_frames_survive_a_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with oncebox.open(url, inboxes=INBOXES) as first:
        send_session(first)
    with oncebox.open(url, inboxes=INBOXES) as again:
        assert send_session(again) == ["duplicate"] * 3
        assert again.triage("ussd")["headcount"] == 23


def test_a_resend_after_keep_is_a_conflict_again_for_an_operator(
    box: Oncebox, caplog: pytest.LogCaptureFixture
) -> None:
    """A closed row does not absorb a later resend of its newcomer: the sender still
    says something other than the record, so an operator is told again."""
    send_session(box)
    newcomer = frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86))
    first = box.ingest("ussd", newcomer)
    assert first.quarantine_id is not None
    box.resolve(first.quarantine_id, "keep", "typo at the kiosk")
    with caplog.at_level(logging.WARNING, logger="oncebox"):
        again = box.ingest("ussd", newcomer)
    assert str(again.verdict) == "conflict" and again.may_ack
    assert again.first_quarantine
    assert again.quarantine_id is not None and again.quarantine_id != first.quarantine_id
    assert f"quarantine={again.quarantine_id}" in caplog.text
    [row] = box.quarantined("ussd")
    assert (row.id, row.seen_count, row.status) == (again.quarantine_id, 1, "open")
    [kept] = box.quarantined("ussd", status="kept")
    assert (kept.id, kept.seen_count) == (first.quarantine_id, 1)
    # Seen again while open, it counts on the open row, as any repeated conflict.
    assert box.ingest("ussd", newcomer).quarantine_id == again.quarantine_id
    assert [r.seen_count for r in box.quarantined("ussd")] == [2]
    assert box.triage("ussd")["headcount"] == 23


def test_a_resend_of_an_accepted_newcomer_the_record_moved_past_is_a_conflict_again(
    box: Oncebox,
) -> None:
    """Accepted, then superseded by a later revision: a resend of the first correction
    disagrees with the record as it now is, and waits for an operator again."""
    send_session(box)
    twenty = make_frame(3, "Kakuma2", "WAT", 20, 90)
    thirty = make_frame(3, "Kakuma2", "WAT", 30, 90)
    first = box.ingest("ussd", frame("rec3", twenty))
    assert first.quarantine_id is not None
    box.resolve(first.quarantine_id, "accept", "site confirmed 20 people")
    second = box.ingest("ussd", frame("rec3", thirty))
    assert second.quarantine_id is not None
    box.resolve(second.quarantine_id, "accept", "site confirmed 30 people")
    again = box.ingest("ussd", frame("rec3", twenty))
    assert str(again.verdict) == "conflict" and again.first_quarantine
    assert again.quarantine_id not in (first.quarantine_id, second.quarantine_id)
    assert again.revision == 3
    [row] = box.quarantined("ussd")
    assert row.id == again.quarantine_id and row.content == twenty.encode()
    box.resolve(row.id, "accept", "20 after all")
    record = box.record("ussd", "rec3")
    assert record is not None and record.revision == 4 and record.content == twenty.encode()
    assert box.triage("ussd")["headcount"] == 23 - 12 + 20
