"""A decision's lookup on PostgreSQL hands out a fresh id to each identity it did not find.
Which ones those are must be found by a hash of the found identities, not by comparing
each wanted identity with every found one: that comparison grows with the square of the
batch (a batch of 1,000 stored identities: a million comparisons, about 6 us of the
server's a delivery, half of the whole lookup). Read from the plans PostgreSQL runs:
decision_reads_locked's (its statement inside the function, reported by auto_explain)
and decision_lookup's (EXPLAIN), each with the rows it must give."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox import Delivery, InboxSpec
from oncebox.store.pgarrays import TYPED
from oncebox.store.pgpipe import Q

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

STORED, NEW = 60, 40


def _idents(url: str) -> tuple[int, list[bytes]]:
    """A store with STORED records in one inbox; its id and STORED + NEW identities."""
    with oncebox.open(url, inboxes=[InboxSpec("plans", codec="keyed")]) as box:
        box.ingest_batch("plans", [Delivery(b"x", key=f"k{i}") for i in range(STORED)])
    with psycopg.connect(url) as conn:
        inbox = conn.execute("SELECT id FROM inboxes WHERE name = 'plans'").fetchone()
        stored = [row[0] for row in conn.execute("SELECT ident FROM records").fetchall()]
    assert inbox is not None and len(stored) == STORED
    return int(inbox[0]), stored + [bytes([i]) * 32 for i in range(NEW)]


def _kinds(rows: list[Any]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row[0]] = kinds.get(row[0], 0) + 1
    return kinds


def test_decision_reads_locked_finds_the_fresh_identities_by_a_hash(pg_url: str) -> None:
    inbox, idents = _idents(pg_url)
    plans: list[str] = []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error:
            pytest.skip("auto_explain cannot be loaded here (not a superuser)")
        for setting in ("log_min_duration = 0", "log_nested_statements = on",
                        "log_level = 'notice'"):  # fmt: skip
            conn.execute(f"SET auto_explain.{setting}")
        conn.add_notice_handler(lambda notice: plans.append(str(notice.message_primary)))
        # Its first calls are planned for their values, the later ones by a generic plan:
        # both are looked at.
        for _ in range(7):
            plans.clear()
            rows = conn.execute(
                "SELECT * FROM decision_reads_locked(%s, %b, false)",
                (inbox, TYPED["bytea"][0](idents)),
            ).fetchall()
            assert _kinds(rows) == {"stored": STORED, "fresh": NEW, "clock": 1}
            lookup = [plan for plan in plans if "'fresh'" in plan and "Query Text" in plan]
            assert len(lookup) == 1, plans
            assert "hashed SubPlan" in lookup[0], lookup[0]


def test_decision_lookup_finds_the_fresh_identities_by_a_hash(pg_url: str) -> None:
    inbox, idents = _idents(pg_url)
    sql = Q["decision_lookup"].sql
    params = {"idents": json.dumps([ident.hex() for ident in idents]), "inbox": inbox}
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(sql, params).fetchall()
        assert _kinds(rows) == {"stored": STORED, "fresh": NEW, "clock": 1}
        cursor = conn.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()  # EXPLAIN ran nothing; the lookup above took fresh ids only
    assert "hashed SubPlan" in plan, plan
