"""The writes PostgreSQL sends together (store/pgfold.py) and the flat arrays it dumps
itself (store/pgarrays.py), each against the general path beside it: the writes one
statement each, psycopg's own array dumper.

What folding must keep: the parts run in the order they were held (the order that keeps
concurrent deciders from deadlocking), a part never needs what an earlier part of its
statement wrote (a repeat counted on a record its batch inserts), a count the decision
expects still has the transaction decided again where it does not hold, and the log is
taken only after every row the writes folded before it lock."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.adapt import Transformer
from psycopg.types.array import ListBinaryDumper

import oncebox
from helpers import event_body
from oncebox import Delivery, InboxSpec, Verdict
from oncebox.domain import SEALER
from oncebox.engine import fence
from oncebox.engine.steps import generation
from oncebox.errors import RetryTransaction
from oncebox.store import pgarrays, pgfold, pgpipe
from oncebox.store.postgres import PostgresStore
from oncebox.store.sqlfile import load_queries, read_queries

LISTING = InboxSpec("listing", codec="json-event", apply="generation")


def event(i: int, price: int = 1) -> Delivery:
    payload = {"status": "BUYABLE", "issues": [], "price": price}
    return Delivery(event_body(f"n-{i:08d}", sku=f"SKU-{i % 3:03d}", payload=payload))


# -- pure: which writes share a statement, and the arrays' bytes ----------------------


def _foldable() -> dict[str, str]:
    found = {n: q.sql for n, q in load_queries("postgres").items() if q.foldable}
    steps = read_queries(generation.PACKAGE, "sql", "postgres", "generation.sql")
    found.update({n: q.sql for n, q in steps.items() if q.foldable})
    return found


def test_every_foldable_statement_is_one_plain_write() -> None:
    """A foldable statement becomes a WITH part ending RETURNING 1: one INSERT, UPDATE or
    DELETE of one table, without rows of its own to return."""
    found = _foldable()
    assert {"insert_records", "count_duplicates", "count_verdicts", "bump_generations"} <= set(
        found
    )
    for name, sql in found.items():
        assert pgfold.target(sql) is not None, name
    assert pgfold.target("INSERT INTO t SELECT 1 RETURNING id") is None
    assert pgfold.target("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a") is None


def test_a_write_to_a_table_an_earlier_part_writes_begins_a_statement() -> None:
    sql = _foldable()
    held = [
        pgfold.Held(sql[name], ())
        for name in ("insert_records", "bump_generations", "count_duplicates", "count_verdicts")
    ]
    parts = [[pgfold.target(w.sql) for w in group] for group in pgfold.groups(held)]
    assert parts == [["records", "work_keys"], ["records", "verdict_counts"]]
    odd = pgfold.Held("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a", ())
    alone = pgfold.groups([held[1], odd, held[3]])
    assert [len(group) for group in alone] == [1, 1, 1]


ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "float8": st.floats(allow_nan=False),
    "text": st.text(alphabet=st.characters(codec="utf-8", min_codepoint=1)),
    "bytea": st.binary(),
}


@pytest.mark.parametrize("sql_type", sorted(pgarrays.OIDS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_column_dumps_the_bytes_psycopg_dumps(sql_type: str, data: st.DataObject) -> None:
    element, array = pgarrays.OIDS[sql_type]
    column, dumper = pgarrays.TYPED[sql_type]
    values = data.draw(st.lists(st.none() | ELEMENTS[sql_type], max_size=6))
    context = Transformer()
    general = type("General", (ListBinaryDumper,), {"oid": array, "element_oid": element})
    for drawn in (values, values[:1], values[:0]):
        assert dumper(column, context).dump(column(drawn)) == general(column, context).dump(
            column(drawn)
        ), drawn


def _both(sql_type: str, values: list[Any]) -> tuple[object, object]:
    """What pgarrays' column dumper and psycopg's own give for ``values``: their bytes, or
    the error each raises."""
    element, array = pgarrays.OIDS[sql_type]
    column, dumper = pgarrays.TYPED[sql_type]
    general = type("General", (ListBinaryDumper,), {"oid": array, "element_oid": element})
    context = Transformer()

    def dumped(make: type[Any]) -> object:
        try:
            return make(column, context).dump(column(values))
        except Exception as exc:
            return (type(exc), str(exc))

    return dumped(dumper), dumped(general)


@pytest.mark.parametrize("sql_type", sorted(pgarrays.OIDS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_whole_column_dumps_the_bytes_psycopg_dumps(sql_type: str, data: st.DataObject) -> None:
    """A batch's columns, of one type without nulls or of nulls only, are written at once
    (pgarrays' whole-column path): the bytes psycopg's dumper writes element by element."""
    values = data.draw(st.lists(ELEMENTS[sql_type], min_size=2, max_size=40))
    mine, psycopgs = _both(sql_type, values)
    assert mine == psycopgs, values
    nulls = [None] * len(values)
    assert _both(sql_type, nulls)[0] == _both(sql_type, nulls)[1]


ODD_COLUMNS = [
    ("float8", [1, 2.5]),
    ("float8", [True, 1.0]),
    ("float8", [Decimal("1.5"), 2.0]),
    ("float8", [10**400, 1.0]),
    ("bigint", [True, 3]),
    ("bigint", [1.0, 2]),
    ("bigint", [2**63, 1]),
    ("bigint", [1, None, 2]),
    # ("int", [2**31, 1]) is not here: psycopg's int4 dumper writes its low 32 bits, the
    # column refuses it (tests/test_pg_int_range.py).
    ("text", ["a", 1]),
    ("text", ["a\ud800", "b"]),
    ("text", ["a", None]),
    ("text", ["a" * 5000, "\u00e9" * 3000]),
    ("bytea", [bytearray(b"x"), b"y"]),
    ("bytea", [memoryview(b"ab"), b"y"]),
    ("bytea", [b"x", None]),
]


@pytest.mark.parametrize(("sql_type", "values"), ODD_COLUMNS)
def test_an_odd_column_dumps_or_fails_as_psycopg_does(sql_type: str, values: list[Any]) -> None:
    """Values of another type than the column's, out of range, without a UTF-8 form or
    beside a null leave the whole-column path: psycopg's bytes, or its error."""
    mine, psycopgs = _both(sql_type, values)
    assert mine == psycopgs


# -- on PostgreSQL ----------------------------------------------------------------------


def test_text_on_a_connection_not_in_utf8_dumps_as_psycopg_dumps(pg_url: str) -> None:
    """The whole-column path writes text as UTF-8; where the connection's encoding is
    another, psycopg's text dumper encodes in it, and so does the column dumper."""
    values = ["caf\u00e9", "na\u00efve", "plain"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET client_encoding TO 'LATIN1'")
        pgarrays.register(conn)
        element, array = pgarrays.OIDS["text"]
        column, dumper = pgarrays.TYPED["text"]
        general = type("General", (ListBinaryDumper,), {"oid": array, "element_oid": element})
        context = Transformer(conn)
        mine = dumper(column, context).dump(column(values))
        assert mine == general(column, context).dump(column(values))
        assert mine is not None and "caf\u00e9".encode("latin-1") in bytes(mine)
        row = conn.execute("SELECT %b::text[]", [column(values)]).fetchone()
        assert row is not None and row[0] == values


def test_the_parts_of_a_folded_statement_run_in_the_order_held(pg_url: str) -> None:
    parts = tuple(
        f"INSERT INTO folded_order SELECT nextval('folded_seq'), '{who}' FROM unnest(%b::int[])"
        for who in ("first", "second", "third")
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE folded_seq; CREATE TABLE folded_order (n bigint, who text)")
        for _ in range(7):  # past psycopg's prepare threshold: the generic plan too
            conn.execute("TRUNCATE folded_order")
            counts = conn.execute(pgfold.folded(parts), ([1, 2], [3], [4, 5, 6])).fetchone()
            assert counts == (2, 1, 3)
            seen = conn.execute("SELECT who FROM folded_order GROUP BY who ORDER BY min(n)")
            assert [row[0] for row in seen] == ["first", "second", "third"]


def _state(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the decisions left, without the times the server's clock gave them."""
    queries = {
        "records": "SELECT id, ident, witness, revision, seen_count, late_replays, log_seq"
        " FROM records_read ORDER BY id",
        "work_keys": "SELECT seller_id, sku, marketplace_id, generation FROM work_keys"
        " ORDER BY 1, 2, 3",
        "verdicts": "SELECT verdict, reason, sum(n) FROM verdict_counts"
        " GROUP BY 1, 2 ORDER BY 1, 2",
        "quarantine": "SELECT id, ident, witness, seen_count, record_id FROM quarantine"
        " ORDER BY id",
        "letters": "SELECT id, reason, sha256 FROM dead_letters ORDER BY id",
        "log": "SELECT seq, step, state, hash FROM log ORDER BY seq",
        "queue": "SELECT count(*) FROM log_pending",
    }
    with psycopg.connect(url) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}


def _history(box: oncebox.Oncebox) -> list[list[tuple[str, str]]]:
    def verdicts(decisions: list[Any]) -> list[tuple[str, str]]:
        return [(d.verdict.value, d.reason or "") for d in decisions]

    return [
        verdicts([box.ingest("listing", event(1))]),
        verdicts([box.ingest("listing", event(1))]),  # a duplicate
        verdicts([box.ingest("listing", event(1, price=2))]),  # a conflict
        verdicts([box.ingest("listing", Delivery(b"{not json"))]),  # a dead letter
        # A batch of every verdict, an identity twice in it: its repeat is counted on
        # the record the same batch inserts.
        verdicts(
            box.ingest_batch(
                "listing",
                [event(2), event(3), event(2), event(1), event(3, price=5), Delivery(b"[]")],
            )
        ),
        verdicts([box.ingest("listing", event(4))]),
    ]


@pytest.fixture
def second_url(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_server.create_database(name, template=pg_template)
    pg_server.drop_database(name)


def test_folded_writes_leave_what_the_writes_apart_leave(
    pg_url: str, second_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        folded = _history(box)
    query = pgpipe._query
    monkeypatch.setattr(pgpipe, "_query", lambda s: query(s)._replace(foldable=False))
    with oncebox.open(second_url, inboxes=[LISTING]) as box:
        apart = _history(box)
    assert folded == apart
    assert folded[4] == [
        ("accepted", ""), ("accepted", ""), ("duplicate", ""), ("duplicate", ""),
        ("conflict", "same_identity_different_content"), ("rejected", "bad_shape"),
    ]  # fmt: skip
    state = _state(pg_url)
    assert state == _state(second_url)
    assert [row[4] for row in state["records"]] == [3, 2, 1, 1]  # record 2: twice a batch


def test_a_count_that_does_not_hold_has_the_transaction_decided_again(pg_url: str) -> None:
    """A folded count (at the commit, or in the seal's reads) that changed fewer rows
    than the decision read raises RetryTransaction, and nothing of it commits."""
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        box.ingest("listing", event(1))
    store = PostgresStore(pg_url)
    gone = {10**12: 1}  # a record no longer there

    def counts(tx: Any) -> None:
        tx.count_duplicates(gone, 0.0)
        tx.count_verdicts(1, 0, {("duplicate", ""): 7})

    def sealed(tx: Any) -> None:
        counts(tx)
        fence.held(tx, SEALER)

    try:
        for work in (counts, sealed):
            with pytest.raises(RetryTransaction), store._piped() as tx:
                work(tx)
    finally:
        store.close()
    assert ("duplicate", "", 7) not in _state(pg_url)["verdicts"]


def _waiting(url: str, until: Callable[[], bool]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(400):
            if until() or conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone() == (1,):
                return
            time.sleep(0.025)
    raise AssertionError("the delivery never waited for the row lock")


def test_the_log_is_taken_after_the_rows_the_writes_before_it_lock(pg_url: str) -> None:
    """A single delivery's writes go in the statement that takes the log; while they
    wait for a row another transaction holds, the log is still free."""
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        box.ingest("listing", event(1))  # this hour's counter row, and the log's lease
        decided: list[Verdict] = []
        with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as probe:
            holder.execute("UPDATE verdict_counts SET n = n")  # locked until rolled back
            thread = threading.Thread(
                target=lambda: decided.append(box.ingest("listing", event(2)).verdict)
            )
            thread.start()
            try:
                _waiting(pg_url, lambda: bool(decided))
                free = probe.execute(
                    "SELECT token FROM fences WHERE kind = 'sealer' AND owner = 0 AND name = ''"
                    " FOR UPDATE NOWAIT"
                ).fetchall()
                probe.rollback()
            finally:
                holder.rollback()
                thread.join(30)
        assert len(free) == 1 and decided == [Verdict.ACCEPTED]


def test_a_duplicate_s_counts_keep_the_plan_made_once(pg_url: str) -> None:
    """A prepared statement is planned for its values five times, then once for any
    (generic) if that plan costs no more: the duplicate's counts, folded, get there; a
    join planned for a one-element array it knows was always cheaper, and was planned
    again on every call."""
    with psycopg.connect(pg_url, autocommit=True) as conn:  # no analyze to replan it
        for table in ("records", "verdict_counts"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        box.ingest_batch("listing", [event(i) for i in range(1_000)])  # a table to join
    sql = _foldable()
    statement = pgfold.folded((sql["count_duplicates"], sql["count_verdicts"]))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        pgarrays.register(conn)
        for _ in range(12):
            params = [*pgarrays.columns(sql["count_duplicates"], [(1, 1, 1.0)])]
            params += pgarrays.columns(sql["count_verdicts"], [(1, 0, "duplicate", "", 1)])
            assert conn.execute(statement, params, prepare=True).fetchone() == (1, 1)
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH w0 AS%'"
        ).fetchall()
    assert plans == [(7, 5)], plans


def test_the_log_taken_with_writes_folded_in_sets_the_durable_level_back(pg_url: str) -> None:
    """A transaction begun relaxed whose writes fold into the statement that takes the
    log commits durably all the same: that statement sets the session's own level back
    (here one the relaxed level is not)."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{admin.info.dbname}" SET synchronous_commit = remote_write')
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        box.ingest("listing", event(1))  # the inbox, this hour's counter row
    store = PostgresStore(pg_url)
    level = "SELECT current_setting('synchronous_commit')"
    try:
        with store._piped() as tx:
            tx.relax_durability()
            relaxed = tx.execute(level)
            tx.count_verdicts(1, 0, {("duplicate", ""): 1})
            assert tx._held, "held to go with the log's statement"
            fence.held(tx, SEALER)
            assert not tx._held
            durable = tx.execute(level)
    finally:
        store.close()
    assert (relaxed, durable) == ([("off",)], [("remote_write",)])
