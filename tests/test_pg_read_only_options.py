"""A store opened read-only on PostgreSQL keeps the connection options its URL gives.

Read-only is a server setting each connection is opened with (``options=-c
default_transaction_read_only=on``). Given as a keyword, it replaced the URL's own
``options`` (and libpq's PGOPTIONS) whole: a store kept in a schema of its own, named by
``options=-c search_path=...``, was read in ``public`` instead, where another store (or
none) is. The read-only setting is now added to the options given.
"""

from __future__ import annotations

import urllib.parse

import psycopg
import pytest

import oncebox
from oncebox import Delivery, InboxSpec
from oncebox.errors import StorageError

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

FEED = [InboxSpec("feed", codec="feed")]


def _in_schema(url: str, schema: str) -> str:
    return f"{url}&options={urllib.parse.quote(f'-c search_path={schema}')}"


def _fill(url: str, count: int, tag: str) -> None:
    with oncebox.open(url, inboxes=FEED) as box:
        token = box.lease("feed", "S", 60).token
        for i in range(count):
            box.ingest("feed", Delivery(f"{tag}-{i}".encode(), snapshot_id="S", lease_token=token))


def test_a_read_only_store_reads_the_schema_its_url_names(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA tenant")
    tenant = _in_schema(pg_url, "tenant")
    _fill(pg_url, 1, "public")  # the store in public: one record
    _fill(tenant, 3, "tenant")  # the tenant's own: three
    with oncebox.open(tenant, read_only=True) as box:
        assert box.stats("feed")["records"] == 3
        with box.store.reading() as tx:
            assert tx.execute("SHOW search_path") == [("tenant",)]
            assert tx.execute("SHOW default_transaction_read_only") == [("on",)]
        with pytest.raises(StorageError):  # and still read only: the server refuses a write
            box.store.atomic(lambda tx: tx.probe_write(tx.now()))
