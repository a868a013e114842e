"""The hot statements stay on their indexes, on both backends (as pgqueuer's EXPLAIN test
keeps its dequeue query on its index): finding a batch's records, inserting them,
counting duplicates and late replays, the leases a batch is fenced by, the seal's queue,
the seal itself, and the log read by position.

SQLite plans each statement by its rules (and by ``ANALYZE``'s statistics, where a store
has them): its ``EXPLAIN QUERY PLAN`` must SEARCH each table by an index or its primary
key, never SCAN it, with or without statistics. PostgreSQL plans by cost: its tables are
filled here until a sequential scan is what it picks once the index is gone (each case's
control, in a transaction rolled back), and both the plan made for the values at hand
(custom) and the one made once for any values (generic, as a prepared statement may
come to use) must read through the index.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import apsw
import psycopg
import pytest

import oncebox
from helpers import event_body
from oncebox import Delivery
from oncebox.store import open_store
from oncebox.store.pgarrays import typed
from oncebox.store.pgscalars import compact
from oncebox.store.sqlfile import load_queries

T = 1_800_000_000.0
ROWS = 40_000  # records, log entries; half as many queued events and leases
BATCH = 50


def idents(numbers: Sequence[int]) -> str:
    """A batch's identities as PostgreSQL's find_records takes them: a JSON array of hex
    digests (SQLite's takes them as one carray of digests)."""
    return json.dumps([f"{n:064x}" for n in numbers])


# -- SQLite ---------------------------------------------------------------------------------
SQLITE_FILL = f"""
INSERT INTO inboxes (name, codec, apply) VALUES ('a', 'feed', 'none'), ('b', 'feed', 'none');
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ROWS})
INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, log_seq)
SELECT n, 1 + n % 2, unhex(printf('%064x', n)), 'id' || n, unhex(printf('%064x', -n)),
       randomblob(100), '{{}}', {T} + n, {T} + n, n FROM g;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ROWS})
INSERT INTO log (seq, step, state, hash) SELECT n, 'accept', 'state ' || n, hex(n) FROM g;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ROWS // 2})
INSERT INTO log_pending (step, state, record_id) SELECT 'accept', 'state ' || n, n FROM g;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ROWS // 2})
INSERT INTO fences SELECT 'scope', 1 + n % 2, 'scope-' || n, n, NULL, 0, 1e10, NULL FROM g;
"""

# statement -> (parameters, what each table must be searched by)
SQLITE_HOT: dict[str, tuple[Any, dict[str, str]]] = {
    "find_records": (
        (1, apsw.carray(tuple(bytes.fromhex(f"{n:064x}") for n in range(1, 2 * BATCH, 2)))),
        {"records": "USING INDEX sqlite_autoindex_records_1 (inbox_id=? AND ident=?)"},
    ),
    "find_record": (
        (1, bytes.fromhex(f"{3:064x}")),
        {"records": "USING INDEX sqlite_autoindex_records_1 (inbox_id=? AND ident=?)"},
    ),
    "find_record_or_next_id": (
        (1, bytes.fromhex(f"{3:064x}")),
        {
            "records": "USING INDEX sqlite_autoindex_records_1 (inbox_id=? AND ident=?)",
            "meta": "USING INDEX sqlite_autoindex_meta_1 (key=?)",
        },
    ),
    "insert_records": (
        (
            ROWS + 1,
            1,
            b"\x01" * 32,
            "i",
            b"\x02" * 32,
            b"c",
            "{}",
            T,
            T,
            None,
            None,
            None,
            None,
            None,
            None,
        ),
        {},
    ),
    "count_duplicates": ((7, 2, T), {"records": "USING INTEGER PRIMARY KEY (rowid=?)"}),
    "count_duplicates_at_once": (
        (apsw.carray(array("q", (7, 9))), 1, T),
        {"records": "USING INTEGER PRIMARY KEY (rowid=?)"},
    ),
    "count_late_replays": ((7, 2, T, 3.0), {"records": "USING INTEGER PRIMARY KEY (rowid=?)"}),
    "held_leases": (
        ("scope", 1, json.dumps(["scope-1", "scope-3"])),
        {"fences": "USING PRIMARY KEY (kind=? AND owner=? AND name=?)"},
    ),
    "held_leases_exclusive": (
        ("sealer", 0, '[""]'),
        {"fences": "USING PRIMARY KEY (kind=? AND owner=? AND name=?)"},
    ),
    "held_lease": (
        ("sealer", 0, ""),
        {"fences": "USING PRIMARY KEY (kind=? AND owner=? AND name=?)"},
    ),
    "drop_pending": ((5,), {"log_pending": "USING INTEGER PRIMARY KEY (rowid=?)"}),
    "mark_sealed": ((9, 7), {"records": "USING INTEGER PRIMARY KEY (rowid=?)"}),
    "log_entries": ((1000, 1100), {"log": "USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"}),
    "get_record": ((7,), {"records": "USING INTEGER PRIMARY KEY (rowid=?)"}),
}
TABLES = ("records", "log", "log_pending", "fences")


def sqlite_plan(conn: apsw.Connection, name: str, params: Any) -> list[str]:
    sql = load_queries("sqlite")[name].sql
    return [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


@pytest.fixture(scope="module", params=["without statistics", "analyzed"])
def sqlite_conn(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[apsw.Connection]:
    """A filled store, once per module: as the store runs it (no statistics), and after
    ``ANALYZE`` (as an operator may have run it)."""
    file = tmp_path_factory.mktemp("plans") / "plans.db"
    open_store(f"sqlite:///{file}").close()
    conn = apsw.Connection(str(file))
    conn.execute(SQLITE_FILL)
    if request.param == "analyzed":
        conn.execute("ANALYZE")
    yield conn
    conn.close()


@pytest.mark.parametrize("name", sorted(SQLITE_HOT))
def test_sqlite_searches_by_index(sqlite_conn: apsw.Connection, name: str) -> None:
    params, searched = SQLITE_HOT[name]
    plan = sqlite_plan(sqlite_conn, name, params)
    for table, how in searched.items():
        assert f"SEARCH {table} {how}" in plan, plan
    scans = [line for line in plan if re.match(rf"SCAN ({'|'.join(TABLES)})\b", line)]
    assert not scans and not any("TEMP B-TREE" in line for line in plan), plan


def test_sqlite_reads_the_seal_queue_in_order_and_stops(sqlite_conn: apsw.Connection) -> None:
    """The sealer's read of its queue walks the table's own order (the rowid) from the
    start and stops at the limit: a scan that sorts nothing, the cheapest there is."""
    assert sqlite_plan(sqlite_conn, "pending_log", (100,)) == ["SCAN log_pending"]


def test_sqlite_reads_what_a_seal_reads_first_by_key_and_from_the_ends(
    sqlite_conn: apsw.Connection,
) -> None:
    """The sealer's lease by its key; the queue and the log each read from one end
    (a scan in the table's own order that stops at its first row), nothing sorted."""
    plan = sqlite_plan(sqlite_conn, "seal_reads", ("sealer", 0, ""))
    assert "SEARCH fences USING PRIMARY KEY (kind=? AND owner=? AND name=?)" in plan, plan
    scans = [line for line in plan if line.startswith("SCAN")]
    assert scans == ["SCAN log_pending", "SCAN log", "SCAN log"], plan
    assert not any("TEMP B-TREE" in line for line in plan), plan


# -- PostgreSQL ---------------------------------------------------------------------------
PG_FILL = f"""
INSERT INTO inboxes (name, codec, apply) VALUES ('a', 'feed', 'none'), ('b', 'feed', 'none');
INSERT INTO records (inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, log_seq)
SELECT 1 + g % 2, decode(lpad(to_hex(g), 64, '0'), 'hex'), 'id' || g,
       sha256(int8send(g)), convert_to(repeat('x', 100), 'UTF8'), '{{}}', {T} + g, {T} + g,
       CASE WHEN g % 2 = 0 THEN -1 ELSE g END
FROM generate_series(1, {ROWS}) g;
INSERT INTO seal_positions SELECT id, id FROM records WHERE log_seq = -1;
INSERT INTO log SELECT g, 'accept', 'state ' || g, md5(g::text)
FROM generate_series(1, {ROWS}) g;
INSERT INTO log_pending (step, state, record_id)
SELECT 'accept', 'state ' || g, g FROM generate_series(1, {ROWS // 2}) g;
INSERT INTO fences SELECT 'scope', 1 + g % 2, 'scope-' || g, g, NULL, 0, 1e10, NULL
FROM generate_series(1, {ROWS // 2}) g;
ANALYZE;
"""


class Case(NamedTuple):
    params: Sequence[Any]  # in the order of the statement's placeholders
    reads: dict[str, tuple[str, ...]]  # table -> an index it must be read by
    control: str  # drops those indexes: a sequential scan is then the plan


IDS = list(range(1, 2 * BATCH, 2))
PG_HOT: dict[str, Case] = {
    "find_records": Case(
        (1, idents(IDS)),
        {"records": ("records_one_per_identity",), "seal_positions": ("seal_positions_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_one_per_identity",
    ),
    "insert_records": Case(
        (
            [ROWS + 1],
            [1],
            [b"\x01" * 32],
            ["i"],
            [b"\x02" * 32],
            [b"c"],
            ["{}"],
            [T],
            [T],
            [None],
            [None],
            [None],
            [None],
            [None],
            [None],
        ),
        {},
        "",
    ),
    "count_duplicates": Case(
        (IDS, [1] * BATCH, [T] * BATCH),
        {"records": ("records_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_pkey CASCADE",
    ),
    "count_late_replays": Case(
        (IDS, [1] * BATCH, [T] * BATCH, [2.0] * BATCH),
        {"records": ("records_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_pkey CASCADE",
    ),
    "held_leases": Case(
        ("scope", 1, json.dumps([f"scope-{n}" for n in IDS])),
        {"fences": ("fences_pkey",)},
        "ALTER TABLE fences DROP CONSTRAINT fences_pkey",
    ),
    "held_leases_exclusive": Case(
        ("sealer", 0, '[""]'),
        {"fences": ("fences_pkey",)},
        "ALTER TABLE fences DROP CONSTRAINT fences_pkey",
    ),
    "pending_log": Case(
        (100,),
        {"log_pending": ("log_pending_pkey",)},
        "ALTER TABLE log_pending DROP CONSTRAINT log_pending_pkey",
    ),
    "drop_pending": Case(
        (list(range(1, 101)),),
        {"log_pending": ("log_pending_pkey",)},
        "ALTER TABLE log_pending DROP CONSTRAINT log_pending_pkey",
    ),
    "mark_sealed": Case(
        (list(range(ROWS + 1, ROWS + 1 + BATCH)), IDS),
        {"records": ("records_pkey", "records_unsealed")},
        "DROP INDEX records_unsealed; ALTER TABLE records DROP CONSTRAINT records_pkey CASCADE",
    ),
    "log_entries": Case(
        (1000, 1100), {"log": ("log_pkey",)}, "ALTER TABLE log DROP CONSTRAINT log_pkey"
    ),
    # What a decision and a seal send as one statement each (store/pgtx.py).
    "decision_lookup": Case(
        (idents(IDS), 1),
        {"records": ("records_one_per_identity",), "seal_positions": ("seal_positions_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_one_per_identity",
    ),
    "seal_reads": Case(
        (100, 16),
        {"log_pending": ("log_pending_pkey",), "log": ("log_pkey",)},
        "ALTER TABLE log_pending DROP CONSTRAINT log_pending_pkey",
    ),
    "seal_writes": Case(
        (
            *([[]] * 10),
            list(range(ROWS + 1, ROWS + 1 + BATCH)),
            IDS,
            list(range(1, 101)),
        ),
        {"records": ("records_pkey", "records_unsealed"), "log_pending": ("log_pending_pkey",)},
        "ALTER TABLE log_pending DROP CONSTRAINT log_pending_pkey",
    ),
    "get_record": Case(
        (8,),
        {"records": ("records_pkey",), "seal_positions": ("seal_positions_pkey",)},
        "ALTER TABLE records DROP CONSTRAINT records_pkey CASCADE",
    ),
}
INDEX_READS = ("Index Scan", "Index Only Scan", "Bitmap Index Scan")


def numbered(sql: str) -> str:
    """psycopg's placeholders as PostgreSQL's own ($1, $2, ...; a name keeps its number)."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match[0] == "%%":
            return "%"
        key = match[1] or str(len(names))
        names.setdefault(key, len(names) + 1)
        return f"${names[key]}"

    return re.sub(r"%%|%\((\w+)\)s|%[sb]", number, sql)


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def pg_plan(
    conn: psycopg.Connection[Any],
    name: str,
    params: Sequence[Any],
    mode: str,
    sql: str | None = None,
) -> list[dict[str, Any]]:
    """Every node of the plan PostgreSQL makes for the statement as the store prepares
    it (``sql`` where given: the named one as the store sends it), in ``mode``
    (force_custom_plan, force_generic_plan)."""
    conn.execute(f"SET plan_cache_mode = {mode}")
    conn.execute(f"PREPARE hot AS {numbered(sql or load_queries('postgres')[name].sql)}")
    try:
        args = psycopg.ClientCursor(conn).mogrify(", ".join(["%s"] * len(params)), params)
        call = f"hot({args})" if params else "hot"
        [(explained,)] = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {call}").fetchall()
        return list(nodes(explained[0]["Plan"]))
    finally:
        conn.execute("DEALLOCATE hot")


def index_reads(plan: list[dict[str, Any]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in plan:
        if node["Node Type"] in INDEX_READS:
            relation = node.get("Relation Name") or node["Index Name"].rsplit("_", 1)[0]
            found.setdefault(relation, set()).add(node["Index Name"])
    return found


def whole_inbox_reads(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reads of records by their identity index that name no identity: every record of
    an inbox, a cost that grows with the store (an anti-join planned as a hash of them)."""
    return [
        node
        for node in plan
        if node.get("Index Name") == "records_one_per_identity"
        and "ident" not in node.get("Index Cond", "")
    ]


def seq_scans(plan: list[dict[str, Any]]) -> set[str]:
    return {node["Relation Name"] for node in plan if node["Node Type"] == "Seq Scan"}


@pytest.fixture(scope="module")
def pg_filled(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = "plans_" + pg_template.rsplit("_", 1)[-1]
    url = pg_server.create_database(name, template=pg_template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_FILL)
    yield url
    pg_server.drop_database(name)


@pytest.fixture
def pg_conn(pg_filled: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_filled, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("name", sorted(PG_HOT))
def test_postgres_reads_by_index(pg_conn: psycopg.Connection[Any], name: str, mode: str) -> None:
    case = PG_HOT[name]
    plan = pg_plan(pg_conn, name, case.params, mode)
    reads = index_reads(plan)
    for table, indexes in case.reads.items():
        assert set(indexes) & reads.get(table, set()), plan
    assert not seq_scans(plan) & {"records", "log", "log_pending", "fences"}, plan
    assert not whole_inbox_reads(plan), plan


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize(
    "name", sorted(n for n, case in PG_HOT.items() if any(type(p) is list for p in case.params))
)
def test_postgres_a_single_delivery_s_statements_read_by_index(
    pg_conn: psycopg.Connection[Any], name: str, mode: str
) -> None:
    """As a single delivery sends them (store/pgscalars.py): each column of one element
    a scalar the server makes an array of, each empty one a literal. Planned knowing
    the arrays' lengths, they must read through the same indexes."""
    case = PG_HOT[name]
    sql = load_queries("postgres")[name].sql
    ones = typed(sql, [p[:1] if type(p) is list else p for p in case.params])
    sent, params = compact(sql, ones)
    assert sent != sql
    plan = pg_plan(pg_conn, name, params, mode, sql=sent)
    reads = index_reads(plan)
    for table, indexes in case.reads.items():
        assert set(indexes) & reads.get(table, set()), plan
    assert not seq_scans(plan) & {"records", "log", "log_pending", "fences"}, plan


@pytest.mark.parametrize("name", sorted(n for n, case in PG_HOT.items() if case.control))
def test_postgres_tables_are_big_enough_to_tell(
    pg_conn: psycopg.Connection[Any], name: str
) -> None:
    """The control: without the index the same statement reads its table whole, so the
    index read above is the planner's choice by cost, not one forced by a small table."""
    case = PG_HOT[name]
    pg_conn.execute("BEGIN")
    try:
        pg_conn.execute(case.control)
        plan = pg_plan(pg_conn, name, case.params, "force_custom_plan")
    finally:
        pg_conn.execute("ROLLBACK")
    assert set(case.reads) & seq_scans(plan), plan


def test_postgres_decision_lookup_reads_only_the_batch_before_analyze(
    pg_server: Any, pg_template: str
) -> None:
    """A store that grew faster than autovacuum analyzes it (its statistics say a few
    rows): the generic plan of a decision's lookup still reads records by their
    identities, never every record of the inbox (a cost that grew with the store)."""
    name = "plans_fresh_" + pg_template.rsplit("_", 1)[-1]
    url = pg_server.create_database(name, template=pg_template)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE records SET (autovacuum_enabled = off)")
            conn.execute("ANALYZE records")  # empty: the statistics say nothing is there
            conn.execute(PG_FILL.replace("ANALYZE;", ""))
            for params in ((idents([1]), 1), (idents([ROWS + 1]), 1)):
                plan = pg_plan(conn, "decision_lookup", params, "force_generic_plan")
                assert not whole_inbox_reads(plan), plan
    finally:
        pg_server.drop_database(name)


def test_postgres_a_decision_s_reads_take_a_few_pages_before_analyze(pg_url: str) -> None:
    """What a single delivery's decision reads on a store that grew faster than
    autovacuum analyzes it (its statistics say it is empty; a benchmark's fresh store):
    its identity by the whole identity index, a few pages, not the pages of every record
    of the inbox (100 at 1,000 records, as an = ANY of the batch's identities was once
    planned). Read through the function the store calls, whose queries' plans are its
    own, and counted in buffers, not timed."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE records SET (autovacuum_enabled = off)")
        conn.execute("ANALYZE records")
    spec = oncebox.InboxSpec("listing", codec="json-event")
    with oncebox.open(pg_url, inboxes=[spec]) as box:
        box.ingest_batch("listing", [Delivery(event_body(f"n-{i}")) for i in range(1_000)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        stored = conn.execute("SELECT ident, inbox_id FROM records LIMIT 1").fetchone()
        assert stored is not None
        for ident in (bytes(stored[0]), b"\x01" * 32):  # stored, and not
            pages = []
            for _ in range(8):  # past the function's custom plans: its generic one too
                [(explained,)] = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)"
                    " SELECT * FROM decision_reads_locked(%s, %s::bytea[], false)",
                    (stored[1], [ident]),
                ).fetchall()
                plan = explained[0]["Plan"]
                pages.append(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])
            assert max(pages[1:]) < 30, pages  # the first reads the catalogs as well


def test_postgres_a_seal_s_reads_take_a_few_pages_before_analyze(pg_url: str) -> None:
    """What a seal reads on a store that grew faster than autovacuum analyzes it: the
    log's last block and, at each kept level, the nodes of the last group of 16, by
    their whole key (level, index range), not every kept node of those levels (a tenth
    of the log's length, as a join planned on such statistics once read them). Read
    through the function the store calls, counted in buffers, not timed."""
    entries = 160_000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in ("log", "merkle_nodes"):  # never analyzed since they grew
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        conn.execute(
            "INSERT INTO log (seq, step, state, hash) SELECT g, 'accept', 'state ' || g,"
            f" md5(g::text) FROM generate_series(1, {entries}) g"
        )
        for level in (4, 8, 12, 16):
            conn.execute(
                "INSERT INTO merkle_nodes (level, idx, hash) SELECT %s, g, sha256(int8send(g))"
                " FROM generate_series(0, %s) g",
                (level, (entries >> level) - 1),
            )
        pages = []
        for _ in range(8):  # past the function's custom plans: its generic one too
            conn.execute("BEGIN")
            [(explained,)] = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)"
                " SELECT * FROM seal_reads_held(NULL, 1000, 16)"
            ).fetchall()
            conn.execute("ROLLBACK")
            plan = explained[0]["Plan"]
            pages.append(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])
        assert max(pages[1:]) < 80, pages  # the first reads the catalogs as well
