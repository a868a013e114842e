"""Dead letters with a life cycle (issue 23): a replay refused again counts on the same
dead letter, a corrected replay names both digests, archiving, a line of an export fed
back closes its dead letter, and bulk actions by filter, previewed and logged once.
Every backend."""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import BoxFactory
from oncebox import Delivery
from oncebox.errors import InvalidOperation, UnknownValue
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces import letters
from oncebox.surfaces.lines import delivery_from_line

BAD = b"H1|1|K1|MED|3|86|#00"  # a wrong trailer: bad_checksum


def _bulk_entries(box: object) -> list[dict[str, object]]:
    entries = box.log_entries()  # type: ignore[attr-defined]
    return [json.loads(e.state) for e in entries if e.step == "bulk"]


def test_a_replay_refused_again_counts_on_the_same_dead_letter(make_box: BoxFactory) -> None:
    box = make_box()
    refused = box.ingest("ussd", Delivery(BAD, key="a-1"))
    letter_id = refused.dead_letter_id
    assert letter_id is not None
    for _ in range(2):
        again = box.replay(letter_id, actor="ops")
        assert (str(again.verdict), again.reason) == ("rejected", "bad_checksum")
        assert again.dead_letter_id == letter_id
    [letter] = box.dead_letters("ussd")  # no new dead letter
    assert (letter.status, letter.attempts, letter.last_reason) == ("open", 2, "bad_checksum")
    assert letter.last_tried is not None
    assert box.stats("ussd")["verdicts"]["rejected"] == 1  # counted once, when it arrived


def test_a_corrected_replay_closes_it_and_the_log_names_both_digests(
    make_box: BoxFactory,
) -> None:
    box = make_box()
    letter_id = box.ingest("ussd", Delivery(BAD, key="a-1")).dead_letter_id or 0
    good = make_frame(1, "K1", "MED", 3, 86).encode()
    with pytest.raises(InvalidOperation, match="note"):
        box.replay(letter_id, actor="ops", body=good)  # a correction needs a note
    decided = box.replay(letter_id, actor="ops", note="trailer recomputed", body=good)
    assert str(decided.verdict) == "accepted"
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.replayed_by, letter.replay_verdict) == (
        "replayed", "ops", "accepted"
    )  # fmt: skip
    state = json.loads([e for e in box.log_entries() if e.step == "replay"][-1].state)
    assert state["corrected"] == {
        "old_sha256": hashlib.sha256(BAD).hexdigest(),
        "new_sha256": hashlib.sha256(good).hexdigest(),
    }
    assert (state["actor"], state["note"]) == ("ops", "trailer recomputed")
    assert box.triage("ussd")["headcount"] == 3 and box.verify().ok


def test_archive_needs_a_note_and_happens_once(make_box: BoxFactory) -> None:
    box = make_box()
    letter_id = box.ingest("ussd", Delivery(b"junk", key="j")).dead_letter_id or 0
    with pytest.raises(InvalidOperation, match="note"):
        box.archive(letter_id, "ops", "")
    archived = box.archive(letter_id, "ops", "test traffic")
    assert (archived.status, archived.archived_by, archived.archive_note) == (
        "archived", "ops", "test traffic"
    )  # fmt: skip
    with pytest.raises(InvalidOperation, match="archived already"):
        box.archive(letter_id, "ops", "again")
    assert box.dead_letters("ussd", status="open") == []
    assert [d.id for d in box.dead_letters("ussd", status="archived")] == [letter_id]


def test_unknown_status_and_reason_name_the_known_ones(make_box: BoxFactory) -> None:
    box = make_box()
    with pytest.raises(UnknownValue, match="did you mean bad_checksum") as caught:
        box.dead_letters("ussd", reason="bad_chksum")
    assert "bad_format" in str(caught.value)
    with pytest.raises(UnknownValue, match="open, replayed, archived"):
        box.dead_letters("ussd", status="closed")


def test_a_line_of_the_export_fed_back_closes_its_dead_letter(make_box: BoxFactory) -> None:
    box = make_box()
    ids = [box.ingest("ussd", Delivery(BAD, key=f"a{i}-{i}")).dead_letter_id for i in range(3)]
    exported = list(letters.lines(box, ["ussd"], letters.Query(), 100, []))
    assert [json.loads(line)["dead_letter"] for line in exported] == ids
    # Fed back unfixed: the same three dead letters count an attempt each, no new ones.
    box.ingest_batch("ussd", [delivery_from_line("ussd-h1", line) for line in exported])
    listed = box.dead_letters("ussd")
    assert [(d.id, d.attempts, d.status) for d in listed] == [(i, 1, "open") for i in ids]
    # Fixed (the frames re-made), each line closes its own.
    fixed = []
    for i, line in enumerate(exported):
        envelope = json.loads(line)
        envelope["frame"] = make_frame(i, "K1", "MED", 3, 86)
        fixed.append(delivery_from_line("ussd-h1", json.dumps(envelope).encode()))
    decided = box.ingest_batch("ussd", fixed)
    assert [str(d.verdict) for d in decided] == ["accepted"] * 3
    assert [d.status for d in box.dead_letters("ussd")] == ["replayed"] * 3
    assert box.stats("ussd")["verdicts"]["rejected"] == 3


def test_bulk_replay_and_archive_by_filter_are_previewed_and_logged_once(
    make_box: BoxFactory,
) -> None:
    box = make_box()
    for i in range(3):
        box.ingest("ussd", Delivery(BAD, key=f"c-{i}"))
    box.ingest("ussd", Delivery(b"junk", key="j"))
    chosen = box.letter_filter(["ussd"], reason="bad_checksum", status="open")
    count, first = box.letters_matching(["ussd"], chosen)
    assert count == 3 and [letter.key for _, letter in first] == ["c-0", "c-1", "c-2"]
    run = box.bulk_replay(["ussd"], chosen, "ops", limit=2)
    assert run.count == 2 and run.next_after == first[1][1].id
    assert {item.outcome for item in run.items} == {"rejected:bad_checksum"}
    on = box.letter_filter(["ussd"], reason="bad_checksum", after=run.next_after or 0)
    rest = box.bulk_replay(["ussd"], on, "ops")
    assert rest.count == 1 and rest.next_after is None
    archived = box.bulk_archive(["ussd"], chosen, "ops", "sender retired")
    assert archived.count == 3 and {i.outcome for i in archived.items} == {"archived"}
    assert box.letters_matching(["ussd"], chosen)[0] == 0
    entries = _bulk_entries(box)
    assert [(e["action"], e["count"], e["actor"]) for e in entries] == [
        ("replay", 2, "ops"), ("replay", 1, "ops"), ("archive", 3, "ops")
    ]  # fmt: skip
    assert entries[2]["filter"]["reason"] == "bad_checksum" and box.verify().ok


def test_bulk_resolve_by_identity_prefix_keeps_or_accepts(make_box: BoxFactory) -> None:
    box = make_box()
    for i in range(3):
        key = f"rec{i}" if i < 2 else f"other{i}"
        box.ingest("ussd", Delivery(make_frame(i, "K1", "MED", 3, 86).encode(), key=key))
        box.ingest("ussd", Delivery(make_frame(i, "K1", "MED", 9, 86).encode(), key=key))
    count, rows = box.conflicts_matching("ussd", prefix="rec")
    assert count == 2 and len(rows) == 2
    with pytest.raises(UnknownValue, match="keep, accept"):
        box.bulk_resolve("ussd", "take", "n", "ops", prefix="rec")
    run = box.bulk_resolve("ussd", "keep", "first counts stand", "ops", prefix="rec")
    assert run.count == 2 and {item.outcome for item in run.items} == {"kept"}
    assert box.conflicts_matching("ussd")[0] == 1
    assert _bulk_entries(box)[-1]["action"] == "resolve:keep" and box.verify().ok


def test_a_replayed_dead_letter_takes_no_second_correction_nor_reopens(
    make_box: BoxFactory,
) -> None:
    """A replayed dead letter's delivery is decided: corrected again (by a second
    operator at once, say), it would make a second record of one arrival, so that is
    refused; replayed as kept and refused again, it stays replayed, never open again."""
    box = make_box()
    letter_id = box.ingest("ussd", Delivery(BAD, key="a-1")).dead_letter_id or 0
    good = make_frame(1, "K1", "MED", 3, 86).encode()
    first = box.replay(letter_id, actor="ops", note="fixed", body=good)
    assert str(first.verdict) == "accepted"
    other = make_frame(1, "K1", "MED", 5, 86).encode()
    with pytest.raises(InvalidOperation, match="replayed already"):
        box.replay(letter_id, actor="ops2", note="fixed again", body=other, key="a-2")
    again = box.replay(letter_id, actor="ops2")  # as kept: a resend, refused again
    assert (str(again.verdict), again.reason) == ("rejected", "bad_checksum")
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.replayed_by, letter.replay_verdict, letter.attempts) == (
        "replayed", "ops", "accepted", 2
    )  # fmt: skip
    box.archive(letter_id, "ops", "done with")  # put aside, it is still decided
    with pytest.raises(InvalidOperation, match="replayed already"):
        box.replay(letter_id, actor="ops2", note="fixed again", body=other, key="a-2")
    assert box.stats("ussd")["records"] == 1 and box.triage("ussd")["headcount"] == 3


def test_a_line_of_a_replayed_dead_letter_refused_leaves_it_replayed(
    make_box: BoxFactory,
) -> None:
    """An export's line naming a dead letter closed by a corrected replay is refused
    again (it carries the bytes kept): one attempt more, never open again."""
    box = make_box()
    letter_id = box.ingest("ussd", Delivery(BAD, key="a-1")).dead_letter_id or 0
    [line] = list(letters.lines(box, ["ussd"], letters.Query(), 100, []))
    good = make_frame(1, "K1", "MED", 3, 86).encode()
    box.replay(letter_id, actor="ops", note="fixed", body=good)
    [again] = box.ingest_batch("ussd", [delivery_from_line("ussd-h1", line)])
    assert (str(again.verdict), again.reason) == ("rejected", "bad_checksum")
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.replay_verdict, letter.attempts) == ("replayed", "accepted", 2)
    assert box.dead_letters("ussd", status="open") == []


def test_a_bulk_archive_racing_one_archive_says_that_one_failed(
    make_box: BoxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of the chosen dead letters archived by another operator between the bulk
    call's choice and its transaction: that item fails (archived already), the others
    are archived, as the answer's items promise, not the whole call refused."""
    box = make_box()
    ids = [box.ingest("ussd", Delivery(BAD, key=f"r{i}-{i}")).dead_letter_id for i in range(3)]
    chosen = type(box)._choose

    def choose_then_race(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        found = chosen(self, *args, **kwargs)
        box.archive(ids[1] or 0, "ana", "seen to")  # meanwhile, at another desk
        return found

    monkeypatch.setattr(type(box), "_choose", choose_then_race)
    run = box.bulk_archive(["ussd"], box.letter_filter(["ussd"]), "ops", "sender retired")
    assert [(i.id, i.outcome) for i in run.items] == [
        (ids[0], "archived"), (ids[1], "failed"), (ids[2], "archived")
    ]  # fmt: skip
    assert [d.archived_by for d in box.dead_letters("ussd")] == ["ops", "ana", "ops"]
