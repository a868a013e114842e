"""The Merkle tree's right edge a PostgreSQL connection's last committed append left,
kept between its transactions (store/postgres.py) so that the next seal on it hashes no
leaf again, against the seal that rebuilds it from the log's last block each time: the
same log and the same kept nodes, also when a transaction that appended rolls back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox.domain import LogEntry
from oncebox.engine import merkle
from oncebox.engine.log import leaf_of
from oncebox.errors import RetryTransaction
from oncebox.store.pgtx import PostgresTx
from test_pg_folds import LISTING, event


class _Forgets(dict[Any, Any]):
    """A memo that keeps nothing: every seal rebuilds the edge from the log."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@pytest.fixture
def plain_url(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_server.create_database(name, template=pg_template)
    pg_server.drop_database(name)


def _ingest(url: str, monkeypatch: pytest.MonkeyPatch, forget: bool) -> None:
    """40 single deliveries (past two blocks of 16), then a batch, with every fifth
    transaction failing once after its seal appended (it runs again)."""
    calls = [0]
    before_commit = PostgresTx.before_commit

    def failing(tx: PostgresTx) -> None:
        calls[0] += 1
        if calls[0] % 5 == 0 and "append_log" in tx._seal:
            raise RetryTransaction("once after the append")
        before_commit(tx)

    with monkeypatch.context() as patch:
        patch.setattr(PostgresTx, "before_commit", failing)
        with oncebox.open(url, inboxes=[LISTING]) as box:
            if forget:
                box.store._edges = _Forgets()  # type: ignore[attr-defined]
            for i in range(40):
                box.ingest("listing", event(i))
            box.ingest_batch("listing", [event(i) for i in range(40, 75)])
            assert box.verify().ok
    assert calls[0] > 40


def _log(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            "log": conn.execute("SELECT seq, step, state, hash FROM log ORDER BY seq").fetchall(),
            "nodes": conn.execute("SELECT * FROM merkle_nodes ORDER BY 1, 2").fetchall(),
        }


def _rebuilt(entries: list[tuple[Any, ...]], level: int, index: int) -> bytes:
    """A kept node hashed from the log's own entries."""
    leaves = [leaf_of(LogEntry(*entry)) for entry in entries]
    return merkle.root_of(leaves[index << level : (index + 1) << level])


def test_the_kept_edge_leaves_the_nodes_the_log_gives(
    pg_url: str, plain_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ingest(pg_url, monkeypatch, forget=False)
    _ingest(plain_url, monkeypatch, forget=True)
    kept, rebuilt = _log(pg_url), _log(plain_url)
    assert len(kept["log"]) == 75 and len(kept["nodes"]) >= 4
    assert kept == rebuilt
    for level, index, node in kept["nodes"]:
        assert bytes(node) == _rebuilt(kept["log"], level, index), (level, index)
