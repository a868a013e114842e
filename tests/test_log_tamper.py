"""A tampered log is caught by verify and named by position; truncation needs a checkpoint."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.engine.checkpoint import Checkpoint

FEED = [InboxSpec("feed", codec="feed")]
Mutation = Callable[[apsw.Connection, int], None]


def build(tmp_path: Path) -> tuple[Path, int, Checkpoint]:
    path = tmp_path / "clean.db"
    with oncebox.open(f"sqlite:///{path}", inboxes=FEED, clock=ManualClock(0)) as box:
        token = box.lease("feed", "S", 600).token
        for row in ("a", "b", "c", "d"):
            box.ingest("feed", Delivery(row.encode(), snapshot_id="S", lease_token=token))
        box.lease("feed", "T", 600)
        checkpoint = box.checkpoint()
        assert box.verify().ok
        return path, checkpoint.tree_size, checkpoint


def edit_state(conn: apsw.Connection, seq: int) -> None:
    conn.execute("UPDATE log SET state = state || ' ' WHERE seq = ?", (seq,))


def edit_hash(conn: apsw.Connection, seq: int) -> None:
    conn.execute(
        "UPDATE log SET hash = replace(hash, substr(hash, 1, 1), "
        "CASE substr(hash, 1, 1) WHEN 'a' THEN 'b' ELSE 'a' END) WHERE seq = ?",
        (seq,),
    )


def delete(conn: apsw.Connection, seq: int) -> None:
    conn.execute("DELETE FROM log WHERE seq = ?", (seq,))


def swap_with_next(conn: apsw.Connection, seq: int) -> None:
    conn.execute("UPDATE log SET seq = -1 WHERE seq = ?", (seq,))
    conn.execute("UPDATE log SET seq = ? WHERE seq = ?", (seq, seq + 1))
    conn.execute("UPDATE log SET seq = ? WHERE seq = -1", (seq + 1,))


MUTATIONS: dict[str, Mutation] = {
    "state edited": edit_state,
    "hash edited": edit_hash,
    "entry deleted": delete,
    "swapped with the next": swap_with_next,
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutation_of_every_entry_is_caught_at_its_position(tmp_path: Path, name: str) -> None:
    clean, size, _ = build(tmp_path)
    last = size - 1 if name == "swapped with the next" else size
    for seq in range(1, last + 1):
        copy = tmp_path / f"{seq}.db"
        shutil.copy(clean, copy)
        conn = apsw.Connection(str(copy))
        MUTATIONS[name](conn, seq)
        conn.close()
        with oncebox.open(f"sqlite:///{copy}", inboxes=FEED, clock=ManualClock(0)) as box:
            report = box.verify()
        if name == "entry deleted" and seq == size:
            # Deleting the last entry is a truncation: the chain that is left is intact,
            # and only a checkpoint catches it (next test).
            assert report.broken_at is None
            continue
        assert not report.ok, f"{name} at entry {seq} went unnoticed"
        assert report.broken_at == seq, (name, seq, report.to_dict())


def test_tail_truncation_is_caught_only_against_a_checkpoint(tmp_path: Path) -> None:
    clean, size, checkpoint = build(tmp_path)
    conn = apsw.Connection(str(clean))
    conn.execute("DELETE FROM log WHERE seq = ?", (size,))  # the last lease entry
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        alone = box.verify()
        assert alone.broken_at is None and alone.uncovered == [] and alone.ok
        against = box.verify(checkpoint)
        assert against.checkpoint_ok is False and not against.ok
        assert "truncated" in (against.checkpoint_why or "")


def test_a_rewritten_log_fails_against_its_checkpoint(tmp_path: Path) -> None:
    clean, _, checkpoint = build(tmp_path)
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        assert box.verify(checkpoint).checkpoint_ok is True
    conn = apsw.Connection(str(clean))
    # Rewrite an entry and re-chain everything after it: the chain verifies again,
    # but the Merkle root of the prefix no longer matches the checkpoint.
    from oncebox.engine.log import GENESIS, chain_hash

    rows = list(conn.execute("SELECT seq, step, state FROM log ORDER BY seq"))
    prev = GENESIS
    for seq, step, state in rows:
        if seq == 2:
            state = state.replace('"snapshot_id":"S"', '"snapshot_id":"X"')
        digest = chain_hash(prev, step, state)
        conn.execute("UPDATE log SET state = ?, hash = ? WHERE seq = ?", (state, digest, seq))
        prev = digest
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        assert box.verify().broken_at is None
        report = box.verify(checkpoint)
        assert report.checkpoint_ok is False and "rewritten" in (report.checkpoint_why or "")


def test_a_deleted_seal_leaves_its_record_uncovered(tmp_path: Path) -> None:
    clean, _, _ = build(tmp_path)
    conn = apsw.Connection(str(clean))
    conn.execute(
        "DELETE FROM log WHERE step = 'accept' AND seq = (SELECT max(seq) FROM log "
        "WHERE step = 'accept')"
    )
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        report = box.verify()
        assert report.uncovered == [4] and not report.ok


def build_long(tmp_path: Path, rows: int = 40, leases: int = 0) -> tuple[Path, Checkpoint]:
    """A log long enough (over 32 entries) to keep Merkle nodes of level 4: a lease,
    ``rows`` records, then ``leases`` more leases."""
    path = tmp_path / "long.db"
    with oncebox.open(f"sqlite:///{path}", inboxes=FEED, clock=ManualClock(0)) as box:
        token = box.lease("feed", "S", 600).token
        for row in range(rows):
            box.ingest("feed", Delivery(b"row %d" % row, snapshot_id="S", lease_token=token))
        for lease in range(leases):
            box.lease("feed", f"T{lease}", 600)
        checkpoint = box.checkpoint()
        assert box.verify().ok
        return path, checkpoint


def test_a_merkle_node_that_disagrees_with_the_entries_fails_verify(tmp_path: Path) -> None:
    # Checkpoints and proofs are built from the stored nodes, verify from the entries:
    # a node edited in the store made the service sign a root that its own entries do
    # not hash to, while verify (and verify --against an earlier checkpoint) passed.
    clean, checkpoint = build_long(tmp_path)
    conn = apsw.Connection(str(clean))
    conn.execute("UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 4 AND idx = 0")
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        assert box.checkpoint().root != box.verify().root  # what the service now signs
        report = box.verify()
        assert not report.ok and report.broken_at == 1, report.to_dict()
        assert "Merkle node (4, 0)" in (report.broken_why or "")
        assert not box.verify(checkpoint).ok


def test_a_merkle_node_past_the_last_entry_shows_a_truncated_tail(tmp_path: Path) -> None:
    # 48 entries (a lease, 32 records, 15 leases) keep nodes (4, 0) to (4, 2). Leases 41
    # to 48 deleted leave a valid chain covering every record; the node over entries 33
    # to 48 still says they were there.
    clean, _ = build_long(tmp_path, rows=32, leases=15)
    conn = apsw.Connection(str(clean))
    conn.execute("DELETE FROM log WHERE seq > 40")
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        report = box.verify()
        assert not report.ok and report.broken_at == 41, report.to_dict()
        assert "Merkle node (4, 2)" in (report.broken_why or "")


def test_a_checkpoint_of_another_store_fails_verify_against(tmp_path: Path) -> None:
    # Two stores fed the same deliveries hold the same entries, hence the same root: a
    # checkpoint of one passed verify --against on the other, though it names another
    # log (its origin, which the signature covers). Proofs and segments check it.
    checkpoints = []
    for name in ("a", "b"):
        url = f"sqlite:///{tmp_path / name}.db"
        with oncebox.open(url, inboxes=FEED, clock=ManualClock(0)) as box:
            token = box.lease("feed", "S", 600).token
            box.ingest("feed", Delivery(b"row", snapshot_id="S", lease_token=token))
            checkpoints.append(box.checkpoint())
    mine, theirs = checkpoints[1], checkpoints[0]
    assert mine.root == theirs.root and mine.origin != theirs.origin
    with oncebox.open(f"sqlite:///{tmp_path}/b.db", inboxes=FEED, clock=ManualClock(0)) as box:
        assert box.verify(mine).ok
        report = box.verify(theirs)
        assert report.checkpoint_ok is False and not report.ok
        assert "another log" in (report.checkpoint_why or "")


def test_a_gap_wider_than_a_read_is_broken_not_the_end_of_the_log(tmp_path: Path) -> None:
    # verify read the log 10,000 entries at a time and took an empty read for its end:
    # an entry moved 20,000 positions on (a hole, and an entry past it) went unread, and
    # the log passed.
    clean, size, _ = build(tmp_path)
    conn = apsw.Connection(str(clean))
    conn.execute("UPDATE log SET seq = seq + 20000 WHERE seq = ?", (size,))  # the last lease
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        report = box.verify()
        assert not report.ok and report.broken_at == size, report.to_dict()
        assert f"goes on to {size + 20000}" in (report.broken_why or "")


FEED_REWIRES = {
    # The feed hands out what the log's inbox_id, record_id and revision columns name;
    # the chain hashes step and state only. Each of these left verify passing.
    "a seal names another record": "UPDATE log SET record_id = record_id - 1 WHERE seq = 3",
    "a seal names another revision": "UPDATE log SET revision = 2 WHERE seq = 3",
    "a seal names another inbox": "UPDATE log SET inbox_id = inbox_id + 1 WHERE seq = 3",
    "a seal names no record": "UPDATE log SET record_id = NULL, inbox_id = NULL WHERE seq = 3",
    "a seal names nothing": "UPDATE log SET (inbox_id, record_id, revision) = "
    "(NULL, NULL, NULL) WHERE seq = 3",
    "a lease is put on the feed": "UPDATE log SET (inbox_id, record_id, revision) = "
    "(SELECT inbox_id, record_id, revision FROM log WHERE seq = 2) WHERE seq = 1",
}


@pytest.mark.parametrize("name", sorted(FEED_REWIRES))
def test_a_feed_position_rewired_away_from_its_seal_fails_verify(tmp_path: Path, name: str) -> None:
    clean, _, _ = build(tmp_path)
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        before = [(e.position, e.record_id) for e in box.feed("feed").entries]
    conn = apsw.Connection(str(clean))
    conn.execute(FEED_REWIRES[name])
    conn.close()
    with oncebox.open(f"sqlite:///{clean}", inboxes=FEED, clock=ManualClock(0)) as box:
        after = [(e.position, e.record_id) for e in box.feed("feed").entries]
        report = box.verify()
    assert after != before or name == "a seal names another revision"  # what consumers get
    expected = 1 if name == "a lease is put on the feed" else 3
    assert not report.ok and report.broken_at == expected, report.to_dict()
