"""A PostgreSQL seal that knows where the log ends (its connection's last committed
append) is sent the log's head alone, not its last block and kept nodes (migration 26),
against the seal that is always sent them (no position given): the same log, the same
kept nodes, with another store appending in between (the head moved under the
connection's memo), with appends that roll back, and from an empty log. And the
function itself: the head alone only where the log still ends at that seq with that
hash."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import oncebox
from oncebox.store.pgseal import SealingTx
from oncebox.store.sqltx.log import LogSql
from test_pg_edge import _ingest, _log, _rebuilt
from test_pg_folds import LISTING, event

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def other_url(pg_server: Any, pg_template: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_server.create_database(name, template=pg_template)
    pg_server.drop_database(name)


class Seen:
    """What each seal sent and was sent: a position given or not, the head alone or
    the block."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.sent: list[bool] = []  # a position given
        self.alone: list[bool] = []  # answered with the head alone
        known_end, read_for_seal = SealingTx._known_end, SealingTx.read_for_seal

        def known(tx: SealingTx) -> tuple[int | None, str | None]:
            end = known_end(tx)
            self.sent.append(end[0] is not None)
            return end

        def reading(tx: SealingTx) -> Any:
            take = read_for_seal(tx)

            def taken() -> None:
                take()
                self.alone.append(not tx.log_block_at_hand)

            if tx._pipe is not None:  # taken in already
                self.alone.append(not tx.log_block_at_hand)
                return take
            return taken

        patch.setattr(SealingTx, "_known_end", known)
        patch.setattr(SealingTx, "read_for_seal", reading)


def _server_reads(patch: pytest.MonkeyPatch) -> list[str]:
    """Every read of the log or its nodes that goes to the server on its own."""
    reads: list[str] = []
    for name in ("log_head", "log_entries", "merkle_nodes"):
        base = getattr(LogSql, name)

        def read(tx: Any, *args: Any, _base: Any = base, _name: str = name) -> Any:
            reads.append(_name)
            return _base(tx, *args)

        patch.setattr(LogSql, name, read)
    return reads


def _never_known(patch: pytest.MonkeyPatch) -> None:
    """The general path: every seal is sent the log's last block and kept nodes."""
    patch.setattr(SealingTx, "_known_end", lambda tx: (None, None))


def _singles(url: str, numbers: range, box: Any = None) -> None:
    with oncebox.open(url, inboxes=[LISTING]) as own:
        for i in numbers:
            (box or own).ingest("listing", event(i))


def test_two_stores_taking_turns_leave_the_log_the_general_path_leaves(
    pg_url: str, other_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores (two pools) on one database, each appending in turn: a connection's
    memo is stale after the other's append, so that seal is sent the block and nodes;
    its next, after its own, only the head. Against both with no position ever given."""
    for url, general in ((pg_url, False), (other_url, True)):
        with monkeypatch.context() as patch:
            if general:
                _never_known(patch)
            seen = Seen(patch)
            server_reads = _server_reads(patch)
            first = oncebox.open(url, inboxes=[LISTING])
            second = oncebox.open(url, inboxes=[LISTING])
            try:
                for i in range(70):  # past four blocks of 16, runs of each store
                    (first if (i // 5) % 2 == 0 else second).ingest("listing", event(i))
                # Whichever it was sent, a seal found what it hashes with in it.
                assert not server_reads, server_reads
                assert first.verify().ok
            finally:
                first.close()
                second.close()
        if general:
            assert not any(seen.alone) and not any(seen.sent)
        else:
            # Of each store's run of five, the first finds the log moved (the block),
            # the second fills its edge whole (the block again), the rest the head alone.
            assert sum(seen.alone) >= 35, seen.alone
            assert not all(seen.alone)  # after the other store's turn, the block again
    ours, theirs = _log(pg_url), _log(other_url)
    assert len(ours["log"]) == 70 and len(ours["nodes"]) >= 4
    assert ours == theirs
    for level, index, node in ours["nodes"]:
        assert bytes(node) == _rebuilt(ours["log"], level, index), (level, index)


def test_the_head_alone_costs_the_seal_no_read_of_its_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From an empty log, 40 single deliveries on one connection (past two blocks and a
    kept node at level 4 twice): the first seal is sent the (empty) block, every one
    after it the head alone, and no seal reads the log on a statement of its own."""
    server_reads = _server_reads(monkeypatch)
    with monkeypatch.context() as patch:
        seen = Seen(patch)
        with oncebox.open(pg_url, inboxes=[LISTING]) as box:
            for i in range(40):
                box.ingest("listing", event(i))
            assert not server_reads, server_reads
            assert box.verify().ok
    # The store's opening seals in transactions of its own, on the empty log; so does
    # the first delivery's (the log has no head to send); from the second on, the log
    # ends where the connection left it: the head alone.
    assert not any(seen.alone[:-39]) and all(seen.alone[-39:]), seen.alone
    assert all(seen.sent[-39:]), seen.sent


def test_rolled_back_appends_leave_the_log_the_general_path_leaves(
    pg_url: str, other_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test_pg_edge's run (every fifth transaction fails once after its append) with the
    head alone where the memo holds, against the same run always sent the block."""
    _ingest(pg_url, monkeypatch, forget=False)
    with monkeypatch.context() as patch:
        _never_known(patch)
        _ingest(other_url, monkeypatch, forget=False)
    assert _log(pg_url) == _log(other_url)


def _seal_reads(conn: psycopg.Connection[Any], seq: int | None, hashed: str | None) -> list[Any]:
    conn.execute("BEGIN")
    try:
        return conn.execute(
            "SELECT kind, a, b, hash, node FROM seal_reads_held(NULL, 1000, 16, %s, %s)"
            " WHERE kind IN ('head', 'tail', 'node') ORDER BY kind, a, b",
            (seq, hashed),
        ).fetchall()
    finally:
        conn.execute("ROLLBACK")


def test_the_function_sends_the_head_alone_only_where_the_log_ends_there(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _seal_reads(conn, None, None) == []  # an empty log
        assert _seal_reads(conn, 1, "0" * 64) == []  # a position it never reached
    with oncebox.open(pg_url, inboxes=[LISTING]) as box:
        for i in range(37):
            box.ingest("listing", event(i))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        head = conn.execute("SELECT seq, hash FROM log ORDER BY seq DESC LIMIT 1").fetchone()
        assert head is not None and head[0] == 37
        whole = _seal_reads(conn, None, None)
        kinds = {row[0] for row in whole}
        assert kinds == {"tail", "node"}, whole
        assert [row[1] for row in whole if row[0] == "tail"] == [33, 34, 35, 36, 37]
        assert _seal_reads(conn, head[0], head[1]) == [("head", 37, None, head[1], None)]
        # The same seq with another hash (a log rewritten there), an earlier seq with
        # its own hash (others appended since): the block and the nodes, as without.
        assert _seal_reads(conn, head[0], "f" * 64) == whole
        earlier = conn.execute("SELECT seq, hash FROM log WHERE seq = 36").fetchone()
        assert earlier is not None
        assert _seal_reads(conn, earlier[0], earlier[1]) == whole
