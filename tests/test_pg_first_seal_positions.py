"""Migration 27 on PostgreSQL: a store whose seals kept a record's later position (a
resolution sealed with the record's accept, before the fix) gets the first position back,
in seal_positions and in a record's own log_seq alike; every other position is left as
it was."""

from __future__ import annotations

import json

import psycopg
import pytest

import oncebox
from oncebox import Delivery, InboxSpec

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

QUEUE = [InboxSpec("queue", codec="keyed")]


def _record_and_revision(box: oncebox.Oncebox, key: str) -> int:
    """A record, a conflicting newcomer accepted as its next revision: two queued entries
    that name the record. Returns its id."""
    first = box.ingest("queue", Delivery(b"first", key=key))
    newcomer = box.ingest("queue", Delivery(b"second", key=key))
    assert newcomer.quarantine_id is not None
    box.resolve(newcomer.quarantine_id, "accept", "the sender meant it", actor="ops")
    assert first.record_id is not None
    return first.record_id


def _positions(box: oncebox.Oncebox) -> dict[int, int | None]:
    return {r.id: r.log_seq for r in box.records("queue")}


def test_migration_27_gives_records_their_first_position_back(pg_url: str) -> None:
    with oncebox.open(pg_url, inboxes=QUEUE, seal=False) as box:
        box.ingest("queue", Delivery(b"alone", key="alone"))  # one entry: nothing to mend
        narrow = _record_and_revision(box, "narrow")  # its position in seal_positions
        legacy = _record_and_revision(box, "legacy")  # its position in its own row
        box.seal()
        first = {
            json.loads(e.state)["record"]: e.seq for e in box.log_entries() if e.step == "accept"
        }
        right = _positions(box)
    with psycopg.connect(pg_url) as conn:  # the entry that names the record it revised
        later: dict[int, int] = dict(
            conn.execute("SELECT record_id, seq FROM log WHERE step = 'resolve'")
        )
    assert right[narrow] == first[narrow] < later[narrow]
    assert right[legacy] == first[legacy] < later[legacy]

    # What a seal before the fix could leave: the resolution's position kept.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE seal_positions SET seq = %s WHERE record_id = %s", (later[narrow], narrow)
        )
        conn.execute("DELETE FROM seal_positions WHERE record_id = %s", (legacy,))
        conn.execute("UPDATE records SET log_seq = %s WHERE id = %s", (later[legacy], legacy))
        conn.execute("DELETE FROM schema_version WHERE version = 27")
    with psycopg.connect(pg_url) as conn:
        # Read as the engine reads, before the migration: the later positions.
        rows: dict[int, int] = dict(conn.execute("SELECT id, log_seq FROM records_read").fetchall())
    assert rows[narrow] == later[narrow] and rows[legacy] == later[legacy]

    with oncebox.open(pg_url, inboxes=QUEUE, seal=False) as box:  # migrates again
        assert _positions(box) == right
        again = box.ingest("queue", Delivery(b"second", key="narrow"))
        assert again.verdict == "duplicate" and again.log_position == first[narrow]
        assert box.verify().ok
    with psycopg.connect(pg_url) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
        legacy_row = conn.execute("SELECT log_seq FROM records WHERE id = %s", (legacy,)).fetchone()
    assert 27 in versions
    assert legacy_row == (first[legacy],)  # mended in the row that held it
