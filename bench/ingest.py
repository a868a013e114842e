"""Ingest benchmark: oncebox against the floor cost of durable dedup on the same store.

It ingests N synthetic deliveries, then the same N again (all duplicates), through
``Oncebox.ingest_batch`` (1,000 per transaction) and through ``Oncebox.ingest`` (one
transaction each), and measures in the same run a baseline: a plain ``INSERT OR IGNORE``
of the same identity and witness digests, through the same SQLite library (APSW) with
the same pragmas (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE ... COMMIT``), into a
fresh table whose primary key is the identity digest. That baseline is the floor cost
of any durable dedup on this store; the figures are oncebox's rates and their ratio to
it. The targets are printed beside the figures; nothing here asserts on a timing.

``--scale`` measures how the ratio holds when 10,000 versus 1,000,000 identities are
already stored, and the peak RSS of a duplicate pass at each size, each measurement in
a subprocess of its own so each peak RSS is that process's alone.

    .venv/bin/python bench/ingest.py                       # N=200,000, every codec
    .venv/bin/python bench/ingest.py --n 20000 --single-n 1000 --scale --scale-big 100000
    .venv/bin/python bench/ingest.py --scale --json > figures.json

``--db postgresql://...`` (or ``--pg-throwaway``, a private server started for the run)
measures the same cases on PostgreSQL, each in a fresh database that the benchmark creates
and drops, against a baseline of plain ``INSERT ... ON CONFLICT DO NOTHING`` through
psycopg's ``executemany``, one transaction per batch. It adds a multi-process case (4
client processes into one database against one). The multi-process runs and the scale
measurements are repeated (``--repeat``) and their medians reported. See bench/README.md.

    .venv/bin/python bench/ingest.py --pg-throwaway --json > figures.json
    .venv/bin/python bench/ingest.py --pg-throwaway --skip-main --scale

``--sync-delay-ms D`` runs the SQLite cases of this process (not the memory and scale
subprocesses) on an emulated slower disk, oncebox and baseline alike: every fsync D ms
longer (bench/slowdisk.py). This disk syncs in a fraction of a millisecond, where the
one-per-transaction ratio is a contest of CPU; on a disk of a few milliseconds it is one
of fsyncs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

import apsw

import budget
import oncebox
import slowdisk
from oncebox.engine.ingest import prepare
from peers import Naive
from synthetic import frame_delivery, json_body

# Set by --sync-delay-ms in the main process only: SQLite files then go through the VFS.
SLOW_VFS: str | None = None

INBOXES = [
    oncebox.InboxSpec("listing", codec="json-event", apply="generation"),
    oncebox.InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    # The same listing events through the configured json codec, identified by two
    # pointers (a codec configured, not coded, beside the hand-written one).
    oncebox.InboxSpec(
        "events", codec="json", settings={"identity": ["/subscription", "/notification_id"]}
    ),
]
INBOX_OF = {"json-event": "listing", "ussd-h1": "ussd", "json": "events"}
CODECS = tuple(INBOX_OF)
CONFIGURED = {str(spec.codec): spec.configured_codec() for spec in INBOXES}

# Targets from the issue: printed beside the figures, never asserted.
TARGET_BATCHED = 0.5  # batched first pass >= 0.5 x the batched baseline
TARGET_BATCHED_PG = 0.4  # PostgreSQL: >= 0.4 x psycopg's batched insert (issue 12)
TARGET_DUP = 1.0  # duplicate pass at least as fast as the first pass
TARGET_SINGLE = 0.8  # one-per-transaction >= 0.8 x the one-per-transaction baseline
TARGET_SCALE = 0.9  # ratio with 1M stored >= 0.9 x ratio with 10k stored
TARGET_PROCS = 1.5  # PostgreSQL: 4 client processes >= 1.5 x the rate of one

PRELOAD_START = 1_000_000_000  # preloaded identities never collide with a sample's
PRELOAD_BATCH = 10_000

# -- synthetic deliveries (bench/synthetic.py) --------------------------------------------
def deliveries(codec: str, start: int, count: int) -> list[oncebox.Delivery]:
    if codec in ("json-event", "json"):
        return [oncebox.Delivery(body=json_body(i)) for i in range(start, start + count)]
    return [frame_delivery(i) for i in range(start, start + count)]


def digests(codec: str, items: Sequence[oncebox.Delivery]) -> list[tuple[bytes, bytes]]:
    """(SHA-256 of the identity, witness digest) per delivery, exactly as oncebox stores
    them: the codec's own decode and identify, run here outside any timed region."""
    found = CONFIGURED[codec]
    rows = []
    for item in items:
        prepared = prepare(found, item)
        if prepared.identity is None:
            raise SystemExit(f"synthetic {codec} delivery refused: {prepared.invalid}")
        ident = hashlib.sha256(prepared.identity.identity.encode("utf-8")).digest()
        rows.append((ident, bytes.fromhex(prepared.identity.witness)))
    return rows


# -- the baseline: plain INSERT OR IGNORE with oncebox's pragmas ---------------------------
BASELINE_TABLE = "CREATE TABLE IF NOT EXISTS dedup (ident BLOB PRIMARY KEY, witness BLOB NOT NULL)"
BASELINE_INSERT = "INSERT OR IGNORE INTO dedup (ident, witness) VALUES (?, ?)"


def baseline_connect(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path), vfs=SLOW_VFS)
    conn.set_busy_timeout(30_000)
    mode = conn.execute("PRAGMA journal_mode=WAL").get
    if str(mode).lower() != "wal":
        raise SystemExit(f"{path}: cannot switch to WAL (got {mode})")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(BASELINE_TABLE)
    return conn


def baseline_batched(conn: apsw.Connection, rows: list[tuple[bytes, bytes]], batch: int) -> float:
    execute, executemany = conn.execute, conn.executemany
    started = time.perf_counter()
    for j in range(0, len(rows), batch):
        execute("BEGIN IMMEDIATE")
        executemany(BASELINE_INSERT, rows[j:j + batch])
        execute("COMMIT")
    return time.perf_counter() - started


def baseline_single(conn: apsw.Connection, rows: list[tuple[bytes, bytes]]) -> float:
    execute = conn.execute
    started = time.perf_counter()
    for row in rows:
        execute("BEGIN IMMEDIATE")
        execute(BASELINE_INSERT, row)
        execute("COMMIT")
    return time.perf_counter() - started


def baseline_count(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM dedup").get)


class Baseline(Protocol):
    def batched(self, rows: list[tuple[bytes, bytes]], batch: int) -> float: ...
    def single(self, rows: list[tuple[bytes, bytes]]) -> float: ...
    def count(self) -> int: ...
    def load_from_store(self, store: str, inbox: str) -> None: ...
    def close(self) -> None: ...


class SQLiteBaseline:
    """The SQLite baseline table in its own file (``target`` is its path)."""

    def __init__(self, target: str) -> None:
        self.conn = baseline_connect(Path(target))

    def batched(self, rows: list[tuple[bytes, bytes]], batch: int) -> float:
        return baseline_batched(self.conn, rows, batch)

    def single(self, rows: list[tuple[bytes, bytes]]) -> float:
        return baseline_single(self.conn, rows)

    def count(self) -> int:
        return baseline_count(self.conn)

    def load_from_store(self, store: str, inbox: str) -> None:
        """Copy one inbox's (ident, witness) pairs from an oncebox store file."""
        conn = self.conn
        conn.execute("ATTACH DATABASE ? AS src", (store,))
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR IGNORE INTO dedup (ident, witness) SELECT r.ident, r.witness "
                     "FROM src.records r JOIN src.inboxes i ON i.id = r.inbox_id "
                     "WHERE i.name = ?", (inbox,))
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")

    def close(self) -> None:
        self.conn.close()


# -- the PostgreSQL baseline: plain INSERT ... ON CONFLICT DO NOTHING through psycopg --------
PG_BASELINE_TABLE = ("CREATE TABLE IF NOT EXISTS dedup "
                     "(ident bytea PRIMARY KEY, witness bytea NOT NULL)")
PG_BASELINE_INSERT = ("INSERT INTO dedup (ident, witness) VALUES (%s, %s) "
                      "ON CONFLICT DO NOTHING")


def is_pg(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


class PgBaseline:
    """The baseline table in a database of its own (``target`` is its URL): one
    ``BEGIN ... COMMIT`` per batch around ``cursor.executemany`` (which psycopg pipelines),
    or per row around one ``execute``; psycopg's defaults otherwise, as oncebox's pool."""

    def __init__(self, target: str) -> None:
        import psycopg

        self.conn = psycopg.connect(target, autocommit=True)
        self.conn.execute(PG_BASELINE_TABLE)

    def batched(self, rows: list[tuple[bytes, bytes]], batch: int) -> float:
        conn = self.conn
        with conn.cursor() as cur:
            started = time.perf_counter()
            for j in range(0, len(rows), batch):
                with conn.transaction():
                    cur.executemany(PG_BASELINE_INSERT, rows[j:j + batch])
            return time.perf_counter() - started

    def single(self, rows: list[tuple[bytes, bytes]]) -> float:
        conn = self.conn
        with conn.cursor() as cur:
            started = time.perf_counter()
            for row in rows:
                with conn.transaction():
                    cur.execute(PG_BASELINE_INSERT, row)
            return time.perf_counter() - started

    def count(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM dedup").fetchone()
        return int(row[0]) if row else 0

    def load_from_store(self, store: str, inbox: str) -> None:
        """Copy one inbox's (ident, witness) pairs out of an oncebox database with COPY:
        the rows land in the same table, primary key and all, as the baseline's inserts."""
        import psycopg
        from psycopg import sql

        out_sql = sql.SQL("COPY (SELECT r.ident, r.witness FROM records r JOIN inboxes i "
                          "ON i.id = r.inbox_id WHERE i.name = {}) TO STDOUT (FORMAT BINARY)"
                          ).format(sql.Literal(inbox))
        in_sql = "COPY dedup (ident, witness) FROM STDIN (FORMAT BINARY)"
        with psycopg.connect(store, autocommit=True) as src, src.cursor() as out_cur, \
                self.conn.transaction(), self.conn.cursor() as in_cur, \
                out_cur.copy(out_sql) as out, in_cur.copy(in_sql) as into:
            for data in out:
                into.write(data)

    def close(self) -> None:
        self.conn.close()


def open_baseline(target: str) -> Baseline:
    return PgBaseline(target) if is_pg(target) else SQLiteBaseline(target)


def vacuum(target: str) -> None:
    """After a PostgreSQL preload (untimed): VACUUM ANALYZE and a CHECKPOINT, so neither
    autovacuum's catch-up nor a due checkpoint lands inside a timed pass of one side only."""
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        with contextlib.suppress(psycopg.Error):  # CHECKPOINT needs pg_checkpoint rights
            conn.execute("CHECKPOINT")


# -- where stores live: files in a temp dir, or fresh databases on a PostgreSQL server ------
class Places(Protocol):
    backend: str

    def fresh(self, name: str, template: str | None = None) -> str: ...
    def drop(self, target: str) -> None: ...
    def close(self) -> None: ...


class SQLitePlaces:
    """A store or baseline is a file ``name.db`` in the run's temp dir."""

    backend = "sqlite"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def fresh(self, name: str, template: str | None = None) -> str:
        if template is not None:
            raise ValueError("SQLite stores are not copied from templates here")
        path = self.workdir / f"{name}.db"
        remove_db(path)
        return str(path)

    def drop(self, target: str) -> None:
        remove_db(Path(target))

    def close(self) -> None:
        pass


class PgPlaces:
    """A store or baseline is a database ``oncebox_bench_<pid>_<name>``, created (after
    dropping any leftover of that name) through an autocommit connection to the server's
    ``postgres`` database, and dropped when done or at the end of the run."""

    backend = "postgresql"

    def __init__(self, server: Any) -> None:
        self.server = server
        self.prefix = f"oncebox_bench_{os.getpid()}_"
        self.names: dict[str, str] = {}

    def _admin(self, statement: Any) -> int:
        import psycopg

        with psycopg.connect(self.server.url("postgres"), autocommit=True) as conn:
            conn.execute(statement)
            return int(conn.info.server_version)

    def fresh(self, name: str, template: str | None = None) -> str:
        """A new empty database, or a copy of the database ``template`` (a URL this object
        made; nobody may be connected to it)."""
        from psycopg import sql

        db = (self.prefix + re.sub(r"[^a-z0-9]+", "_", name.lower()))[:63]
        version = self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(db)))
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db))
        if template is not None:
            statement = sql.SQL("{} TEMPLATE {}").format(statement,
                                                         sql.Identifier(self.names[template]))
            if version >= 150000:  # a file copy; the default WAL_LOG copies through the WAL
                statement = sql.SQL("{} STRATEGY FILE_COPY").format(statement)
        self._admin(statement)
        url = str(self.server.url(db))
        self.names[url] = db
        return url

    def drop(self, target: str) -> None:
        from psycopg import sql

        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(self.names.pop(target))))

    def close(self) -> None:
        for target in list(self.names):
            with contextlib.suppress(Exception):
                self.drop(target)


def open_box(target: str) -> oncebox.Oncebox:
    """A store file's path, or a PostgreSQL database's URL."""
    url = target if is_pg(target) else f"sqlite:///{Path(target).resolve()}"
    if SLOW_VFS and not is_pg(target):
        url += f"?vfs={SLOW_VFS}"
    return oncebox.open(url, inboxes=INBOXES)


def verdicts(box: oncebox.Oncebox, inbox: str) -> dict[str, int]:
    return dict(box.stats(inbox)["verdicts"])


def box_pass(
    box: oncebox.Oncebox, inbox: str, items: list[oncebox.Delivery], batch: int | None
) -> tuple[float, dict[str, int]]:
    """Time one pass (``batch`` per ingest_batch, or None for ingest one by one) and
    return its seconds and the verdicts it added (read from the store, untimed)."""
    before = verdicts(box, inbox)
    if batch is None:
        ingest = box.ingest
        started = time.perf_counter()
        for item in items:
            ingest(inbox, item)
    else:
        ingest_batch = box.ingest_batch
        started = time.perf_counter()
        for j in range(0, len(items), batch):
            ingest_batch(inbox, items[j:j + batch])
    seconds = time.perf_counter() - started
    after = verdicts(box, inbox)
    added = {v: after.get(v, 0) - before.get(v, 0) for v in after}
    return seconds, {v: n for v, n in added.items() if n}


def expect(what: str, added: dict[str, int], verdict: str, n: int) -> None:
    """The passes must do what they claim (all new, then all duplicates) or the figures
    mean nothing; this checks verdicts, never timings."""
    if added != {verdict: n}:
        raise SystemExit(f"{what}: expected {n} {verdict}, the store counted {added}")


# -- memory --------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak resident set (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def own_peak_mb() -> float | None:
    """VmHWM: the peak resident set of this process image alone (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def current_rss_mb() -> float | None:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


# -- child processes -------------------------------------------------------------------------
# On Linux a process's ru_maxrss is at least its parent's peak when it was forked: exec
# keeps the old address space's high-water mark. So the measuring subprocesses are not
# started by this process once it holds the synthetic data, but by a lean launcher that
# this process starts before building any; their ru_maxrss then starts from the
# launcher's small peak (reported), and VmHWM from /proc is reported beside it.
LAUNCHER = """
import json, resource, subprocess, sys
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), flush=True)
for line in sys.stdin:
    done = subprocess.run(json.loads(line), stdout=subprocess.PIPE, text=True)
    print(json.dumps([done.returncode, done.stdout]), flush=True)
"""


class Launcher:
    """Runs ``bench/ingest.py --_child kind`` in fresh interpreters forked from a lean
    process; each child's last stdout line is its JSON result."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        kib = json.loads(self._stdout.readline())
        self.floor_mb = kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024

    def run(self, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", kind,
               "--_spec", json.dumps(spec)]
        self._stdin.write(json.dumps(cmd) + "\n")
        self._stdin.flush()
        code, out = json.loads(self._stdout.readline())
        if code:
            raise SystemExit(f"benchmark subprocess {kind} failed with status {code}")
        return dict(json.loads(out.strip().splitlines()[-1]))

    def close(self) -> None:
        self._stdin.close()
        self._proc.wait()


def child_preload(spec: dict[str, Any]) -> dict[str, Any]:
    """Store ``count`` identities in a fresh oncebox store (ingest_batch, big batches) and
    the same digests in a fresh baseline table (copied from the store's records)."""
    codec, inbox = spec["codec"], INBOX_OF[spec["codec"]]
    start, count, batch = spec["start"], spec["count"], spec["batch"]
    store, base = spec["store"], spec["baseline"]
    started = time.perf_counter()
    box = open_box(store)
    step = max(count // 10, 1)
    for j in range(start, start + count, batch):
        box.ingest_batch(inbox, deliveries(codec, j, min(batch, start + count - j)))
        done = j + batch - start
        if done % step < batch and done < count:
            log(f"    preload {codec}: {done:,}/{count:,} stored "
                f"({time.perf_counter() - started:.0f}s)")
    added = verdicts(box, inbox)
    box.close()
    if added != {"accepted": count}:
        raise SystemExit(f"preload {codec}: expected {count} accepted, got {added}")
    baseline = open_baseline(base)
    baseline.load_from_store(store, inbox)
    stored = baseline.count()
    baseline.close()
    if stored != count:
        raise SystemExit(f"preload {codec}: baseline holds {stored} rows, expected {count}")
    return {"seconds": time.perf_counter() - started, "count": count}


def child_measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One batched pass over deliveries [start, start+count) on an existing store: a
    ``first`` pass (all new, then the baseline inserts the same new keys) or a ``dup``
    pass (all already stored). Reports rates and this process's peak RSS."""
    codec, inbox = spec["codec"], INBOX_OF[spec["codec"]]
    start, count, batch, phase = spec["start"], spec["count"], spec["batch"], spec["phase"]
    items = deliveries(codec, start, count)
    rows = digests(codec, items) if spec.get("baseline") else []
    box = open_box(spec["store"])
    rss_before, peak_before = current_rss_mb(), peak_rss_mb()
    seconds, added = box_pass(box, inbox, items, batch)
    peak_after, hwm_after = peak_rss_mb(), own_peak_mb()
    box.close()
    expect(f"{codec} {phase} pass", added, "accepted" if phase == "first" else "duplicate",
           count)
    result: dict[str, Any] = {
        "codec": codec, "phase": phase, "n": count, "seconds": seconds,
        "oncebox_eps": count / seconds, "rss_before_pass_mb": rss_before,
        "peak_rss_before_pass_mb": peak_before, "peak_rss_mb": peak_after,
        "vmhwm_mb": hwm_after,
    }
    if spec.get("baseline"):
        baseline = open_baseline(spec["baseline"])
        held = baseline.count()
        base_seconds = baseline.batched(rows, batch)
        grew = baseline.count() - held
        baseline.close()
        if grew != (count if phase == "first" else 0):
            raise SystemExit(f"baseline {phase} pass: table grew by {grew} rows")
        result["baseline_eps"] = count / base_seconds
        result["ratio"] = result["oncebox_eps"] / result["baseline_eps"]
    return result


# -- the main benchmark ----------------------------------------------------------------------
def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def case(codec: str, name: str, n: int, box_s: float, base_s: float) -> dict[str, Any]:
    box_eps, base_eps = n / box_s, n / base_s
    return {"codec": codec, "case": name, "n": n, "oncebox_seconds": box_s,
            "baseline_seconds": base_s, "oncebox_eps": box_eps, "baseline_eps": base_eps,
            "ratio": box_eps / base_eps}


def run_codec(
    codec: str, args: argparse.Namespace, places: Places, launcher: Launcher
) -> dict[str, Any]:
    inbox = INBOX_OF[codec]
    n, single_n, batch = args.n, min(args.single_n, args.n), args.batch
    log(f"[{codec}] generating {n:,} deliveries and their digests (untimed)")
    started = time.perf_counter()
    items = deliveries(codec, 0, n)
    rows = digests(codec, items)
    prep_s = time.perf_counter() - started
    log(f"[{codec}]   took {prep_s:.1f}s")
    cases = []

    log(f"[{codec}] batched: oncebox, {batch:,} per transaction")
    store = places.fresh(f"{codec}-batched")
    box = open_box(store)
    first_s, added = box_pass(box, inbox, items, batch)
    expect(f"{codec} batched first pass", added, "accepted", n)
    dup_s, added = box_pass(box, inbox, items, batch)
    expect(f"{codec} batched duplicate pass", added, "duplicate", n)
    box.close()
    log(f"[{codec}] batched: baseline, {batch:,} per transaction")
    base = places.fresh(f"{codec}-baseline-batched")
    baseline = open_baseline(base)
    base_first_s = baseline.batched(rows, batch)
    base_dup_s = baseline.batched(rows, batch)
    if baseline.count() != n:
        raise SystemExit(f"baseline batched: expected {n} rows")
    baseline.close()
    cases.append(case(codec, "batched first pass", n, first_s, base_first_s))
    cases.append(case(codec, "batched duplicate pass", n, dup_s, base_dup_s))

    mem_n = min(args.mem_n, n)
    log(f"[{codec}] memory: duplicate pass of {mem_n:,} in a subprocess, {n:,} stored")
    memory = launcher.run("measure", {"codec": codec, "store": store, "start": 0,
                                   "count": mem_n, "batch": batch, "phase": "dup"})
    memory["stored"] = n
    places.drop(store)

    log(f"[{codec}] one per transaction: oncebox, {single_n:,} deliveries")
    store = places.fresh(f"{codec}-single")
    box = open_box(store)
    single_items = items[:single_n]
    first_s, added = box_pass(box, inbox, single_items, None)
    expect(f"{codec} single first pass", added, "accepted", single_n)
    dup_s, added = box_pass(box, inbox, single_items, None)
    expect(f"{codec} single duplicate pass", added, "duplicate", single_n)
    box.close()
    places.drop(store)
    log(f"[{codec}] one per transaction: baseline, {single_n:,} rows")
    single_base = places.fresh(f"{codec}-baseline-single")
    baseline = open_baseline(single_base)
    base_first_s = baseline.single(rows[:single_n])
    base_dup_s = baseline.single(rows[:single_n])
    if baseline.count() != single_n:
        raise SystemExit(f"baseline single: expected {single_n} rows")
    baseline.close()
    places.drop(single_base)
    places.drop(base)
    cases.append(case(codec, "one-per-tx first pass", single_n, first_s, base_first_s))
    cases.append(case(codec, "one-per-tx duplicate pass", single_n, dup_s, base_dup_s))
    if args.naive:
        add_naive(codec, items, cases, places, batch, single_n)
    return {"cases": cases, "memory": memory, "prepare_seconds": prep_s}


def add_naive(codec: str, items: list[oncebox.Delivery], cases: list[dict[str, Any]],
              places: Places, batch: int, single_n: int) -> None:
    """--naive: the same passes through bench/peers.py's naive sqlite3 inbox, a second
    baseline. Its key is the codec's identity (found untimed, as the floor's digests); the
    payload's SHA-256 and text are made in its timed loop."""
    found = CONFIGURED[codec]
    events = []
    for item in items:
        identity = prepare(found, item).identity
        if identity is None:
            raise SystemExit(f"synthetic {codec} delivery has no identity")
        events.append((identity.identity, item.body))
    by_name = {c["case"]: c for c in cases}
    for label, rows, size in (("batched", events, batch), ("one-per-tx", events[:single_n], 1)):
        log(f"[{codec}] {label}: naive sqlite3 inbox, {len(rows):,} rows")
        path = places.fresh(f"{codec}-naive-{label}")
        naive = Naive(Path(path))
        first_s, new = naive.run(rows, size)
        dup_s, again = naive.run(rows, size)
        naive.close()
        places.drop(path)
        if (new, again) != (len(rows), 0):
            raise SystemExit(f"naive {label}: {new} then {again} new of {len(rows)}")
        for step, seconds in (("first", first_s), ("duplicate", dup_s)):
            c = by_name[f"{label} {step} pass"]
            c["naive_eps"] = len(rows) / seconds
            c["naive_ratio"] = c["oncebox_eps"] / c["naive_eps"]


# -- several client processes into one database (PostgreSQL) --------------------------------
def child_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One of several concurrent clients: builds its share of deliveries (and digests, for
    the baseline), connects, says ``ready``, waits for ``go`` on stdin, then ingests its
    share in batches and reports when it began and ended (CLOCK_MONOTONIC, system-wide)."""
    codec, inbox, side = spec["codec"], INBOX_OF[spec["codec"]], spec["side"]
    start, count, batch = spec["start"], spec["count"], spec["batch"]
    items = deliveries(codec, start, count)
    if side == "baseline":
        rows = digests(codec, items)
        baseline = open_baseline(spec["store"])
    else:
        box = open_box(spec["store"])
    label = spec.get("label")
    print("ready", flush=True)
    sys.stdin.readline()
    began, error = time.monotonic(), None
    if side == "baseline":
        baseline.batched(rows, batch)
    else:
        step = max(count // 5, 1)
        for j in range(0, count, batch):
            try:
                box.ingest_batch(inbox, items[j:j + batch])
            except oncebox.StorageError as exc:  # reported as this worker's result
                error = f"{type(exc).__name__} after {j:,} of {count:,}: {exc}"
                break
            if label and (j + batch) % step < batch and j + batch < count:
                log(f"    {label}: {j + batch:,}/{count:,} ({time.monotonic() - began:.0f}s)")
    ended = time.monotonic()
    (baseline if side == "baseline" else box).close()
    return {"began": began, "ended": ended, "n": count, "error": error}


def run_workers(side: str, store: str, codec: str, start: int, n: int, procs: int,
                batch: int, label: str | None = None) -> dict[str, Any]:
    """``procs`` client processes, each with a disjoint share of deliveries [start,
    start+n), released together once all are connected; the rate is n over the time from
    the first start to the last finish."""
    bounds = [start + n * k // procs for k in range(procs + 1)]
    script = str(Path(__file__).resolve())
    children = []
    for k in range(procs):
        spec = {"side": side, "store": store, "codec": codec, "start": bounds[k],
                "count": bounds[k + 1] - bounds[k], "batch": batch,
                "label": f"{label} {k + 1}/{procs}" if label else None}
        children.append(subprocess.Popen(
            [sys.executable, script, "--_child", "worker", "--_spec", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"a {side} worker failed to start (status {child.wait()})")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    spans = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode:
            raise SystemExit(f"a {side} worker failed with status {child.returncode}")
        spans.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max(s["ended"] for s in spans) - min(s["began"] for s in spans)
    errors = [s["error"] for s in spans if s.get("error")]
    return {"codec": codec, "side": side, "procs": procs, "n": n, "seconds": seconds,
            "eps": n / seconds, "worker_seconds": [s["ended"] - s["began"] for s in spans],
            "errors": errors, "deadlocks": deadlocks(store)}


def deadlocks(target: str) -> int | None:
    """The server's count of deadlocks detected in this database (pg_stat_database; the
    clients have exited, so their statistics are flushed)."""
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def run_multiproc(codec: str, args: argparse.Namespace, places: Places) -> list[dict[str, Any]]:
    """A batched first pass of ``--procs-n`` deliveries into one fresh database by 1 client
    process, then by ``--procs`` processes with disjoint shares, alternately, ``--repeat``
    times; the same for the baseline. Each row gives the median rate and its range."""
    inbox, n, results = INBOX_OF[codec], args.procs_n, []
    counts = tuple(dict.fromkeys((1, args.procs)))
    for side in ("oncebox", "baseline"):
        runs: dict[int, list[dict[str, Any]]] = {procs: [] for procs in counts}
        for attempt in range(args.repeat):
            for procs in counts:
                log(f"[{codec}] {procs} process{'es' if procs > 1 else ''}: {side}, {n:,} "
                    f"deliveries, {args.batch:,} per transaction, one database "
                    f"(run {attempt + 1}/{args.repeat})")
                target = places.fresh(f"{codec}-mp-{side}-{procs}")
                # Schema and inboxes exist before the clients race to open them.
                (open_box if side == "oncebox" else open_baseline)(target).close()
                result = run_workers(side, target, codec, 0, n, procs, args.batch)
                if result["errors"]:
                    # A client that gave up is part of the finding: reported, no rate.
                    for error in result["errors"]:
                        log(f"[{codec}]   a client gave up: {error}")
                    result["eps"] = None
                elif side == "oncebox":
                    box = open_box(target)
                    expect(f"{codec} {procs}-process pass", verdicts(box, inbox), "accepted",
                           n)
                    box.close()
                else:
                    baseline = open_baseline(target)
                    if baseline.count() != n:
                        raise SystemExit(f"baseline {procs}-process pass: expected {n} rows")
                    baseline.close()
                places.drop(target)
                runs[procs].append(result)
        one: float | None = None
        for procs in counts:
            rates = [r["eps"] for r in runs[procs] if r["eps"] is not None]
            eps = statistics.median(rates) if rates else None
            if procs == 1:
                one = eps
            results.append({
                "codec": codec, "side": side, "procs": procs, "n": n, "eps": eps,
                "eps_min": min(rates) if rates else None,
                "eps_max": max(rates) if rates else None,
                "over_one": eps / one if eps is not None and one else None,
                "deadlocks": [r["deadlocks"] for r in runs[procs]],
                "errors": [e for r in runs[procs] for e in r["errors"]],
                "failed_runs": sum(r["eps"] is None for r in runs[procs]),
                "runs": runs[procs]})
    return results


def run_scale(
    codec: str, args: argparse.Namespace, places: Places, launcher: Launcher
) -> dict[str, Any]:
    sizes = (args.scale_small, args.scale_big)
    sample = args.scale_sample
    points, memory = [], []
    for size in sizes:
        store = places.fresh(f"{codec}-scale-{size}")
        base = places.fresh(f"{codec}-scale-{size}-baseline")
        if places.backend == "sqlite":
            log(f"[{codec}] scale: preloading {size:,} identities (subprocess)")
            pre = launcher.run("preload", {"codec": codec, "store": store, "baseline": base,
                                        "start": PRELOAD_START, "count": size,
                                        "batch": PRELOAD_BATCH})
        else:
            raise SystemExit("run_scale is SQLite's; PostgreSQL uses run_scale_pg")
        log(f"[{codec}]   preloaded in {pre['seconds']:.1f}s")
        log(f"[{codec}] scale: first pass of {sample:,} new with {size:,} stored (subprocess)")
        point = launcher.run("measure", {"codec": codec, "store": store,
                                      "baseline": base, "start": 0, "count": sample,
                                      "batch": args.batch, "phase": "first"})
        point.update(stored=size, preload_seconds=pre["seconds"])
        points.append(point)
        log(f"[{codec}] memory: duplicate pass of {sample:,} with {size + sample:,} stored "
            f"(subprocess)")
        mem = launcher.run("measure", {"codec": codec, "store": store, "start": 0,
                                    "count": sample, "batch": args.batch, "phase": "dup"})
        mem["stored"] = size + sample
        memory.append(mem)
        places.drop(store)
        places.drop(base)
    return {"codec": codec, "sample": sample, "points": points, "memory": memory,
            "scale_ratio": points[1]["ratio"] / points[0]["ratio"]}


def run_scale_pg(
    codec: str, args: argparse.Namespace, places: PgPlaces, launcher: Launcher
) -> dict[str, Any]:
    """``--scale`` on PostgreSQL: each size is preloaded once into a pair of databases that
    then serve as templates. Each of the ``--repeat`` measurements runs on fresh copies
    (CREATE DATABASE ... TEMPLATE, untimed), so every run starts from the same state; the
    point's figures are the medians over the runs."""
    sizes = (args.scale_small, args.scale_big)
    sample = args.scale_sample
    points, memory = [], []
    for size in sizes:
        store_t = places.fresh(f"{codec}-scale-{size}")
        base_t = places.fresh(f"{codec}-scale-{size}-baseline")
        pre = pg_preload(codec, store_t, base_t, size)
        log(f"[{codec}]   preloaded in {pre['seconds']:.1f}s "
            f"(ingest {pre['ingest_eps']:,.0f} ev/s)")
        runs = []
        for attempt in range(args.repeat):
            store = places.fresh(f"{codec}-scale-{size}-run", template=store_t)
            base = places.fresh(f"{codec}-scale-{size}-baseline-run", template=base_t)
            log(f"[{codec}] scale: first pass of {sample:,} new with {size:,} stored "
                f"(subprocess, run {attempt + 1}/{args.repeat})")
            runs.append(launcher.run("measure", {"codec": codec, "store": store,
                                                 "baseline": base, "start": 0,
                                                 "count": sample, "batch": args.batch,
                                                 "phase": "first"}))
            if attempt < args.repeat - 1:
                places.drop(store)
                places.drop(base)
        points.append({
            "codec": codec, "stored": size, "n": sample,
            "oncebox_eps": statistics.median(r["oncebox_eps"] for r in runs),
            "baseline_eps": statistics.median(r["baseline_eps"] for r in runs),
            "ratio": statistics.median(r["ratio"] for r in runs),
            "run_ratios": [r["ratio"] for r in runs], "runs": runs,
            "preload_seconds": pre["seconds"], "preload_ingest_eps": pre["ingest_eps"]})
        log(f"[{codec}] memory: duplicate pass of {sample:,} with {size + sample:,} stored "
            f"(subprocess)")
        mem = launcher.run("measure", {"codec": codec, "store": store, "start": 0,
                                    "count": sample, "batch": args.batch, "phase": "dup"})
        mem["stored"] = size + sample
        memory.append(mem)
        for target in (store, base, store_t, base_t):
            places.drop(target)
    return {"codec": codec, "sample": sample, "points": points, "memory": memory,
            "scale_ratio": points[1]["ratio"] / points[0]["ratio"]}


def pg_preload(codec: str, store: str, base: str, size: int) -> dict[str, Any]:
    """Store ``size`` identities through oncebox itself (``ingest_batch``, 10,000 per call,
    in one client process), copy their digests into the baseline table, then VACUUM
    ANALYZE and CHECKPOINT both (see :func:`vacuum`).

    One process, because concurrent preloaders fail: 10,000 identities per batch take
    10,000 advisory locks, and a few such transactions at once exhaust the server's lock
    table (max_locks_per_transaction); and concurrent ussd batches deadlock on
    triage_totals."""
    inbox = INBOX_OF[codec]
    log(f"[{codec}] scale: preloading {size:,} identities (one process, "
        f"{PRELOAD_BATCH:,} per ingest_batch)")
    started = time.perf_counter()
    open_box(store).close()
    ingest = run_workers("oncebox", store, codec, PRELOAD_START, size, 1, PRELOAD_BATCH,
                         label=f"[{codec}] preload" if size >= 10 * PRELOAD_BATCH else None)
    if ingest["errors"]:
        raise SystemExit(f"preload {codec}: {'; '.join(ingest['errors'])}")
    box = open_box(store)
    expect(f"preload {codec}", verdicts(box, inbox), "accepted", size)
    box.close()
    baseline = open_baseline(base)
    baseline.load_from_store(store, inbox)
    stored = baseline.count()
    baseline.close()
    if stored != size:
        raise SystemExit(f"preload {codec}: baseline holds {stored} rows, expected {size}")
    vacuum(store)
    vacuum(base)
    return {"seconds": time.perf_counter() - started, "count": size,
            "ingest_seconds": ingest["seconds"], "ingest_eps": ingest["eps"]}


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


# -- report ----------------------------------------------------------------------------------
def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def targets(cases: list[dict[str, Any]], backend: str = "sqlite") -> None:
    """Annotate each case with its target text and whether this run met it. PostgreSQL's
    issue sets a target for the batched first pass only; the other cases show dup/first."""
    by_name = {(c["codec"], c["case"]): c for c in cases}
    for c in cases:
        if c["case"] == "batched first pass":
            wanted = TARGET_BATCHED if backend == "sqlite" else TARGET_BATCHED_PG
            c["target"] = f"ratio >= {wanted}"
            c["met"] = c["ratio"] >= wanted
        elif backend != "sqlite":
            if c["case"].endswith("duplicate pass"):
                first = by_name[c["codec"], c["case"].replace("duplicate", "first")]
                c["dup_over_first"] = c["oncebox_eps"] / first["oncebox_eps"]
                c["target"] = f"none (dup/first is {c['dup_over_first']:.3f})"
            else:
                c["target"] = "none"
        elif c["case"].endswith("first pass"):
            c["target"] = f"ratio >= {TARGET_SINGLE}"
            c["met"] = c["ratio"] >= TARGET_SINGLE
        else:
            first = by_name[c["codec"], c["case"].replace("duplicate", "first")]
            c["dup_over_first"] = c["oncebox_eps"] / first["oncebox_eps"]
            text = f"dup/first >= {TARGET_DUP} (is {c['dup_over_first']:.3f})"
            c["met"] = c["dup_over_first"] >= TARGET_DUP
            if c["case"].startswith("one-per-tx"):
                text += f"; ratio >= {TARGET_SINGLE}"
                c["met_dup"], c["met_ratio"] = c["met"], c["ratio"] >= TARGET_SINGLE
                c["met"] = c["met_dup"] and c["met_ratio"]
            c["target"] = text


def met_text(c: dict[str, Any]) -> str:
    if "met" not in c:
        return "-"
    if "met_dup" in c:
        return f"{yes(c['met_dup'])}; {yes(c['met_ratio'])}"
    return yes(c["met"])


def yes(met: bool) -> str:
    return "yes" if met else "no"


def table(out: TextIO, header: Sequence[str], rows: list[Sequence[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(),
              file=out)


def report(out: TextIO, figures: dict[str, Any]) -> None:
    meta = figures["meta"]
    pg = meta.get("backend") == "postgresql"
    print("", file=out)
    if pg:
        report_pg_header(out, meta)
    else:
        print(f"oncebox ingest benchmark: APSW {meta['apsw']}, SQLite {meta['sqlite']}, "
              f"Python {meta['python']}, {meta['cpus']} CPUs", file=out)
        print(f"oncebox from {meta['oncebox']}; load average (1, 5, 15 min) "
              f"{meta['load_average_before']} before, {meta['load_average_after']} after",
              file=out)
        print("store and baseline alike: WAL, synchronous=FULL, BEGIN IMMEDIATE ... COMMIT, a "
              "fresh file per case in a temp dir", file=out)
        print("baseline: INSERT OR IGNORE (identity SHA-256, witness SHA-256) into a table "
              "with PRIMARY KEY on the identity digest;", file=out)
        print("  its digests are computed outside the timed region (oncebox's timed region "
              "includes decoding, validation and hashing)", file=out)
    if figures["cases"] and pg:
        print(f"batched cases: N={meta['n']:,}, {meta['batch']:,} per transaction; "
              f"one-per-transaction cases: --single-n={meta['single_n']:,}", file=out)
        print("duplicate passes: the baseline's ON CONFLICT DO NOTHING of a stored key writes "
              "nothing; oncebox records each repeat", file=out)
        print("  (seen_count, last_seen, verdict counters), so its duplicate passes write",
              file=out)
        print("", file=out)
        table(out, ["codec", "case", "n", "oncebox ev/s", "baseline ev/s", "ratio", "target",
                    "met"],
              [[c["codec"], c["case"], f"{c['n']:,}", f"{c['oncebox_eps']:,.0f}",
                f"{c['baseline_eps']:,.0f}", f"{c['ratio']:.3f}", c["target"],
                met_text(c)] for c in figures["cases"]])
    elif figures["cases"]:
        print(f"batched cases: N={meta['n']:,}, {meta['batch']:,} per transaction; "
              f"one-per-transaction cases use the smaller --single-n={meta['single_n']:,}, "
              f"since every commit fsyncs the WAL", file=out)
        print("duplicate passes: the baseline's INSERT OR IGNORE of a stored key changes no "
              "page, so its commit writes and syncs nothing;", file=out)
        print("  oncebox's records the repeat (seen_count, last_seen, verdict counters), so "
              "each of its commits writes and fsyncs", file=out)
        naive = all("naive_eps" in c for c in figures["cases"])
        if naive:
            print(f"naive: --naive's second baseline, bench/peers.py's naive sqlite3 inbox "
                  f"(Python's sqlite3, SQLite {sqlite3.sqlite_version}, WAL, synchronous=FULL,",
                  file=out)
            print("  (key TEXT PRIMARY KEY, sha BLOB, payload TEXT), executemany(INSERT OR "
                  "IGNORE) per transaction); its key is the identity text, found untimed,",
                  file=out)
            print("  which these synthetic deliveries bring in order (json-event ascending, "
                  "ussd-h1 neighbour after neighbour): its inserts stay on a few hot pages,",
                  file=out)
            print("  where the floor's random digests scatter (bench/peers.py has random "
                  "UUID keys)", file=out)
        print("", file=out)
        table(out, ["codec", "case", "n", "oncebox ev/s", "baseline ev/s", "ratio", "target",
                    "met", *(["naive ev/s", "x naive"] if naive else [])],
              [[c["codec"], c["case"], f"{c['n']:,}", f"{c['oncebox_eps']:,.0f}",
                f"{c['baseline_eps']:,.0f}", f"{c['ratio']:.3f}", c["target"], met_text(c),
                *([f"{c['naive_eps']:,.0f}", f"{c['naive_ratio']:.3f}"] if naive else [])]
               for c in figures["cases"]])
    if figures.get("multiproc"):
        print("", file=out)
        print(f"client processes: a batched first pass of N={meta['procs_n']:,} into one fresh "
              f"database, by 1 process and by {meta['procs']} with disjoint shares,", file=out)
        print(f"  alternately, {meta['repeat']} runs each; the clients start together and "
              f"ev/s = N / (last finish - first start); median and range over the runs.",
              file=out)
        print(f"  The {meta['cpus']} CPUs are shared by all clients and the server. deadlocks: "
              f"per run, as counted by the server in that database", file=out)
        print("  (each waits deadlock_timeout, 1 s by default, then one side rolls back and "
              "retries)", file=out)
        rows = []
        for r in figures["multiproc"]:
            target = ""
            if r["procs"] > 1:
                if r["side"] == "oncebox":
                    met = r["over_one"] is not None and r["over_one"] >= TARGET_PROCS
                    target = f"x >= {TARGET_PROCS}: {yes(met)}"
                else:
                    target = "(context)"
            rate = "-" if r["eps"] is None else f"{r['eps']:,.0f}"
            spread = ("-" if r["eps"] is None
                      else f"{r['eps_min']:,.0f}-{r['eps_max']:,.0f}")
            rows.append([r["codec"], r["side"], str(r["procs"]), f"{r['n']:,}", rate, spread,
                         "-" if r["over_one"] is None else f"x{r['over_one']:.2f}",
                         ",".join(str(d) for d in r["deadlocks"]),
                         str(r["failed_runs"]), target])
        table(out, ["codec", "side", "processes", "n", "median ev/s", "range ev/s",
                    "vs 1 process", "deadlocks", "failed runs", "target"], rows)
        for r in figures["multiproc"]:
            for error in r["errors"]:
                print(f"  a client gave up ({r['codec']} {r['side']} x{r['procs']}): {error}",
                      file=out)
    if figures["scale"]:
        print("", file=out)
        print("scale: batched first pass of a fixed sample of new deliveries, each size in "
              "subprocesses of its own;", file=out)
        print("  the summary row gives each side's rate at the big size over its rate at the "
              "small one (x...) and the ratio of ratios", file=out)
        if pg:
            print(f"  preload: through oncebox (ingest_batch, {PRELOAD_BATCH:,} per call, one "
                  f"process), the baseline's table copied from the records with COPY; then",
                  file=out)
            print("  VACUUM ANALYZE and CHECKPOINT on both databases, untimed. Each point is "
                  f"the median of {meta['repeat']} runs, each on fresh copies", file=out)
            print("  (CREATE DATABASE ... TEMPLATE) of the preloaded pair; the ratio of each "
                  "run is in the last column", file=out)
            for s in figures["scale"]:
                print(f"  {s['codec']} preloads (all steps; ingest rate): " + "; ".join(
                    f"{p['stored']:,} in {p['preload_seconds']:.0f}s "
                    f"({p['preload_ingest_eps']:,.0f} ev/s)" for p in s["points"]), file=out)
        rows = []
        for s in figures["scale"]:
            for p in s["points"]:
                rows.append([s["codec"], f"{p['stored']:,}", f"{p['n']:,}",
                             f"{p['oncebox_eps']:,.0f}", f"{p['baseline_eps']:,.0f}",
                             f"{p['ratio']:.3f}", ""]
                            + ([" ".join(f"{x:.3f}" for x in p["run_ratios"])] if pg else []))
            small, big = (size_label(p["stored"]) for p in s["points"])
            low, high = s["points"]
            rows.append([s["codec"], f"ratio_at_{big} / ratio_at_{small}", "",
                         f"x{high['oncebox_eps'] / low['oncebox_eps']:.2f}",
                         f"x{high['baseline_eps'] / low['baseline_eps']:.2f}",
                         f"{s['scale_ratio']:.3f}",
                         f"target >= {TARGET_SCALE}: "
                         f"{yes(s['scale_ratio'] >= TARGET_SCALE)}"] + ([""] if pg else []))
        table(out, ["codec", "stored before", "sample", "oncebox ev/s", "baseline ev/s",
                    "ratio", "target"] + (["ratio per run"] if pg else []), rows)
    if figures["memory"]:
        print("", file=out)
        print("memory: a subprocess per row opens the store, builds its sample and runs one "
              "batched duplicate pass;", file=out)
        print(f"  peak RSS = its ru_maxrss (launched from a lean process whose own peak, "
              f"{meta['launcher_peak_rss_mb']:.1f} MB, is the floor Linux carries over), "
              f"VmHWM = its own /proc peak", file=out)
        if pg:
            print("  (the client process's memory only; the server's is not counted)", file=out)

        def mb(value: float | None) -> str:
            return "?" if value is None else f"{value:.1f}"

        table(out, ["codec", "stored identities", "dup pass n", "dup ev/s",
                    "RSS before pass MB", "peak RSS MB", "VmHWM MB"],
              [[m["codec"], f"{m['stored']:,}", f"{m['n']:,}", f"{m['oncebox_eps']:,.0f}",
                mb(m["rss_before_pass_mb"]), mb(m["peak_rss_mb"]), mb(m["vmhwm_mb"])]
               for m in figures["memory"]])
    print("", file=out)
    print(f"benchmark process peak RSS (holds all synthetic deliveries): "
          f"{meta['peak_rss_mb']:.1f} MB; wall time {meta['wall_seconds']:.0f}s", file=out)


def report_pg_header(out: TextIO, meta: dict[str, Any]) -> None:
    settings = meta["settings"]
    print(f"oncebox ingest benchmark on PostgreSQL {meta['server_version']} "
          f"({meta['server']}), psycopg {meta['psycopg']} (libpq {meta['libpq']}), "
          f"Python {meta['python']}, {meta['cpus']} CPUs shared by the clients and the server",
          file=out)
    print(f"oncebox from {meta['oncebox']}; load average (1, 5, 15 min) "
          f"{meta['load_average_before']} before, {meta['load_average_after']} after", file=out)
    print("server settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), file=out)
    if settings.get("fsync") == "off" or settings.get("synchronous_commit") == "off":
        print("  NOT DURABLE: commits do not wait for the disk; these are throughput figures "
              "(--pg-throwaway --durable keeps fsync on)", file=out)
    print("store and baseline alike: a fresh database per case (CREATE DATABASE "
          "oncebox_bench_<pid>_<case>, dropped after), one transaction", file=out)
    print("  per batch or per delivery at READ COMMITTED", file=out)
    print("baseline: INSERT INTO dedup (ident, witness) VALUES (%s, %s) ON CONFLICT DO NOTHING "
          "through psycopg's cursor.executemany", file=out)
    print("  (pipelined by psycopg), one BEGIN ... COMMIT per batch; dedup (ident bytea PRIMARY "
          "KEY, witness bytea NOT NULL);", file=out)
    print("  its digests are computed outside the timed region (oncebox's timed region "
          "includes decoding, validation and hashing)", file=out)


def pg_meta(server: Any, description: str) -> dict[str, Any]:
    import psycopg

    names = ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers",
             "max_connections")
    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = {name: conn.execute(f"SHOW {name}").fetchone() for name in names}
    return {"backend": "postgresql", "server": description,
            "server_version": version[0] if version else "?",
            "settings": {k: v[0] if v else "?" for k, v in settings.items()},
            "psycopg": psycopg.__version__, "libpq": psycopg.pq.version()}


def without_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) == 2:
        netloc[0] = netloc[0].split(":", 1)[0]
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "password"]
    return urllib.parse.urlunsplit(parts._replace(netloc="@".join(netloc),
                                                  query=urllib.parse.urlencode(query, safe="/")))


@contextlib.contextmanager
def pg_server(args: argparse.Namespace) -> Any:
    """The server the run uses: a throwaway one (tests/pgcluster.py), stopped and wiped
    afterwards, or the one ``--db`` names, reached through its ``postgres`` database."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pgcluster import ExternalServer, PgCluster

    if not args.pg_throwaway:
        given = ExternalServer(args.db)
        server = ExternalServer(given.url("postgres"))
        yield server, f"--db {without_password(args.db)}"
        return
    base = Path(tempfile.mkdtemp(prefix="oncebox-bench-pg-", dir=args.dir or "/tmp"))
    log(f"starting a throwaway PostgreSQL server in {base} "
        f"({'durable' if args.durable else 'fsync off'})")
    cluster = PgCluster.start(base, durable=args.durable)
    try:
        yield cluster, f"throwaway server from tests/pgcluster.py, unix socket, " \
                       f"{'durable' if args.durable else 'durable=False'}"
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


# -- command line ----------------------------------------------------------------------------
def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=None,
                   help="deliveries per batched pass (default 200,000; on PostgreSQL 20,000)")
    p.add_argument("--single-n", type=int, default=None,
                   help="deliveries per one-per-transaction pass (default 5,000; on "
                        "PostgreSQL 2,000)")
    p.add_argument("--batch", type=int, default=1_000,
                   help="deliveries per transaction in batched passes (default 1,000)")
    p.add_argument("--codec", choices=[*CODECS, "all", "both"], default="all",
                   help="one codec, or all of them (both: the old name of all)")
    p.add_argument("--mem-n", type=int, default=20_000,
                   help="duplicate-pass size for the peak-RSS subprocess (default 20,000)")
    p.add_argument("--scale", action="store_true",
                   help="also measure the ratio with --scale-small vs --scale-big stored")
    p.add_argument("--scale-small", type=int, default=10_000)
    p.add_argument("--scale-big", type=int, default=1_000_000)
    p.add_argument("--scale-sample", type=int, default=20_000,
                   help="new deliveries timed at each size (default 20,000)")
    p.add_argument("--skip-main", action="store_true",
                   help="skip the N-delivery cases (with --scale: run only the scale check)")
    p.add_argument("--dir", default=None, help="where to make the temp dir (default: system;"
                   " for --pg-throwaway /tmp, which the postgres user can reach)")
    p.add_argument("--db", default=None, metavar="URL",
                   help="run on the PostgreSQL server of this postgresql:// URL: each case "
                        "gets a fresh database oncebox_bench_<pid>_<case>, created and dropped "
                        "through the server's postgres database (needs CREATEDB); the "
                        "database the URL names is not touched")
    p.add_argument("--pg-throwaway", action="store_true",
                   help="run on a private PostgreSQL server started for the run "
                        "(tests/pgcluster.py) with fsync off, and stopped after")
    p.add_argument("--durable", action="store_true",
                   help="with --pg-throwaway: keep fsync and synchronous_commit on")
    p.add_argument("--procs", type=int, default=4,
                   help="PostgreSQL: client processes in the multi-process case (default 4)")
    p.add_argument("--procs-n", type=int, default=10_000,
                   help="PostgreSQL: deliveries per multi-process pass (default 10,000)")
    p.add_argument("--repeat", type=int, default=3,
                   help="PostgreSQL: runs of each multi-process pass and of each scale "
                        "measurement; medians are reported (default 3)")
    p.add_argument("--sync-delay-ms", type=float, default=0.0,
                   help="SQLite: emulate a slower disk, every fsync this much longer "
                        "(main cases only; default 0, this disk)")
    p.add_argument("--naive", action="store_true",
                   help="also run bench/peers.py's naive sqlite3 inbox as a second baseline")
    p.add_argument("--json", action="store_true",
                   help="print figures as JSON on stdout (the table goes to stderr)")
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_spec", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.db and args.pg_throwaway:
        p.error("--db and --pg-throwaway exclude each other")
    if args.db and not is_pg(args.db):
        p.error("--db takes a postgresql:// URL (SQLite runs use a temp dir: see --dir)")
    if args.sync_delay_ms and (args.db or args.pg_throwaway or args.scale):
        p.error("--sync-delay-ms is for the main SQLite cases (not PostgreSQL or --scale)")
    if args.naive and (args.db or args.pg_throwaway or args.sync_delay_ms or args.skip_main):
        p.error("--naive is for the main SQLite cases on the real disk (Python's sqlite3 "
                "cannot use the emulated slow disk)")
    if args.durable and not args.pg_throwaway:
        p.error("--durable goes with --pg-throwaway (a --db server keeps its own settings)")
    pg = bool(args.db or args.pg_throwaway)
    if args.n is None:
        args.n = 20_000 if pg else 200_000
    if args.single_n is None:
        args.single_n = 2_000 if pg else 5_000
    for name in ("n", "single_n", "batch", "mem_n", "scale_small", "scale_big",
                 "scale_sample", "procs", "procs_n", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args._child:
        child = {"preload": child_preload, "measure": child_measure,
                 "worker": child_worker}[args._child]
        print(json.dumps(child(json.loads(args._spec))), flush=True)
        return 0
    if args.db or args.pg_throwaway:
        return main_pg(args)

    global SLOW_VFS
    slow = slowdisk.SlowSync(args.sync_delay_ms / 1000) if args.sync_delay_ms else None
    if slow is not None:
        SLOW_VFS = slowdisk.NAME
        log(f"emulated slower disk: every fsync {args.sync_delay_ms:g} ms longer")
    started, load_before = time.perf_counter(), load_average()
    codecs = list(CODECS) if args.codec in ("all", "both") else [args.codec]
    figures: dict[str, Any] = {"cases": [], "scale": [], "memory": []}
    launcher = Launcher()  # before any synthetic data exists: see LAUNCHER
    with tempfile.TemporaryDirectory(prefix="oncebox-bench-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        places = SQLitePlaces(workdir)
        log(f"working in {workdir}")
        if not args.skip_main:
            for codec in codecs:
                result = run_codec(codec, args, places, launcher)
                figures["cases"].extend(result["cases"])
                figures["memory"].append(result["memory"])
        if args.scale:
            for codec in codecs:
                scaled = run_scale(codec, args, places, launcher)
                figures["scale"].append(scaled)
                figures["memory"].extend(scaled.pop("memory"))
    launcher.close()
    targets(figures["cases"])
    # What one delivery writes (bench/budget.py; pinned by tests/test_write_budget.py).
    figures["budget"] = budget.figures_for()
    figures["meta"] = {
        "apsw": apsw.apsw_version(), "sqlite": apsw.sqlite_lib_version(),
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "codecs": codecs,
        "n": args.n, "single_n": min(args.single_n, args.n), "batch": args.batch,
        "mem_n": args.mem_n, "scale_small": args.scale_small, "scale_big": args.scale_big,
        "scale_sample": args.scale_sample, "baseline_digests": "precomputed, untimed",
        "peak_rss_mb": peak_rss_mb(), "launcher_peak_rss_mb": launcher.floor_mb,
        "wall_seconds": time.perf_counter() - started,
        "oncebox": str(Path(oncebox.__file__).parent), "load_average_before": load_before,
        "load_average_after": load_average(), "sync_delay_ms": args.sync_delay_ms,
    }
    out = sys.stderr if args.json else sys.stdout
    report(out, figures)
    print("write budget: WAL pages, fsyncs, statements and commits per delivery "
          "(bench/budget.py, 2,000 stored)", file=out)
    print(budget.report(figures["budget"]), file=out)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


def main_pg(args: argparse.Namespace) -> int:
    global SLOW_VFS
    slow = slowdisk.SlowSync(args.sync_delay_ms / 1000) if args.sync_delay_ms else None
    if slow is not None:
        SLOW_VFS = slowdisk.NAME
        log(f"emulated slower disk: every fsync {args.sync_delay_ms:g} ms longer")
    started, load_before = time.perf_counter(), load_average()
    codecs = list(CODECS) if args.codec in ("all", "both") else [args.codec]
    figures: dict[str, Any] = {"cases": [], "multiproc": [], "scale": [], "memory": []}
    launcher = Launcher()  # before any synthetic data exists: see LAUNCHER
    with pg_server(args) as (server, description):
        server_meta = pg_meta(server, description)
        places = PgPlaces(server)
        try:
            if not args.skip_main:
                for codec in codecs:
                    result = run_codec(codec, args, places, launcher)
                    figures["cases"].extend(result["cases"])
                    figures["memory"].append(result["memory"])
                    figures["multiproc"].extend(run_multiproc(codec, args, places))
            if args.scale:
                for codec in codecs:
                    scaled = run_scale_pg(codec, args, places, launcher)
                    figures["scale"].append(scaled)
                    figures["memory"].extend(scaled.pop("memory"))
        finally:
            places.close()
    launcher.close()
    targets(figures["cases"], "postgresql")
    figures["meta"] = {
        **server_meta,
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "codecs": codecs,
        "n": args.n, "single_n": min(args.single_n, args.n), "batch": args.batch,
        "procs": args.procs, "procs_n": args.procs_n, "repeat": args.repeat,
        "mem_n": args.mem_n, "scale_small": args.scale_small,
        "scale_big": args.scale_big, "scale_sample": args.scale_sample,
        "preload_batch": PRELOAD_BATCH, "baseline_digests": "precomputed, untimed",
        "peak_rss_mb": peak_rss_mb(), "launcher_peak_rss_mb": launcher.floor_mb,
        "wall_seconds": time.perf_counter() - started,
        "oncebox": str(Path(oncebox.__file__).parent), "load_average_before": load_before,
        "load_average_after": load_average(), "sync_delay_ms": args.sync_delay_ms,
    }
    report(sys.stderr if args.json else sys.stdout, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
