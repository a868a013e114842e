"""The ingest engine beyond the seeds' cases: batches, content identity, retention."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oncebox
from conftest import INBOXES, SESSION, BoxFactory
from helpers import frame
from oncebox import (
    ApplyError,
    ConfigError,
    Decoded,
    Delivery,
    InboxSpec,
    Invalid,
    ManualClock,
    Oncebox,
    UnsafeSQLite,
)
from oncebox.formats.ussd_h1 import make_frame
from oncebox.store.sqlite import check_sqlite_version

DAY = 86_400.0


def mixed_stream() -> list[Delivery]:
    """Valid, duplicate-inside-the-batch, conflicting and invalid deliveries."""
    conflict = make_frame(1, "Kakuma1", "MED", 9, 86)
    return [
        frame(*SESSION[0]),
        frame(*SESSION[1]),
        frame(*SESSION[0]),
        frame("rec1", conflict),
        frame("rec9", "H1|9|bad"),
        frame(*SESSION[2]),
        frame("rec1", conflict),
        frame(*SESSION[1]),
        frame("rec4", SESSION[2][1][:-2] + "00"),
    ]


def shape(decisions: list[oncebox.Decision]) -> list[tuple[object, ...]]:
    return [
        (str(d.verdict), d.reason, d.identity, d.witness, d.may_ack, d.revision) for d in decisions
    ]


def test_a_batch_decides_exactly_as_one_by_one(make_box: BoxFactory, tmp_path: Path) -> None:
    batched = make_box()
    together = batched.ingest_batch("ussd", mixed_stream())
    single = oncebox.open(f"sqlite:///{tmp_path / 'single.db'}", inboxes=INBOXES)
    alone = [single.ingest("ussd", d) for d in mixed_stream()]
    assert shape(together) == shape(alone)
    assert [str(d.verdict) for d in together] == [
        "accepted",
        "accepted",
        "duplicate",
        "conflict",
        "rejected",
        "accepted",
        "conflict",
        "duplicate",
        "rejected",
    ]
    assert batched.triage("ussd") == single.triage("ussd")
    assert batched.stats("ussd")["verdicts"] == single.stats("ussd")["verdicts"]
    single.close()


def _listing(n: int, sku: int, price: int) -> bytes:
    return json.dumps(
        {
            "schema_version": 1,
            "source": "sp-api",
            "subscription": "sub-1",
            "notification_id": f"n-{n}",
            "seller_id": "S1",
            "sku": f"SKU-{sku}",
            "marketplace_id": "M1",
            "notification_type": "listing_changed",
            "event_time": "2026-01-01T00:00:00Z",
            "payload": {"price": price},
        }
    ).encode()


# One step of a random stream: (inbox, id, variant); the same id and variant always
# give the same content, a different variant a conflict; variant 9 is malformed.
steps = st.tuples(st.sampled_from(["ussd", "listing"]), st.integers(0, 5), st.integers(0, 2))
bad_or = st.one_of(steps, st.tuples(st.sampled_from(["ussd", "listing"]), st.just(0), st.just(9)))


def _delivery(inbox: str, n: int, variant: int) -> Delivery:
    if variant == 9:
        return Delivery(b"{not json" if inbox == "listing" else b"H1|1|bad", key=f"rec{n}")
    if inbox == "listing":
        return Delivery(_listing(n, n % 2, variant))
    return frame(f"rec{n}", make_frame(n + 1, f"Site{n % 2}", "WAT", variant + 1, 50 + variant))


def _everything(box: Oncebox) -> object:
    box.seal()
    return (
        [(e.seq, e.step, e.state) for e in box.log_entries()],
        box.triage("ussd"),
        [(k.seller_id, k.sku, k.generation) for k in box.work_keys("listing")],
        [(q.id, q.record_id, q.identity, q.seen_count) for q in box.quarantined("ussd")],
        [(q.id, q.record_id, q.identity, q.seen_count) for q in box.quarantined("listing")],
        [(d.id, d.reason) for d in box.dead_letters()],
        box.stats("ussd")["verdicts"],
        box.stats("listing")["verdicts"],
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=st.lists(bad_or, max_size=24), cuts=st.lists(st.integers(1, 8), max_size=6))
def test_batches_of_any_cut_decide_and_write_exactly_as_one_by_one(
    stream: list[tuple[str, int, int]], cuts: list[int]
) -> None:
    """Decisions, record and quarantine ids, log order and every effect are the same
    whether a stream comes one delivery per call or cut into batches per inbox."""
    single = oncebox.open("sqlite:///:memory:", inboxes=INBOXES)
    batched = oncebox.open("sqlite:///:memory:", inboxes=INBOXES)
    alone = [single.ingest(inbox, _delivery(inbox, n, v)) for inbox, n, v in stream]
    together: list[oncebox.Decision] = []
    rest, sizes = list(stream), iter(cuts)
    while rest:
        # A batch is a run of deliveries to one inbox, at most the next cut long.
        size, inbox = next(sizes, 8), rest[0][0]
        run = [rest[0]]
        for step in rest[1:size]:
            if step[0] != inbox:
                break
            run.append(step)
        together += batched.ingest_batch(inbox, [_delivery(*s) for s in run])
        rest = rest[len(run) :]
    full = [
        (d.verdict, d.reason, d.identity, d.record_id, d.revision, d.quarantine_id, d.may_ack)
        for d in together
    ]
    assert full == [
        (d.verdict, d.reason, d.identity, d.record_id, d.revision, d.quarantine_id, d.may_ack)
        for d in alone
    ]
    assert _everything(batched) == _everything(single)
    single.close()
    batched.close()


def test_a_batch_is_atomic_when_an_apply_step_fails(make_box: BoxFactory) -> None:
    def fail_on_wat(tx: oncebox.store.Tx, change: oncebox.Change) -> None:
        if change.fields["need"] == "WAT":
            raise ValueError("ledger full")

    box = make_box([InboxSpec("ussd", codec="ussd-h1", apply=fail_on_wat)])
    with pytest.raises(ApplyError) as caught:
        box.ingest_batch("ussd", [frame(*f) for f in SESSION])
    assert caught.value.index == 2
    assert all(box.record("ussd", fid) is None for fid, _ in SESSION)
    assert box.dead_letters("ussd") == []


def test_content_identity_ignores_the_snapshot(box: Oncebox) -> None:
    s1, s2 = box.lease("feed", "S1", 60).token, box.lease("feed", "S2", 60).token
    first = box.ingest(
        "feed", Delivery(b"row-A", snapshot_id="S1", device_time="t1", lease_token=s1)
    )
    again = box.ingest(
        "feed", Delivery(b"row-A", snapshot_id="S2", device_time="t2", lease_token=s2)
    )
    other = box.ingest("feed", Delivery(b"row-D", snapshot_id="S2", lease_token=s2))
    assert [str(d.verdict) for d in (first, again, other)] == ["accepted", "duplicate", "accepted"]
    assert first.identity == first.witness
    record = box.record("feed", first.identity or "")
    assert record is not None
    assert (record.snapshot_id, record.device_time) == ("S1", "t1"), "first arrival's provenance"


def test_dead_letter_keeps_a_bounded_copy_with_full_length_and_digest(box: Oncebox) -> None:
    import hashlib

    body = b"x" * 100_000
    decision = box.ingest("listing", body)
    assert decision.reason == "too_large"
    [letter] = box.dead_letters("listing")
    assert len(letter.head) == 65_536 and letter.length == 100_000
    assert letter.sha256 == hashlib.sha256(body).hexdigest()


def test_unknown_inbox_is_a_clear_error(box: Oncebox) -> None:
    with pytest.raises(oncebox.UnknownInbox, match="no inbox named 'nope'"):
        box.ingest("nope", b"x")


def test_an_inbox_cannot_change_codec(make_box: BoxFactory) -> None:
    box = make_box([InboxSpec("intake", codec="feed", fenced=False)])
    box.ingest("intake", b"row")
    with pytest.raises(ConfigError, match="cannot switch"):
        box.declare(InboxSpec("intake", codec="ussd-h1"))
    assert str(box.ingest("intake", b"row").verdict) == "duplicate"


@dataclass
class UpperCodec:
    """A user codec: identity is the first word, content the upper-cased text."""

    name: str = "words"
    identity: str = "key"
    max_bytes: int = 100

    def decode(self, delivery: Delivery) -> Decoded:
        text = delivery.body.decode("ascii", "replace")
        if not text.strip():
            raise Invalid("bad_format", "empty")
        return Decoded(content=text.upper().encode(), key=text.split()[0].lower())


def test_a_user_codec_plugs_in(make_box: BoxFactory) -> None:
    oncebox.register(UpperCodec())  # type: ignore[arg-type]
    box = make_box([InboxSpec("words", codec="words")])
    assert str(box.ingest("words", b"hello world").verdict) == "accepted"
    assert str(box.ingest("words", b"HELLO WORLD").verdict) == "duplicate"
    assert str(box.ingest("words", b"hello there").verdict) == "conflict"
    assert str(box.ingest("words", b"   ").verdict) == "rejected"
    assert box.ingest("words", b"y" * 101).reason == "too_large"


def test_a_broken_user_codec_dead_letters_instead_of_losing(make_box: BoxFactory) -> None:
    @dataclass
    class Broken:
        name: str = "broken"
        identity: str = "key"
        max_bytes: int = 100

        def decode(self, delivery: Delivery) -> Decoded:
            raise KeyError("oops")

    oncebox.register(Broken())  # type: ignore[arg-type]
    box = make_box([InboxSpec("b", codec="broken")])
    decision = box.ingest("b", b"anything")
    assert decision.reason == "codec_error" and decision.may_ack
    assert len(box.dead_letters("b")) == 1


@pytest.mark.parametrize("bound", ["100", 0, -5, 1.5, None, True])
def test_a_user_codec_without_a_byte_bound_is_refused_when_registered(bound: object) -> None:
    # Registered as it was, every ingest into its inbox raised a TypeError to the caller.
    @dataclass
    class Unbounded:
        name: str = "unbounded"
        identity: str = "key"
        max_bytes: object = bound

        def decode(self, delivery: Delivery) -> Decoded:
            return Decoded(content=delivery.body, key="k")

    with pytest.raises(ConfigError, match="max_bytes"):
        oncebox.register(Unbounded())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "version,unsafe",
    [
        ("3.40.1", True),
        ("3.7.0", True),
        ("3.51.2", True),
        ("3.51.3", False),
        ("3.54.1", False),
        ("3.6.23", False),
    ],
)
def test_sqlite_with_the_wal_reset_bug_is_refused(version: str, unsafe: bool) -> None:
    if unsafe:
        with pytest.raises(UnsafeSQLite, match="WAL-reset"):
            check_sqlite_version(version)
    else:
        check_sqlite_version(version)


# -- retention -------------------------------------------------------------------------


def test_retention_below_the_floor_needs_a_recorded_override(make_box: BoxFactory) -> None:
    with pytest.raises(ConfigError, match="72h floor"):
        make_box([InboxSpec("ussd", codec="ussd-h1", retention="24h")])
    box = make_box(
        [
            InboxSpec(
                "ussd",
                codec="ussd-h1",
                retention="24h",
                retention_override="disk nearly full at the kiosk",
            )
        ]
    )
    [override] = box.stats("ussd")["retention_overrides"]
    assert override["retention"] == "1d" and "kiosk" in override["reason"]


def test_forever_retention_never_evicts(make_box: BoxFactory, clock: ManualClock) -> None:
    box = make_box([InboxSpec("ussd", codec="ussd-h1", retention="forever")])
    box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(3650 * DAY)
    [result] = box.evict("ussd")
    assert result.records == 0
    assert box.record("ussd", "rec1") is not None


def test_late_replay_is_recognised_by_its_tombstone(box: Oncebox, clock: ManualClock) -> None:
    t0 = clock.now
    box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(31 * DAY)
    [evicted] = box.evict("ussd")
    assert evicted.records == 1
    tombstone = box.record("ussd", "rec1")
    assert tombstone is not None and tombstone.is_tombstone and tombstone.content is None
    clock.advance(9 * DAY)
    late = box.ingest("ussd", frame(*SESSION[0]))
    assert (str(late.verdict), late.reason, late.late_replay) == ("duplicate", "late_replay", True)
    assert box.triage("ussd")["headcount"] == 3, "a late replay is never applied again"
    stats = box.stats("ussd")
    assert stats["late_replays"] == 1
    assert stats["max_lateness_seconds"] == clock.now - t0
    changed = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 5, 86)))
    assert str(changed.verdict) == "conflict" and changed.late_replay
    assert box.triage("ussd")["headcount"] == 3


def test_tombstones_expire_on_their_own_horizon(make_box: BoxFactory, clock: ManualClock) -> None:
    box = make_box([InboxSpec("ussd", codec="ussd-h1", retention="30d", tombstones="90d")])
    box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(91 * DAY)
    [result] = box.evict("ussd")
    assert (result.records, result.tombstones) == (1, 1)
    assert [e.kind for e in box.evictions("ussd")] == ["record", "tombstone"]
    assert box.record("ussd", "rec1") is None


def test_eviction_keeps_young_records(box: Oncebox, clock: ManualClock) -> None:
    box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(20 * DAY)
    box.ingest("ussd", frame(*SESSION[1]))
    clock.advance(11 * DAY)
    [result] = box.evict("ussd")
    assert result.records == 1
    young = box.record("ussd", "rec2")
    assert young is not None and not young.is_tombstone
    assert str(box.ingest("ussd", frame(*SESSION[1])).verdict) == "duplicate"


def test_accepting_after_the_original_was_evicted_is_refused(
    box: Oncebox, clock: ManualClock
) -> None:
    box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(31 * DAY)
    box.evict("ussd")
    decision = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 5, 86)))
    assert decision.quarantine_id is not None
    with pytest.raises(oncebox.InvalidOperation, match="evicted"):
        box.resolve(decision.quarantine_id, "accept", "late correction")
    assert box.resolve(decision.quarantine_id, "keep", "too late").status == "kept"


def test_accepting_onto_a_new_record_of_the_same_identity_is_refused(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    """A conflict left open past its record's tombstone: a new record of the identity is
    not the one it conflicted with, so accepting it would overwrite newer content."""
    spec = InboxSpec("ussd", codec="ussd-h1", apply="triage", retention="30d", tombstones="90d")
    box = make_box([spec])
    box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 3, 86)))
    opened = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 5, 86)))
    assert opened.quarantine_id is not None
    clock.advance(91 * DAY)
    box.evict("ussd")  # the record and then its tombstone
    fresh = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86)))
    assert str(fresh.verdict) == "accepted"
    with pytest.raises(oncebox.InvalidOperation, match="evicted"):
        box.resolve(opened.quarantine_id, "accept", "the newer count")
    record = box.record("ussd", "rec1")
    assert record is not None and record.content == make_frame(1, "Kakuma1", "MED", 9, 86).encode()
    assert box.triage("ussd")["headcount"] == 12  # 3 (kept past eviction) and the new 9
    assert box.resolve(opened.quarantine_id, "keep", "too late").status == "kept"


# -- concurrency -----------------------------------------------------------------------


def test_concurrent_writers_leave_one_record_per_identity(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    box = oncebox.open(url, inboxes=INBOXES)
    frames = [(f"rec{i}", make_frame(i, "Site", "MED", i % 7 + 1, 50)) for i in range(60)]
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for i in range(len(frames)):
                fid, text = frames[(i + offset) % len(frames)]
                box.ingest("ussd", frame(fid, text))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n * 7,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = box.stats("ussd")
    assert stats["records"] == 60
    assert stats["verdicts"] == {"accepted": 60, "duplicate": 180}
    assert box.triage("ussd")["headcount"] == sum(i % 7 + 1 for i in range(60))
    box.close()


def test_tombstones_of_a_triage_inbox_drop_and_its_effects_stay(
    make_box: BoxFactory, clock: ManualClock
) -> None:
    box = make_box([InboxSpec("ussd", codec="ussd-h1", apply="triage", tombstones="90d")])
    first = box.ingest("ussd", frame(*SESSION[0]))
    clock.advance(91 * DAY)
    [result] = box.evict("ussd")
    assert (result.records, result.tombstones) == (1, 1)
    assert box.triage("ussd")["headcount"] == 3, "applied effects outlive dedup state"
    again = box.ingest("ussd", frame("rec-new", SESSION[1][1]))
    assert again.record_id is not None and first.record_id is not None
    assert again.record_id > first.record_id, "record ids are never reused"


def test_recover_seals_records_left_with_no_queued_seal(make_box: BoxFactory) -> None:
    box = make_box([InboxSpec("ussd", codec="ussd-h1", apply="triage")])
    decision = box.ingest("ussd", frame(*SESSION[0]))
    with box.store.transaction() as tx:  # what an older version could leave behind
        tx.execute("UPDATE records SET log_seq = NULL")
    assert box.verify().uncovered == [decision.record_id]
    assert box.recover() == 1
    report = box.verify()
    assert report.ok and [e.step for e in box.log_entries()][-1] == "recover"


def test_an_inbox_cannot_change_its_fencing(make_box: BoxFactory) -> None:
    box = make_box([InboxSpec("feed", codec="feed")])
    with pytest.raises(ConfigError, match="lease-fenced"):
        box.declare(InboxSpec("feed", codec="feed", fenced=False))


def test_resolving_with_an_unknown_action_is_a_clear_error(box: Oncebox) -> None:
    box.ingest("ussd", frame(*SESSION[0]))
    decision = box.ingest("ussd", frame("rec1", make_frame(1, "Kakuma1", "MED", 9, 86)))
    assert decision.quarantine_id is not None
    with pytest.raises(oncebox.InvalidOperation, match="keep or accept"):
        box.resolve(decision.quarantine_id, "merge", "why not")
