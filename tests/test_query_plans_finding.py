"""Finding records stays on indexes, on both backends, however many records there are
(issue 21): a page of an inbox's records by first-seen time (with or without a content
search, newest or oldest first), a delivery key's lookup (records, newcomers and dead
letters under it, where the key is the identity and where it is not), the rows of a
page by id, and the log entries about a record. The same rules as
tests/test_query_plans.py: SQLite must SEARCH every table it reads, never SCAN it nor
sort in a temporary b-tree; PostgreSQL must read each through the index named, in the
plan made for the values at hand and in the generic one, with a control showing that a
sequential scan is what it picks once the index is gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import apsw
import psycopg
import pytest

from oncebox.store import open_store
from oncebox.store.sqlfile import load_queries
from test_query_plans import (
    PG_FILL,
    ROWS,
    SQLITE_FILL,
    Case,
    T,
    index_reads,
    pg_plan,
    seq_scans,
    sqlite_plan,
)

HALF = ROWS // 2
KEY = "gw-1234"  # record 1234's key: not its identity
KEY_AT = 1234
INF = float("inf")

# Even records came with a key that is not their identity (indexed by records_key); odd
# ones with their identity as key. Newcomers and dead letters alike, each under a key.
SQLITE_MORE = f"""
UPDATE records SET key = CASE WHEN id % 2 = 0 THEN 'gw-' || id ELSE identity END;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {HALF})
INSERT INTO quarantine (id, inbox_id, ident, identity, record_id, witness, content, fields,
                        reason, first_seen, last_seen, key)
SELECT n, 1 + n % 2, unhex(printf('%064x', n)), 'id' || n, n, randomblob(32),
       randomblob(100), '{{}}', 'same_identity_different_content', {T} + n, {T} + n,
       CASE WHEN n % 2 = 0 THEN 'gw-' || n ELSE 'id' || n END FROM g;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {HALF})
INSERT INTO dead_letters (id, inbox_id, reason, detail, head, length, sha256, key,
                          received_at)
SELECT n, 1 + n % 2, 'bad_checksum', 'd', randomblob(100), 100, 'x', 'gw-' || n, {T} + n
FROM g;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {HALF})
INSERT INTO log (seq, step, state, hash)
SELECT {ROWS} + n, CASE WHEN n % 2 = 0 THEN 'quarantine' ELSE 'evict' END,
       CASE WHEN n % 2 = 0 THEN '{{"quarantine":' || n || '}}' ELSE '{{"record":' || n || '}}'
       END, hex(n) FROM g;
"""


def window(newest: bool, low: float = -INF, high: float = INF) -> dict[str, Any]:
    """The first page of a window, as the engine asks for it."""
    return {"inbox": 1, "low": low, "high": high, "at": INF if newest else -INF,
            "id": 2**63 - 1 if newest else 0, "limit": 51}  # fmt: skip


def keyed(key: str, ident: bytes) -> dict[str, Any]:
    return {"inbox": 1, "key": key, "prefix": key[:256], "ident": ident, "limit": 101}


def cut(**more: Any) -> dict[str, Any]:
    return {"head": 1024, "text": 512, "fields": 2048, **more}


NO_IDENT = b"\xff" * 32  # a key that is no record's identity
IDS = json.dumps(list(range(2, 102, 2)))
PAGE_ONE = json.dumps([2, 4, 6])

# statement -> (parameters, tables that must be searched, by what)
SQLITE_FINDING: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "record_page_newest": (
        {**window(True), "search": None},
        {"records": "USING INDEX records_age (inbox_id=?"},
    ),
    "record_page_oldest": (
        {**window(False, T + 100, T + 2000), "search": None},
        {"records": "USING INDEX records_age (inbox_id=?"},
    ),
    "record_page_newest search": (
        {**window(True), "search": b"Kakuma1"},
        {"records": "USING INDEX records_age (inbox_id=?"},
    ),
    "records_keyed": (
        keyed(KEY, NO_IDENT),
        {"records": "USING INDEX records_key (inbox_id=? AND <expr>=?)"},
    ),
    "records_keyed by identity": (
        keyed("id1", bytes.fromhex(f"{1:064x}")),
        {"records": "USING INDEX sqlite_autoindex_records_1 (inbox_id=? AND ident=?)"},
    ),
    "quarantine_keyed": (
        {**keyed(KEY, NO_IDENT), **cut()},
        {"quarantine": "USING INDEX quarantine_key (inbox_id=? AND <expr>=?)"},
    ),
    "dead_letters_keyed": (
        {**keyed(KEY, NO_IDENT), **cut()},
        {"dead_letters": "USING INDEX dead_letters_key (inbox_id=? AND <expr>=?)"},
    ),
    "records_listed": (
        {"ids": IDS, "search": b"Kakuma1", **cut()},
        {"records": "USING INTEGER PRIMARY KEY (rowid=?)"},
    ),
    "log_about": (
        {"quarantine": PAGE_ONE, "records": PAGE_ONE, "limit": 500},
        {"log": "USING INDEX log_quarantine (<expr>=?)", "log ": "USING INDEX log_record"},
    ),
    "record_start": ((KEY_AT,), {"records": "USING INTEGER PRIMARY KEY (rowid=?)"}),
}
TABLES = ("records", "quarantine", "dead_letters", "log")
# Sorts only the rows its indexes found (the entries about one record and its newcomers),
# never a table: the two branches of its UNION come from two indexes.
SORTS_FOUND = {"log_about"}


@pytest.fixture(scope="module", params=["without statistics", "analyzed"])
def sqlite_conn(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[apsw.Connection]:
    file = tmp_path_factory.mktemp("finding") / "plans.db"
    open_store(f"sqlite:///{file}").close()
    conn = apsw.Connection(str(file))
    conn.execute(SQLITE_FILL)
    conn.execute(SQLITE_MORE)
    if request.param == "analyzed":
        conn.execute("ANALYZE")
    yield conn
    conn.close()


@pytest.mark.parametrize("case", sorted(SQLITE_FINDING))
def test_sqlite_finds_records_by_index(sqlite_conn: apsw.Connection, case: str) -> None:
    params, searched = SQLITE_FINDING[case]
    plan = sqlite_plan(sqlite_conn, case.split()[0], params)
    for table, how in searched.items():
        assert any(line.startswith(f"SEARCH {table.strip()} {how}") for line in plan), plan
    scans = [line for line in plan if re.match(rf"SCAN ({'|'.join(TABLES)})\b", line)]
    assert not scans, plan
    if case not in SORTS_FOUND:
        assert not any("TEMP B-TREE" in line for line in plan), plan


def test_sqlite_pages_in_the_index_order(sqlite_conn: apsw.Connection) -> None:
    """A page stops at its limit: it walks records_age in the order asked for, so a page
    reads about as many rows as it gives, however many the inbox holds."""
    for newest in (True, False):
        name = "record_page_newest" if newest else "record_page_oldest"
        plan = sqlite_plan(sqlite_conn, name, {**window(newest), "search": None})
        assert plan == [
            "SEARCH records USING INDEX records_age (inbox_id=? AND first_seen>? AND "
            "first_seen<?)"
        ], plan


# -- PostgreSQL ---------------------------------------------------------------------------
PG_MORE = f"""
UPDATE records SET key = CASE WHEN id % 2 = 0 THEN 'gw-' || id ELSE identity END;
INSERT INTO quarantine (inbox_id, ident, identity, record_id, witness, content, fields,
                        reason, first_seen, last_seen, key)
SELECT 1 + g % 2, decode(lpad(to_hex(g), 64, '0'), 'hex'), 'id' || g, g,
       sha256(int8send(g)), convert_to(repeat('x', 100), 'UTF8'), '{{}}',
       'same_identity_different_content', {T} + g, {T} + g,
       CASE WHEN g % 2 = 0 THEN 'gw-' || g ELSE 'id' || g END
FROM generate_series(1, {HALF}) g;
INSERT INTO dead_letters (inbox_id, reason, detail, head, length, sha256, key, received_at)
SELECT 1 + g % 2, 'bad_checksum', 'd', convert_to(repeat('x', 100), 'UTF8'), 100, 'x',
       'gw-' || g, {T} + g
FROM generate_series(1, {HALF}) g;
INSERT INTO log (seq, step, state, hash)
SELECT {ROWS} + g, CASE WHEN g % 2 = 0 THEN 'quarantine' ELSE 'evict' END,
       CASE WHEN g % 2 = 0 THEN '{{"quarantine":' || g || '}}' ELSE '{{"record":' || g || '}}'
       END, md5(g::text)
FROM generate_series(1, {HALF}) g;
ANALYZE;
"""


def pg_params(name: str, named: dict[str, Any]) -> list[Any]:
    """Named parameters in the order ``numbered`` gives them their numbers."""
    order: list[str] = []
    for found in re.findall(r"%\((\w+)\)s", load_queries("postgres")[name].sql):
        if found not in order:
            order.append(found)
    return [named[n] for n in order]


PG_FINDING: dict[str, Case] = {
    "record_page_newest": Case(
        pg_params("record_page_newest", {**window(True), "search": None}),
        {"records": ("records_age",)},
        "DROP INDEX records_age",
    ),
    "record_page_oldest": Case(
        pg_params("record_page_oldest", {**window(False, T + 100, T + 2000), "search": None}),
        {"records": ("records_age",)},
        "DROP INDEX records_age",
    ),
    "record_page_newest search": Case(
        pg_params("record_page_newest", {**window(True), "search": b"Kakuma1"}),
        {"records": ("records_age",)},
        "DROP INDEX records_age",
    ),
    "records_keyed": Case(
        pg_params("records_keyed", keyed(KEY, NO_IDENT)),
        {"records": ("records_key",)},
        "DROP INDEX records_key",
    ),
    "records_keyed by identity": Case(
        pg_params("records_keyed", keyed("id1", bytes.fromhex(f"{1:064x}"))),
        {"records": ("records_one_per_identity",)},
        "ALTER TABLE records DROP CONSTRAINT records_one_per_identity",
    ),
    "quarantine_keyed": Case(
        pg_params("quarantine_keyed", {**keyed(KEY, NO_IDENT), **cut()}),
        {"quarantine": ("quarantine_key",)},
        # Else it reads all of the inbox's rows through quarantine_status instead.
        "DROP INDEX quarantine_key; DROP INDEX quarantine_status",
    ),
    "dead_letters_keyed": Case(
        pg_params("dead_letters_keyed", {**keyed(KEY, NO_IDENT), **cut()}),
        {"dead_letters": ("dead_letters_key",)},
        "DROP INDEX dead_letters_key",
    ),
    "records_listed": Case(
        pg_params("records_listed", {"ids": IDS, "search": b"Kakuma1", **cut()}),
        {"records": ("records_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_pkey CASCADE",
    ),
    "log_about": Case(
        pg_params("log_about", {"quarantine": PAGE_ONE, "records": PAGE_ONE, "limit": 500}),
        {"log": ("log_quarantine", "log_record")},
        "DROP INDEX log_quarantine; DROP INDEX log_record",
    ),
}


@pytest.fixture(scope="module")
def pg_filled(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = "finding_" + pg_template.rsplit("_", 1)[-1]
    url = pg_server.create_database(name, template=pg_template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_FILL)
        conn.execute(PG_MORE)
    yield url
    pg_server.drop_database(name)


@pytest.fixture
def pg_conn(pg_filled: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_filled, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("case", sorted(PG_FINDING))
def test_postgres_finds_records_by_index(
    pg_conn: psycopg.Connection[Any], case: str, mode: str
) -> None:
    found = PG_FINDING[case]
    plan = pg_plan(pg_conn, case.split()[0], found.params, mode)
    reads = index_reads(plan)
    for table, indexes in found.reads.items():
        assert set(indexes) & reads.get(table, set()), plan
    assert not seq_scans(plan) & set(TABLES), plan


@pytest.mark.parametrize("case", sorted(PG_FINDING))
def test_postgres_finding_tables_are_big_enough_to_tell(
    pg_conn: psycopg.Connection[Any], case: str
) -> None:
    """Without the index the same statement reads its table whole: the index read above
    is the planner's choice by cost."""
    found = PG_FINDING[case]
    pg_conn.execute("BEGIN")
    try:
        pg_conn.execute(found.control)
        plan = pg_plan(pg_conn, case.split()[0], found.params, "force_custom_plan")
    finally:
        pg_conn.execute("ROLLBACK")
    assert set(found.reads) & seq_scans(plan), plan

