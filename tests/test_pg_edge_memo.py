"""The Merkle edge a PostgreSQL connection keeps from its last committed append (the
memo of engine/log.py, store/postgres.py, migration 26) is used only where it is the
tree's edge: checked against a real server under the ways it could stop being one.

The oracle trusts nothing the memo touched: it reads the log's entries, replays their
chain, hashes every kept Merkle node again from the leaves (each one stored and none
missing), checks each record's inclusion proof and consistency proofs between sizes
against roots computed from the entries alone, and checkpoints taken during the run
against the same. A wrong edge leaves a wrong kept node (or a wrong root) behind.

- Many writers at once: three threads over two stores (two pools) in this process and
  a second process, single deliveries and batches at random, a dedicated sealer and
  ``recover()`` now and then, with failures after the append: the client raising after
  its seal's writes were sent (the transaction runs again), and COMMIT itself failing
  on the server (a deferred trigger: a serialization failure, a deadlock, or the
  backend terminated in the middle of the commit, the connection lost with it).
- A log restored from a backup to a shorter length under a live connection, then grown
  again by another store to the very seq that connection's memo names, with other
  entries: the same seq, another chain hash.
- The server killed and started again under a store's pool: the memo stays with the
  connection that died.

Breaking the memo's check (no check, the seq compared without the hash) or sharing the
kept edge with the transaction that appends (so that a rolled-back append changes it)
makes these tests fail. The server answering the head alone whatever the position sent
does not: the client compares the head it is sent with its memo again.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

import oncebox
from conftest import fresh_database
from helpers import event_body
from oncebox import Delivery, InboxSpec, Oncebox
from oncebox.domain import LogEntry
from oncebox.engine import audit, log, merkle
from oncebox.engine.log import GENESIS, chain_hash, leaf_of
from oncebox.engine.sealing import Sealer
from oncebox.errors import InvalidOperation, RetryTransaction, StorageUnavailable
from oncebox.store.pgseal import SealingTx
from oncebox.store.pgtx import PostgresTx
from oncebox.store.postgres import PostgresStore

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LISTING = InboxSpec("listing", codec="json-event", apply="generation")
TESTS = Path(__file__).resolve().parent

# COMMIT fails on the server for some transactions that appended to the log: each such
# transaction draws once from a sequence (sequences ignore rollbacks, and every draw is
# made holding the log, so draws are one at a time); of each ten draws, one fails with
# a serialization failure, one with a deadlock, and one has its backend terminated in
# the middle of the commit. The attempt that follows a failed one draws the next value.
COMMIT_FAULTS = """
CREATE SEQUENCE memo_test_draws;
CREATE FUNCTION memo_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  drawn bigint;
BEGIN
  IF current_setting('memo_test.drawn', true) = 'y' THEN
    RETURN NULL;
  END IF;
  PERFORM set_config('memo_test.drawn', 'y', true);
  drawn := nextval('memo_test_draws') % 10;
  IF drawn = 3 THEN
    RAISE EXCEPTION 'memo test: commit refused' USING ERRCODE = '40001';
  ELSIF drawn = 6 THEN
    RAISE EXCEPTION 'memo test: commit refused' USING ERRCODE = '40P01';
  ELSIF drawn = 9 THEN
    PERFORM pg_terminate_backend(pg_backend_pid());
    PERFORM pg_sleep(1);  -- the interrupt is taken here, before the commit is
  END IF;
  RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER memo_test_fault AFTER INSERT ON log
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION memo_test_fault();
"""


def delivery(i: int) -> Delivery:
    payload = {"status": "BUYABLE", "issues": [], "price": 1 + i % 7}
    return Delivery(event_body(f"m-{i:08d}", sku=f"SKU-{i % 11:03d}", payload=payload))


# -- the oracle: the log's entries alone -----------------------------------------------


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """Every complete aligned subtree of the leaves, level by level (level 0: leaves)."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(
            [merkle.node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        )
    return levels


def audit_log(url: str) -> list[bytes]:
    """The log's leaves, once its chain replays and its kept nodes are exactly those the
    entries give: every complete node of levels 4, 8, ..., each as hashed from them."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT seq, step, state, hash FROM log ORDER BY seq").fetchall()
        stored = {
            (int(level), int(index)): bytes(node)
            for level, index, node in conn.execute("SELECT level, idx, hash FROM merkle_nodes")
        }
    prev = GENESIS
    for expected, (seq, step, state, hashed) in enumerate(rows, 1):
        assert seq == expected and hashed == chain_hash(prev, step, state), seq
        prev = hashed
    leaves = [leaf_of(LogEntry(*row)) for row in rows]
    levels = _levels(leaves)
    wanted = {
        (level, index): node
        for level in range(log.NODE_STRIDE, len(levels), log.NODE_STRIDE)
        for index, node in enumerate(levels[level])
    }
    assert sorted(stored) == sorted(wanted), "kept nodes missing or extra"
    wrong = [key for key, node in wanted.items() if stored[key] != node]
    assert not wrong, f"kept Merkle nodes that the log's entries do not give: {wrong}"
    return leaves


def check_proofs(box: Oncebox, url: str, leaves: list[bytes], checkpoints: list[Any]) -> int:
    """Every sealed record's inclusion proof at the tree now and at an earlier size,
    consistency proofs between sizes, and the checkpoints taken on the way: each against
    the roots of the leaves alone. Returns how many records were proven."""
    size = len(leaves)
    levels = _levels(leaves)  # each tree size's root from the leaves' own subtrees

    def root(n: int) -> bytes:
        return merkle.tree_root(lambda level, index: levels[level][index], n)

    assert root(size) == merkle.root_of(leaves)
    roots = {n: root(n) for n in range(1, size + 1)}
    rng = random.Random(size)
    with psycopg.connect(url) as conn:
        records = conn.execute("SELECT id FROM records ORDER BY id").fetchall()
    for (record_id,) in records:
        document = box.prove(record_id)
        entry = document["entry"]
        index = document["leaf_index"]
        leaf = leaf_of(LogEntry(entry["seq"], entry["step"], entry["state"], entry["hash"]))
        assert leaf == leaves[index]
        path = [bytes.fromhex(node) for node in document["path"]]
        assert merkle.verify_inclusion(leaf, index, size, path, roots[size]), record_id
        earlier = rng.randint(index + 1, size)
        past = audit.prove_record(box.store, record_id, earlier)
        path = [bytes.fromhex(node) for node in past["path"]]
        assert merkle.verify_inclusion(leaf, index, earlier, path, roots[earlier]), record_id
    for _ in range(60):
        old, new = sorted(rng.sample(range(1, size + 1), 2))
        path = [bytes.fromhex(node) for node in box.prove_consistency(old, new)["path"]]
        assert merkle.verify_consistency(old, new, roots[old], roots[new], path), (old, new)
    for point in checkpoints:
        if point.tree_size:
            assert point.root == roots[point.tree_size].hex(), point.tree_size
    assert box.checkpoint().root == roots[size].hex()
    report = box.verify(against=checkpoints[-1] if checkpoints else None)
    assert report.ok and report.entries == size, report.to_dict()
    return len(records)


# -- what the run went through -----------------------------------------------------------


class Watch:
    """Whether each append found its connection's memo to be the edge, and whether each
    seal was answered with the log's head alone (this process's only)."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.held: list[bool] = []
        self.alone: list[bool] = []
        right_edge, read_for_seal = log._right_edge, SealingTx.read_for_seal

        def edge(tx: Any, size: int, last_hash: str) -> dict[int, bytes]:
            memo = tx.log_edge
            found = right_edge(tx, size, last_hash)
            self.held.append(memo is not None and found is memo[2])
            return found

        def reading(tx: SealingTx) -> Any:
            take = read_for_seal(tx)

            def taken() -> None:
                take()
                self.alone.append(not tx.log_block_at_hand)

            if tx._pipe is not None:
                self.alone.append(not tx.log_block_at_hand)
                return take
            return taken

        patch.setattr(log, "_right_edge", edge)
        patch.setattr(SealingTx, "read_for_seal", reading)


def _fail_after_append(patch: pytest.MonkeyPatch, every: int) -> dict[str, int]:
    """Every ``every``-th transaction whose seal's writes are on their way fails before
    its COMMIT (after the append): it rolls back and runs again. ``every`` can be
    changed in the returned dict; ``failed`` counts the failures."""
    rule = {"every": every, "failed": 0}
    calls = itertools.count(1)
    before_commit = PostgresTx.before_commit

    def failing(tx: PostgresTx) -> None:
        if "append_log" in tx._seal and next(calls) % rule["every"] == 0:
            tx._settle()  # the append goes to the server first
            rule["failed"] += 1
            raise RetryTransaction("memo test: fails after its append")
        before_commit(tx)

    patch.setattr(PostgresTx, "before_commit", failing)
    return rule


# -- the workers --------------------------------------------------------------------------


def run_ops(box: Oncebox, seed: int, first: int, ops: int, sealer: bool = False) -> int:
    """``ops`` writes chosen by ``seed`` (single deliveries, batches, now and then a
    dedicated sealer's turn or a recovery), numbered from ``first``; a write that fails
    for the store's sake (its connection lost at COMMIT) is sent again, as a sender
    would. Returns how many writes were sent again."""
    rng = random.Random(seed)
    number = first
    again = 0
    for _ in range(ops):
        roll = rng.random()
        if sealer and roll < 0.04:
            again += _sealer_turn(box, seed, number, rng)
            continue
        if sealer and roll < 0.07:
            again += _retried(partial(box.recover, grace=0))
            continue
        size = 1 if roll < 0.6 else rng.randint(2, 24)
        batch = [delivery(n) for n in range(number, number + size)]
        number += size
        if rng.random() < 0.15 and number > first + 3:  # some repeated deliveries too
            batch.append(delivery(rng.randrange(first, number - 1)))
        if len(batch) == 1:
            again += _retried(partial(box.ingest, "listing", batch[0]))
        else:
            again += _retried(partial(box.ingest_batch, "listing", batch))
    return again


def _retried(write: Callable[[], object]) -> int:
    for attempt in range(10):
        try:
            write()
            return attempt
        except StorageUnavailable:
            continue
    raise AssertionError("a write failed ten times")


def _sealer_turn(box: Oncebox, seed: int, number: int, rng: random.Random) -> int:
    """A dedicated sealer holds the log while some deliveries queue behind it, seals
    them, and lets go (unless another sealer holds it now)."""
    sealer = Sealer(box.store, f"sealer-{seed}-{number}", ttl=60)
    try:
        _retried(sealer.acquire)
    except InvalidOperation:
        return 0
    again = 0
    try:
        for n in range(rng.randint(1, 3)):
            queued = delivery(10**7 + seed * 1000 + n + number)
            again += _retried(partial(box.ingest, "listing", queued))
        again += _retried(sealer.seal)
    finally:
        _retried(sealer.release)
    return again


def child(url: str, seed: int, first: int, ops: int) -> None:
    """The second process's writes, beside the test's own threads."""
    with oncebox.open(url, inboxes=[LISTING]) as box:
        run_ops(box, seed, first, ops)


# -- the tests -----------------------------------------------------------------------------


@pytest.fixture
def faulty_url(pg_url: str) -> Iterator[str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(COMMIT_FAULTS)
    yield pg_url


def test_many_writers_leave_the_tree_the_entries_give(
    faulty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = faulty_url
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    script = f"import test_pg_edge_memo as t; t.child({url!r}, 99, 5_000_000, 70)"
    watch = Watch(monkeypatch)
    failed = _fail_after_append(monkeypatch, every=9)
    first = oncebox.open(url, inboxes=[LISTING])
    second = Oncebox(PostgresStore(url, pool_size=2), [LISTING])
    checkpoints: list[Any] = []
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            box = (first, second, first)[index]
            run_ops(box, index, 1_000_000 * (index + 1), 55, sealer=True)
            checkpoints.append(box.checkpoint())
        except BaseException as exc:  # re-raised below, on the test's thread
            errors.append(exc)

    other = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=TESTS)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        assert other.wait(timeout=120) == 0
    solo = Oncebox(PostgresStore(url, pool_size=1), [LISTING])
    try:
        assert not errors, errors
        # Then turns, one after another: a store on one connection appends single
        # deliveries and batches, the first after the other store's append (its memo
        # refused), the rest on its own (its memo the edge: the head alone), every
        # other append failing after it was sent, so that the one after it, on the
        # same connection, finds the log where the memo left it.
        concurrent = len(watch.held), len(watch.alone)
        failed["every"] = 2
        n = 9_000_000
        for _turn in range(3):
            for size in (1, 5, 1, 3, 1, 6, 2):
                batch = [delivery(i) for i in range(n, n + size)]
                n += size
                if size == 1:
                    _retried(partial(solo.ingest, "listing", batch[0]))
                else:
                    _retried(partial(solo.ingest_batch, "listing", batch))
            _retried(partial(first.ingest, "listing", delivery(n)))
            n += 1
        first.recover(grace=0)
        leaves = audit_log(url)
        proven = check_proofs(first, url, leaves, sorted(checkpoints, key=lambda c: c.tree_size))
    finally:
        solo.close()
        first.close()
        second.close()
    with psycopg.connect(url) as conn:
        faults = conn.execute("SELECT last_value FROM memo_test_draws").fetchone()
    # The run went through what it is meant to: the memo used and refused, the head
    # alone sent, appends rolled back on either side of the commit.
    turns, alone = watch.held[concurrent[0] :], watch.alone[concurrent[1] :]
    assert sum(turns) >= 3 and not all(turns), turns
    assert sum(alone) >= 3 and not all(alone), alone
    assert not all(watch.held[: concurrent[0]]), "no memo was refused while all wrote at once"
    assert failed["failed"] >= 10 and faults is not None and faults[0] >= 20, (failed, faults)
    assert proven >= 400 and len(leaves) >= proven


BACKUP = """
DROP SCHEMA IF EXISTS memo_backup CASCADE;
CREATE SCHEMA memo_backup;
DO $$
DECLARE t text;
BEGIN
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
    EXECUTE format('CREATE TABLE memo_backup.%I AS TABLE %I', t, t);
  END LOOP;
END
$$;
"""

# Every table back as it was at the backup (the sequences left as they are, as a
# restore that kept them ahead would), foreign keys unchecked while it loads.
RESTORE = """
SET session_replication_role = replica;
DO $$
DECLARE t text;
BEGIN
  EXECUTE (SELECT 'TRUNCATE ' || string_agg(format('%I', tablename), ', ')
           FROM pg_tables WHERE schemaname = current_schema());
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
    EXECUTE format('INSERT INTO %I OVERRIDING SYSTEM VALUE SELECT * FROM memo_backup.%I', t, t);
  END LOOP;
END
$$;
SET session_replication_role = origin;
"""


def _head(url: str) -> tuple[int, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT seq, hash FROM log ORDER BY seq DESC LIMIT 1").fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def test_a_log_restored_shorter_and_grown_again_to_the_same_seq(pg_url: str) -> None:
    """One store on one connection appends to seq N (its memo names N and its hash);
    the database is restored under it to an earlier backup, and another store grows
    the log again, with other deliveries, to exactly N. The first store's next appends
    must not take its memo for the edge of that log."""
    box = Oncebox(PostgresStore(pg_url, pool_size=1), [LISTING])
    other = oncebox.open(pg_url, inboxes=[LISTING])
    try:
        for i in range(21):
            box.ingest("listing", delivery(i))
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(BACKUP)
        for i in range(21, 30):
            box.ingest("listing", delivery(i))
        box.ingest_batch("listing", [delivery(i) for i in range(30, 37)])
        end = _head(pg_url)
        (memo,) = box.store._edges.values()  # type: ignore[attr-defined]
        assert memo[:2] == end  # the one connection's memo: the log's end
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(RESTORE)
        assert _head(pg_url)[0] < end[0]
        n = 1000
        while _head(pg_url)[0] < end[0]:  # the same length again, other entries
            other.ingest("listing", delivery(n))
            n += 1
        again = _head(pg_url)
        assert again[0] == end[0] and again[1] != end[1]
        for i in range(37, 80):  # past the kept nodes the old edge would have gone into
            box.ingest("listing", delivery(i))
        box.ingest_batch("listing", [delivery(i) for i in range(80, 120)])
        leaves = audit_log(pg_url)
        check_proofs(box, pg_url, leaves, [])
    finally:
        box.close()
        other.close()


@pytest.fixture
def restartable_url(pg_durable: Any) -> Iterator[str]:
    if not getattr(pg_durable, "can_restart", False):
        pytest.skip("the server is external (ONCEBOX_TEST_PG); it cannot be restarted here")
    yield from fresh_database(pg_durable, None)


def test_a_server_restarted_under_the_pool_leaves_no_memo_behind(
    pg_durable: Any, restartable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server killed and started again between two appends of a one-connection
    store: the pool connects anew, and the new connection's first append keeps no
    memo of the old one's (it is the connection's, not the store's)."""
    url = restartable_url
    watch = Watch(monkeypatch)
    box = Oncebox(PostgresStore(url, pool_size=1), [LISTING])
    try:
        for i in range(20):
            box.ingest("listing", delivery(i))
        assert watch.held[-1]  # one connection, its memo the edge
        before = len(watch.held)
        pg_durable.stop("immediate")
        pg_durable.start_again()
        for i in range(20, 60):
            _retried(partial(box.ingest, "listing", delivery(i)))
        after = watch.held[before:]
        assert not after[0] and all(after[1:]), after
        check_proofs(box, url, audit_log(url), [])
    finally:
        box.close()
