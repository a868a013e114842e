"""A decision's reads on PostgreSQL in one statement (``decision_reads_locked``, which
takes the identities as a bytea[] since migration 26, a single delivery's one sent as a
bytea) against the lookup a lease-fenced inbox sends after its locks
(``decision_lookup``, the identities as a JSON array of hex digests): the same stored
rows and as many fresh ids, for one identity or many, stored or not, repeated or not."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox.store.pgtx import PostgresTx
from oncebox.store.sqlfile import load_migrations, load_queries
from test_pg_folds import LISTING, event

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _idents(url: str) -> list[bytes]:
    with oncebox.open(url, inboxes=[LISTING]) as box:
        box.ingest_batch("listing", [event(i) for i in range(5)])
        with box.store.reading() as tx:
            return [bytes(row[0]) for row in tx.execute("SELECT ident FROM records ORDER BY id")]


def test_the_one_statement_reads_what_the_fenced_lookup_reads(pg_url: str) -> None:
    stored = _idents(pg_url)
    absent = [b"\x00" * 32, b"\xff" * 32, bytes(range(32))]
    asked = [
        [stored[0]],
        [absent[0]],
        [stored[1], absent[1]],
        [absent[2], stored[2], absent[2], stored[2]],  # repeated: read once each
        stored + absent,
    ]
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        inbox = box.store.atomic(lambda tx: {i.name: i.id for i in tx.inboxes()})["listing"]

        def both(tx: Any) -> list[tuple[Any, Any]]:
            assert isinstance(tx, PostgresTx) and tx._pipe is not None
            return [
                (tx.decision_reads(inbox, idents, None), tx.decision_reads(inbox, idents, []))
                for idents in asked
            ]

        pairs = box.store.atomic(both)
    for idents, (one, fenced) in zip(asked, pairs, strict=True):
        assert one[2] == fenced[2], idents  # the stored rows, by identity
        assert set(one[2]) == set(idents) & set(stored)
        fresh = len(set(idents) - set(stored))
        assert len(one[3]) == len(fenced[3]) == fresh, idents
        assert one[3] == sorted(one[3]) and len(set(one[3])) == fresh


@pytest.mark.parametrize("taken", [False, True])
def test_a_store_whose_id_sequence_is_named_otherwise_is_refused(
    pg_server: Any, taken: bool
) -> None:
    """decision_reads_locked draws fresh ids from records_id_seq by name (migration 26):
    a store at migration 25 whose records draw from another sequence is refused by the
    migration, its schema left as it was, rather than given ids from the wrong one;
    also where another sequence has that name (``taken``)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(load_queries("postgres")["create_schema_version"].sql)
            for version, sql in load_migrations("postgres"):
                if version >= 26:
                    break
                conn.execute(sql)
                conn.execute("INSERT INTO schema_version VALUES (%s, 0, NULL)", (version,))
            conn.execute("ALTER SEQUENCE records_id_seq RENAME TO records_ids")
            if taken:
                conn.execute("CREATE SEQUENCE records_id_seq")
        with pytest.raises(Exception, match="records_id_seq"):
            oncebox.open(url, inboxes=[])
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (25,)
    finally:
        pg_server.drop_database(name)
