"""Issue 24's sixth round on a single delivery: a lone plain duplicate decided without a
walk (``decide._one_duplicate``, its answer ``decided.Repeated``, its decision
``decision.repeat_decision``) decides, writes and answers as the general path, on a
SQLite file as in memory; the decision templates kept per verdict and inbox; and a
sealing commit that takes no lock where no read of this process waits still wakes one
that does."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from oncebox.domain import Stored, Verdict
from oncebox.engine import decide, following
from oncebox.engine.decided import Repeated
from oncebox.engine.decision import quick_decisions, repeat_decision
from oncebox.engine.ingest import prepare
from oncebox.engine.walk import Outcome
from oncebox.formats import Delivery, get_codec
from oncebox.store import open_store
from oncebox.store.sqlite import SQLiteStore
from oncebox.store.sqlitetx import _TEXT
from test_cpu_fast_paths import _run_steps, _steps


def _other(*_: Any) -> oncebox.Decision:
    raise AssertionError("a plain duplicate or an accepted delivery only")


def _general(inbox: str, outcomes: list[Outcome]) -> list[oncebox.Decision]:
    return quick_decisions(inbox, outcomes, [], {}, _other)


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["k", "other", "é"]),  # the inbox: templates are per inbox
            st.text(min_size=1, max_size=8),  # the key
            st.binary(min_size=1, max_size=20),  # the body
            st.integers(1, 10**6),  # the record id
            st.integers(1, 3),  # its revision
            st.integers(0, 10**6),  # its log position (a plain duplicate's is sealed)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_lone_duplicates_decision_is_the_batch_loops(cases: list[Any]) -> None:
    """``repeat_decision`` gives what ``quick_decisions`` gives a plain duplicate: the
    same facts in the same order (the HTTP answer writes them as held), and the accepted
    template of the same inbox stays its own."""
    codec = get_codec("keyed")
    for inbox, key, body, record_id, revision, position in cases:
        item = prepare(codec, Delivery(body, key=key))
        if item.invalid is not None:
            continue
        assert item.ident is not None and item.witness is not None
        seen: Any = tuple(
            Stored(record_id, item.ident, item.witness, revision, None, 1.0, position)
        )
        lone = Repeated(inbox, item, seen).decisions()
        (general,) = _general(inbox, [Outcome(Verdict.DUPLICATE, item, -1, seen)])
        assert [list(d.__dict__.items()) for d in lone] == [list(general.__dict__.items())]
        assert lone[0] == repeat_decision(inbox, item, seen)
        # An accepted delivery of the same inbox still takes its own template.
        (accepted,) = quick_decisions(
            inbox,
            [Outcome(Verdict.ACCEPTED, item, 0)],
            [(record_id,)],  # type: ignore[list-item]
            {},
            _other,
        )
        assert (accepted.inbox, accepted.verdict, accepted.record_id) == (
            inbox,
            Verdict.ACCEPTED,
            record_id,
        )
        assert accepted.revision == 1 and accepted.log_position is None


@settings(max_examples=40, deadline=None)
@given(_steps, st.booleans())
def test_a_lone_duplicate_on_a_file_decides_and_writes_as_the_walk(
    steps: list[Any], seal: bool
) -> None:
    """On a SQLite file (tests/test_cpu_fast_paths.py runs it in memory): the same
    decisions, counts, records, log and dead letters with ``_one_duplicate`` as with
    every delivery walked."""
    with tempfile.TemporaryDirectory() as fast_dir, tempfile.TemporaryDirectory() as slow_dir:
        fast = _run_steps(steps, seal, f"sqlite:///{Path(fast_dir) / 'b.db'}")
        with mock.patch.object(decide, "_plain_repeat", lambda item, seen: False):
            general = _run_steps(steps, seal, f"sqlite:///{Path(slow_dir) / 'b.db'}")
    assert fast == general


@pytest.mark.parametrize("url", ["memory", "file"])
def test_a_run_of_lone_duplicates_counts_exactly(tmp_path: Path, url: str) -> None:
    """Many duplicates one a transaction, through ``_one_duplicate`` (it is taken: the
    general walk is never reached), count each once, on the record and per hour."""
    where = "sqlite:///:memory:" if url == "memory" else f"sqlite:///{tmp_path / 'b.db'}"
    box = oncebox.open(where, inboxes=[oncebox.InboxSpec("k", codec="keyed")])
    try:
        box.ingest_batch("k", [Delivery(b"x", key=str(i)) for i in range(5)])
        with mock.patch.object(decide, "Walk", side_effect=AssertionError("walked")):
            for _ in range(3):
                for i in range(5):
                    decision = box.ingest("k", Delivery(b"x", key=str(i)))
                    assert decision.verdict is Verdict.DUPLICATE and decision.may_ack
                    assert (decision.record_id, decision.revision) == (i + 1, 1)
                    assert decision.log_position is not None
        with box.store.reading() as tx:
            seen = tx.execute("SELECT id, seen_count FROM records ORDER BY id")
            counted = tx.execute(
                "SELECT verdict, sum(n) FROM verdict_counts GROUP BY verdict ORDER BY verdict"
            )
        assert seen == [(i + 1, 4) for i in range(5)]
        assert counted == [("accepted", 5), ("duplicate", 15)]
    finally:
        box.close()


class _Watched(threading.Condition):
    """A condition that tells when a read waits on it, and whether each wait ended by a
    notice (True) or by running out (False)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()
        self.woken: list[bool] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()  # the lock is held until the wait below lets it go
        woken = super().wait(timeout)
        self.woken.append(woken)
        return woken


def test_a_waiting_read_is_woken_by_a_seal_not_by_its_poll(tmp_path: Path) -> None:
    """A seal with no read waiting takes no lock; one with a read waiting wakes it with
    a notice, not by the wait running out. The read counts itself before it first
    reads, and uncounts itself when done."""
    box = oncebox.open(f"sqlite:///{tmp_path / 'b.db'}",
                       inboxes=[oncebox.InboxSpec("k", codec="keyed")])  # fmt: skip
    got: list[Any] = []
    news = box._news = _Watched()
    try:
        assert box._readers == 0
        box.ingest("k", Delivery(b"x", key="quiet"))  # nobody waits: nothing to wake
        after = box.log_position()
        with mock.patch.object(following, "POLL", 60.0):
            reader = threading.Thread(
                target=lambda: got.extend(box.feed("k", after=after, wait=5).entries)
            )
            reader.start()
            assert news.waiting.wait(30)
            assert box._readers == 1
            box.ingest("k", Delivery(b"y", key="news"))
            reader.join(30)
        assert not reader.is_alive()
        assert news.woken == [True]
        assert [e.identity for e in got] == ["news"]
        assert box._readers == 0
    finally:
        box.close()


@pytest.mark.parametrize("url", ["memory", "file"])
@pytest.mark.parametrize("statement", ["find_record", "find_record_or_next_id"])
def test_a_single_deliverys_record_reads_in_storeds_order(
    tmp_path: Path, url: str, statement: str
) -> None:
    """``SQLiteTx.decision_reads`` hands on a single delivery's row as SQLite gives it,
    read by position as a Stored: the statements' columns are Stored's fields, in order,
    and the rows it gives are those Stored made by column name gives (a record, a
    tombstone, none)."""
    where = "sqlite:///:memory:" if url == "memory" else f"sqlite:///{tmp_path / 'b.db'}"
    store = open_store(where, clock=lambda: 1_800_000_000.0)
    assert isinstance(store, SQLiteStore)
    box = oncebox.Oncebox(store, [oncebox.InboxSpec("k", codec="keyed")])
    try:
        box.ingest_batch("k", [Delivery(b"x", key=str(i)) for i in range(3)])
        store.atomic(lambda tx: tx.evict_records(1, 1_800_000_000.0 * 2, 1.0, 1))
        with store.reading() as tx:
            idents = [bytes(r[0]) for r in tx.execute("SELECT ident FROM records ORDER BY id")]
            cursor = tx._conn.execute(_TEXT[statement], (1, idents[0]))
            assert tuple(c[0] for c in cursor.description) == Stored._fields
            cursor.fetchall()

        def both(tx: Any) -> list[tuple[Any, Any]]:
            return [
                (
                    tx.decision_reads(1, [ident], None)[2],
                    tx._rows("find_record", (1, ident), Stored),
                )
                for ident in [*idents, b"\x00" * 32]
            ]

        for durable in (True, False):
            pairs = store.atomic(both, durable=durable)
            for (fast, general), ident in zip(pairs, [*idents, b"\x00" * 32], strict=True):
                assert fast == ({ident: general[0]} if general else {})
                assert all(type(row) is tuple for row in fast.values())
            assert pairs[0][1][0].evicted_at is not None and pairs[1][1][0].evicted_at is None
    finally:
        box.close()


def test_a_single_delivery_naming_no_dead_letter_holds_none() -> None:
    """``decide_batch`` skips ``replay.held`` for a single delivery that names no dead
    letter: what held gives it (nothing, without asking the store); one that names a
    dead letter still goes through held (tests/test_dead_letter_life.py)."""
    from oncebox.engine import replay

    class NoStore:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"held asked the store: {name}")

    item = prepare(get_codec("keyed"), Delivery(b"x", key="k"))
    assert replay.held(NoStore(), 1, [item]) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize("point", ["before_insert", "after_insert", "after_commit"])
def test_a_point_armed_by_the_environment_is_still_reached(tmp_path: Path, point: str) -> None:
    """The hot paths call ``crashpoints.reach`` only where a point is armed: one armed
    through ``ONCEBOX_CRASH_AT`` ends a single delivery's ingest there (and one armed by
    a harness that replaces ``reach`` is reliability/crashpoints.py's test)."""
    import os
    import subprocess
    import sys

    from oncebox.engine import crashpoints

    script = (
        "import oncebox\n"
        f"box = oncebox.open('sqlite:///{tmp_path / 'b.db'}',"
        " inboxes=[oncebox.InboxSpec('k', codec='keyed')])\n"
        "box.ingest('k', oncebox.Delivery(b'x', key='a'))\n"
    )
    env = {**os.environ, "ONCEBOX_CRASH_AT": point}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=120, check=False)
    assert done.returncode == crashpoints.EXIT_CODE
