"""How many round trips a decision takes on PostgreSQL, counted on the wire
(tests/pgturns.py), never timed: a single delivery, new or a duplicate, in at most 3
(before pipelining: 23 and 9); a conflict in 4, its quarantine row's id being read
before its log event is written; a batch of 1,000 in a handful, however large it is
(before: 27 to 35).

And how many statements they send, which is what the client's CPU follows (psycopg
handles each one apart, pipelined or not): a batch's writes go as one statement per
table, and a decision's reads after its locks, like a seal's, as one statement."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox import Delivery, InboxSpec, Oncebox, Verdict
from oncebox.domain import SEALER
from oncebox.engine import fence
from oncebox.store import open_store, postgres
from pgturns import TurnCounter

INBOXES = [
    InboxSpec("listing", codec="json-event", apply="generation"),
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
]
SINGLE = 3
CONFLICT = 4
BATCH = 6
# Statements: a new delivery 5 (8 with its writes each a statement of its own, apart
# from the seal's reads; 13 with its seal a transaction of its own, its events queued,
# and its locks each a statement apart from the reads after them; 21 before the
# statements were merged), a duplicate 4 (5, 6, 9), a conflict 6 (7, 12, 19); a batch
# of 1,000 new 11 (14, 17, 29, its seal done in two transactions), one of 500 new, 499
# duplicates and a conflict 10 (13, 15, 26). The writes a decision reads nothing back
# from go as one statement (store/pgfold.py), a single delivery's with its seal's reads.
SINGLE_STATEMENTS = {"new": 5, "duplicate": 4, "conflict": 6}
BATCH_STATEMENTS = 11


def event(i: int, price: int = 1) -> Delivery:
    body = {
        "schema_version": 1, "source": "sp-api", "subscription": "sub-eu-1",
        "notification_id": f"n-{i:08d}", "seller_id": "SELLER01", "sku": f"SKU-{i % 50:03d}",
        "marketplace_id": "A1PA6795UKMFR9", "notification_type": "listing_status_changed",
        "event_time": "2026-01-01T00:00:00Z",
        "payload": {"status": "BUYABLE", "issues": [], "price": price},
    }  # fmt: skip
    return Delivery(json.dumps(body).encode())


@pytest.fixture
def counted(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Oncebox, TurnCounter]]:
    # A pooled connection that rested IDLE_CHECK seconds is checked first, a round trip
    # of its own: on a loaded machine the warm-up and the counted call can be that far
    # apart (a count of 4 for a new delivery, once under xdist), so no rest is long here.
    monkeypatch.setattr(postgres, "IDLE_CHECK", 3600.0)
    counter = TurnCounter(pg_url)
    box = oncebox.open(counter.url, inboxes=INBOXES)
    box.ingest("listing", event(-1))  # the pool's connection is open and warm
    try:
        yield box, counter
    finally:
        box.close()
        counter.close()


def test_a_single_delivery_takes_at_most_three_round_trips(
    counted: tuple[Oncebox, TurnCounter],
) -> None:
    box, counter = counted
    with counter.counting() as new:
        assert box.ingest("listing", event(1)).verdict is Verdict.ACCEPTED
    with counter.counting() as again:
        assert box.ingest("listing", event(1)).verdict is Verdict.DUPLICATE
    with counter.counting() as conflict:
        assert box.ingest("listing", event(1, price=2)).verdict is Verdict.CONFLICT
    assert max(new[0], again[0]) <= SINGLE and conflict[0] <= CONFLICT, (new, again, conflict)


def test_a_batch_takes_a_handful_whatever_its_size(
    counted: tuple[Oncebox, TurnCounter],
) -> None:
    box, counter = counted
    with counter.counting() as first:
        decisions = box.ingest_batch("listing", [event(i) for i in range(1_000)])
    assert {d.verdict for d in decisions} == {Verdict.ACCEPTED}
    mixed = [event(i) for i in range(500, 1_500)] + [event(7, price=9)]
    with counter.counting() as second:
        verdicts = [d.verdict for d in box.ingest_batch("listing", mixed)]
    assert verdicts.count(Verdict.ACCEPTED) == 500 and verdicts.count(Verdict.CONFLICT) == 1
    assert max(first[0], second[0]) <= BATCH, (first, second)


def test_a_pooled_connection_lost_before_its_commit_is_replaced(
    counted: tuple[Oncebox, TurnCounter], pg_url: str
) -> None:
    """The pool no longer checks a connection lent a moment after its last use (a round
    trip of its own); one that died meanwhile fails before its COMMIT went out, so the
    work runs again on a fresh connection instead of failing."""
    box, _ = counted
    with psycopg.connect(pg_url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None and ended[0] >= 1
    assert box.ingest("listing", event(2)).verdict is Verdict.ACCEPTED
    assert box.ingest("listing", event(2)).verdict is Verdict.DUPLICATE


def _two_statements(tx: Any, change: Any) -> None:
    tx.execute(
        "CREATE TABLE IF NOT EXISTS seen_a (identity text); "
        "CREATE TABLE IF NOT EXISTS seen_b (identity text)"
    )
    tx.execute("INSERT INTO seen_a VALUES (%s)", (change.identity,))


def test_a_step_s_sql_of_several_statements_runs_outside_the_pipeline(pg_url: str) -> None:
    """A pipeline takes one statement at a time; SQL of a step's own that holds several
    leaves it, and the rest of that transaction waits for each answer instead."""
    spec = InboxSpec("orders", codec="json", apply=_two_statements, settings={"identity": ["/id"]})
    with oncebox.open(pg_url, inboxes=[spec]) as box:
        first = box.ingest_batch("orders", [Delivery(b'{"id": 1}'), Delivery(b'{"id": 2}')])
        assert [d.verdict for d in first] == [Verdict.ACCEPTED] * 2
        assert box.ingest("orders", Delivery(b'{"id": 1}')).verdict is Verdict.DUPLICATE
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM seen_a").fetchone() == (2,)


def test_a_delivery_and_a_batch_send_few_statements(
    counted: tuple[Oncebox, TurnCounter],
) -> None:
    box, counter = counted
    sent: dict[str, list[str]] = {}
    for case, price in (("new", 1), ("duplicate", 1), ("conflict", 2)):
        with counter.listing() as sent[case]:
            box.ingest("listing", event(1, price=price))
    assert {case: len(s) for case, s in sent.items()} == SINGLE_STATEMENTS, sent
    # A single delivery and its seal: one transaction, its commit the durable one, and
    # its own events appended without passing through the queue.
    for case in ("new", "conflict"):
        assert sent[case].count("COMMIT") == 1, sent[case]
        assert not [sql for sql in sent[case] if "INSERT INTO log_pending" in sql], sent[case]
    with counter.listing() as first:
        box.ingest_batch("listing", [event(i) for i in range(10, 1_010)])
    mixed = [event(i) for i in range(510, 1_509)] + [event(20, price=9)]
    with counter.listing() as second:
        box.ingest_batch("listing", mixed)
    assert max(len(first), len(second)) <= BATCH_STATEMENTS, (first, second)


def test_a_transaction_begun_relaxed_that_takes_the_log_commits_durably(pg_url: str) -> None:
    """A single delivery's transaction begins relaxed (counts alone need no flush) and,
    once it takes the log to seal its own events, its commit waits for the flush again:
    at the session's own level (set here to one the relaxed level is not), restored in
    the statement that takes the log, inside the pipeline or outside it."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        name = admin.info.dbname
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = remote_write')
    store = open_store(pg_url)
    level = "SELECT current_setting('synchronous_commit')"

    def work(tx: Any, apart: bool) -> tuple[Any, Any]:
        before = tx.execute(level)
        if apart:  # SQL of several statements takes the rest out of the pipeline
            tx.execute("SELECT 1; SELECT 2")
        fence.held(tx, SEALER)
        return before, tx.execute(level)

    try:
        for apart in (False, True):
            levels = store.atomic(lambda tx: work(tx, apart), durable=False)  # noqa: B023
            assert levels == ([("off",)], [("remote_write",)]), apart
    finally:
        store.close()
