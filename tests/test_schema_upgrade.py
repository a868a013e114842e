"""A store made before both backends numbered their migrations alike opens with today's
code: its recorded numbers are translated once, nothing runs twice, no row is lost, and
it ends with the schema a new store has.

The old stores are made here the way the code of that time made them: the frozen copy of
its migrations (tests/fixtures/numbered_apart), recorded in its bookkeeping table of
that time (a version and when), the built-in steps' migrations recorded per step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest
from click.testing import CliRunner

import oncebox
from conftest import POSTGRES
from oncebox.domain import Record
from oncebox.errors import StorageError
from oncebox.store import open_store
from oncebox.store.migrate import RENUMBERED
from oncebox.store.sqlfile import load_migrations, to_psycopg
from oncebox.surfaces.cli import cli
from schemas import NewDatabase, backend, new_database, path, rows, schema

__all__ = ["backend", "new_database"]  # fixtures, from schemas.py

FROZEN = Path(__file__).parent / "fixtures" / "numbered_apart"
STEPS = ("triage", "generation")  # in the order the old stores' inboxes declared them
ONE_FENCE = {"sqlite": 14, "postgres": 12}  # the old migration the steps' tables came with
T = 1_800_000_000.0


def frozen(*folder: str) -> list[tuple[int, str]]:
    found = FROZEN.joinpath(*folder).glob("[0-9][0-9][0-9]_*.sql")
    return sorted((int(p.name[:3]), p.read_text("utf-8")) for p in found)


def applied_at(version: int) -> float:
    """When the old store applied its migration ``version`` (kept through the upgrade)."""
    return 1_700_000_000.0 + version


class OldStore:
    """A database opened the way the code before the renumbering opened it."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.sqlite = apsw.Connection(path(url))
            self.sqlite.execute("PRAGMA foreign_keys=ON")
        else:
            self.pg = psycopg.connect(url, autocommit=True)

    def run(self, sql: str, params: Any = None) -> None:
        """``sql`` as written (a migration), or one statement with ``?`` placeholders."""
        if self.backend == "sqlite":
            self.sqlite.execute(sql, params or ())
        elif params is None:
            self.pg.execute(sql)
        else:
            self.pg.execute(to_psycopg(sql), params)

    def migrate(self, upto: int) -> None:
        """The store's own migrations up to ``upto``, each in its own transaction."""
        real = "REAL" if self.backend == "sqlite" else "double precision"
        self.run(
            f"CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"
        )
        for version, sql in frozen(self.backend):
            if version <= upto:
                self.run("BEGIN")
                self.run(sql)
                self.run("INSERT INTO schema_version VALUES (?, ?)", (version, applied_at(version)))
                self.run("COMMIT")

    def steps(self) -> None:
        """The built-in steps' migrations, as declaring their inboxes applied them."""
        for step in STEPS:
            for version, sql in frozen("steps", self.backend, step):
                self.run("BEGIN")
                self.run(sql)
                self.run(
                    "INSERT INTO step_schema (step, version, applied_at) VALUES (?, ?, ?)",
                    (step, version, applied_at(version)),
                )
                self.run("COMMIT")

    def insert(self, table: str, row: dict[str, Any]) -> None:
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.run(f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row.values()))

    def close(self) -> None:
        if self.backend == "sqlite":
            self.sqlite.close()
        else:
            self.pg.close()


def fill(old: OldStore) -> None:
    """A row in every table. On PostgreSQL the second record is sealed through the queue
    (log_seq = -1, its position in seal_positions), as records were from its migration 10."""
    transport = {"device_time": "2026-11-01T10:00:00Z", "snapshot_id": "snap-1",
                 "delivery_id": "d-1"}  # fmt: skip
    old.insert("inboxes", {
        "name": "ussd", "codec": "ussd-h1", "apply": "triage", "retention_seconds": 2592000.0,
        "tombstone_seconds": None, "fenced": False, "dropped_duplicates": 2,
        "dropped_late_replays": 1, "dropped_max_lateness": 3.5,
    })  # fmt: skip
    for n, log_seq in ((1, 1), (2, -1 if old.backend == "postgres" else 2)):
        old.insert("records", {
            "inbox_id": 1, "ident": bytes([n]) * 32, "identity": f"rec{n}-{n}",
            "witness": bytes([n + 10]) * 32, "revision": n, "content": b"H1|1|Kakuma1|MED|3",
            "fields": '{"site": "Kakuma1"}', "first_seen": T + n, "last_seen": T + 9,
            "seen_count": 3, "evicted_at": None, "late_replays": 1, "max_lateness": 2.5,
            **transport, "log_seq": log_seq, "revised_at": T + 8 if n == 2 else None,
            "signature": '{"scheme": "standard"}',
        })  # fmt: skip
    if old.backend == "postgres":
        old.insert("seal_positions", {"record_id": 2, "seq": 2})
    old.insert("revisions", {
        "record_id": 2, "revision": 1, "witness": b"\x21" * 32, "content": b"H1|old",
        "fields": "{}", "decided_at": T + 2, "superseded_at": T + 8, "note": "kept the new",
    })  # fmt: skip
    old.insert("quarantine", {
        "inbox_id": 1, "ident": b"\x01" * 32, "identity": "rec1-1", "record_id": 1,
        "witness": b"\x31" * 32, "content": b"H1|other", "fields": "{}", "reason": "conflict",
        "status": "kept", "note": "first stays", "first_seen": T + 3, "last_seen": T + 4,
        "seen_count": 2, "resolved_at": T + 5, **transport, "resolved_by": "ops",
        "signature": None,
    })  # fmt: skip
    old.insert("dead_letters", {
        "inbox_id": 1, "reason": "bad_checksum", "detail": "cksum 12 != 89", "head": b"H1|bad",
        "length": 6, "sha256": "ab" * 32, "key": "rec9", "received_at": T + 6, **transport,
        "replayed_at": T + 7, "replayed_by": "ops", "replay_verdict": "rejected",
        "signature": None,
    })  # fmt: skip
    old.insert("verdict_counts", {"inbox_id": 1, "hour": 500_000, "verdict": "accepted",
                                  "reason": "", "n": 4})  # fmt: skip
    old.insert("work_keys", {
        "inbox_id": 1, "seller_id": "S", "sku": "K", "marketplace_id": "M", "generation": 2,
        "applied_generation": 1, "document": "{}", "document_generation": 1,
        "applied_token": 5, "refreshed_at": T, "claim_generation": 2, "failures": 1,
        "next_attempt": T + 60, "last_error": "timeout", "in_review": 0,
    })  # fmt: skip
    old.insert("triage_ledger", {"record_id": 1, "inbox_id": 1, "site": "Kakuma1",
                                 "need": "MED", "headcount": 3, "pri": 86})  # fmt: skip
    old.insert("triage_totals", {"inbox_id": 1, "site": "Kakuma1", "need": "MED",
                                 "headcount": 3, "cases": 1})  # fmt: skip
    old.insert("evictions", {"inbox_id": 1, "kind": "record", "ident": b"\x09" * 32,
                             "witness": b"\x19" * 32, "first_seen": T - 99,
                             "evicted_at": T})  # fmt: skip
    old.insert("retention_overrides", {"inbox_id": 1, "retention_seconds": 3600.0,
                                       "reason": "a drill", "at": T})  # fmt: skip
    old.run("UPDATE counters SET value = 7 WHERE name = 'lease_token'")
    for seq in (1, 2):
        old.insert("log", {"seq": seq, "step": "accept", "state": f"state {seq}",
                           "hash": f"{seq:064x}"})  # fmt: skip
    old.insert("merkle_nodes", {"level": 4, "idx": 0, "hash": b"\x04" * 32})
    old.run(
        "INSERT INTO meta VALUES ('record_ids_used', '2') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )
    old.insert("log_pending", {"step": "quarantine", "state": "queued", "record_id": None})
    old.insert("fences", {"kind": "scope", "owner": 1, "name": "gw-1", "token": 6,
                          "holder": None, "issued_at": T, "expires_at": T + 30,
                          "released_at": None})  # fmt: skip
    old.insert("fences", {"kind": "work", "owner": 1, "name": "S\x1fK\x1fM", "token": 7,
                          "holder": "worker-1", "issued_at": 0, "expires_at": T + 30,
                          "released_at": None})  # fmt: skip
    old.insert("api_tokens", {"name": "ops", "secret_hash": b"\x05" * 32, "inboxes": '["*"]',
                              "scopes": '["read", "operator"]', "hmac_key": None,
                              "created_at": T, "revoked_at": None})  # fmt: skip
    old.insert("seen_signatures", {"signature": "v1,abc", "expires_at": T + 300})
    old.insert("console_sessions", {"id_hash": b"\x06" * 32, "token_id": 1, "created_at": T,
                                    "expires_at": T + 3600})  # fmt: skip


@pytest.fixture
def old_store(backend: str, new_database: NewDatabase) -> Iterator[tuple[str, OldStore]]:
    url = new_database()
    old = OldStore(backend, url)
    yield url, old
    old.close()


# Tables the migrations after the frozen ones make.
ADDED = {"consumers", "forwards", "forward_attempts", "forward_destinations", "forward_counts"}


def everything(backend: str, url: str) -> dict[str, list[tuple[Any, ...]]]:
    return rows(backend, path(url) if backend == "sqlite" else url)


def test_a_store_numbered_apart_upgrades_with_every_row_intact(
    backend: str, old_store: tuple[str, OldStore], new_database: NewDatabase
) -> None:
    url, old = old_store
    old.migrate(upto=max(RENUMBERED[backend]))
    old.steps()
    fill(old)
    old.close()
    before = everything(backend, url)
    assert all(before.values()), f"empty: {[t for t, found in before.items() if not found]}"

    open_store(url).close()  # the store alone: no recovery, no seal, nothing but migrations
    after = everything(backend, url)
    # Migrations after the frozen ones may add tables (empty) and columns (at the end).
    assert set(after) == set(before) | ADDED and not any(after[t] for t in ADDED)
    for table in set(before) - {"schema_version"}:
        width = len(before[table][0])
        assert sorted((row[:width] for row in after[table]), key=repr) == before[table], table
    # Migration 18: the records sealed already are on the feed, each its first revision.
    assert [row[4:] for row in after["log"]] == [(1, 1, 1), (1, 2, 1)]
    # Each old number became the shared ones, applied when the old one was; the
    # migrations after those were applied now, once.
    translated = [(new, applied_at(v), v) for v in sorted(RENUMBERED[backend])
                  for new in RENUMBERED[backend][v]]  # fmt: skip
    newer = [row for row in after["schema_version"] if row[2] is None]
    assert sorted(row for row in after["schema_version"] if row[2] is not None) == translated
    assert [row[0] for row in newer] == [v for v, _ in load_migrations(backend)][len(translated) :]

    store = open_store(url)
    try:
        with store.reading() as tx:
            # The record sealed through the queue reads its position where it is kept.
            assert tx.record_seals() == [(1, 1), (2, 2)]
            record = tx.get_record(2)
            assert isinstance(record, Record) and record.log_seq == 2
    finally:
        store.close()
    assert everything(backend, url) == after  # opened again: nothing ran twice

    fresh = new_database()
    oncebox.open(fresh, inboxes=[]).close()
    oncebox.open(url, inboxes=[]).close()
    assert schema(backend, url) == schema(backend, fresh)


# Old stores at a migration before the last: the code of that time had made them, and
# today's code must still bring them all the way.
PARTWAY = [("sqlite", n) for n in (1, 5, 8, 9, 13)] + [
    pytest.param("postgres", n, marks=POSTGRES.marks) for n in (1, 2, 4, 10)
]


@pytest.mark.parametrize(("backend", "upto"), PARTWAY)
def test_a_store_left_partway_upgrades_to_the_schema(
    backend: str, upto: int, old_store: tuple[str, OldStore], new_database: NewDatabase
) -> None:
    url, old = old_store
    old.migrate(upto=upto)
    if upto >= ONE_FENCE[backend]:
        old.steps()
    old.close()
    oncebox.open(url, inboxes=[]).close()
    fresh = new_database()
    oncebox.open(fresh, inboxes=[]).close()
    assert schema(backend, url) == schema(backend, fresh)


def test_a_number_this_version_does_not_know_is_refused(
    backend: str, old_store: tuple[str, OldStore]
) -> None:
    url, old = old_store
    old.migrate(upto=max(RENUMBERED[backend]))
    old.run("INSERT INTO schema_version VALUES (?, ?)", (99, T))
    old.close()
    with pytest.raises(StorageError, match=r"\[99\]"):
        open_store(url)


def test_migrate_names_the_migrations_it_applied_to_a_store_numbered_apart(
    old_store: tuple[str, OldStore], backend: str
) -> None:
    """Not the shared numbers the old ones were translated into: those ran long ago."""
    url, old = old_store
    old.migrate(upto=max(RENUMBERED[backend]))
    old.steps()
    old.close()
    upgraded = CliRunner().invoke(cli, ["--db", url, "migrate"])
    assert upgraded.exit_code == 0, upgraded.output
    translated = {new for news in RENUMBERED[backend].values() for new in news}
    known = [version for version, _ in load_migrations(backend)]
    assert json.loads(upgraded.stdout) == {
        "schema_version": known[-1],
        "applied": [version for version in known if version not in translated],
    }
