"""The checkpoint log: an append-only SHA-256 chain with a Merkle tree over it (I4).

Each entry's hash is ``SHA-256(prev | step | state)`` from a fixed genesis, so replaying
the entries recomputes the same chain and any edit breaks it at the edited entry. The
Merkle tree (RFC 6962 hashing) over the same entries gives inclusion and consistency
proofs that an auditor checks offline against a signed checkpoint.

Records are sealed after the transaction that decided them commits, so a crash can
leave committed records unsealed; :func:`recover` seals those as ``recover`` entries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oncebox.engine import merkle
from oncebox.engine.checkpoint import Checkpoint
from oncebox.store.base import LogEntry, RecordRow, Store, Tx

GENESIS = "GENESIS"
SEALING_STEPS = ("accept", "recover")
BATCH = 1000


def chain_hash(prev: str, step: str, state: str) -> str:
    return hashlib.sha256(f"{prev}|{step}|{state}".encode()).hexdigest()


def state_text(state: dict[str, Any]) -> str:
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def leaf_of(entry: LogEntry) -> bytes:
    return merkle.leaf_hash(merkle.entry_leaf_data(entry.seq, entry.step, entry.state, entry.hash))


def append(tx: Tx, step: str, state: dict[str, Any]) -> LogEntry:
    """Append one entry and the Merkle nodes it completes, inside ``tx``."""
    head = tx.log_head()
    prev, seq = (head.hash, head.seq + 1) if head else (GENESIS, 1)
    text = state_text(state)
    entry = LogEntry(seq, step, text, chain_hash(prev, step, text))
    tx.append_log(entry)
    tx.put_merkle_nodes(merkle.completed_nodes(seq - 1, leaf_of(entry), tx.merkle_node))
    return entry


def record_state(record: RecordRow, inbox: str) -> dict[str, Any]:
    return {
        "inbox": inbox,
        "record": record.id,
        "identity": record.identity,
        "witness": record.witness.hex(),
        "revision": record.revision,
        "snapshot_id": record.snapshot_id,
    }


def seal(tx: Tx, records: Sequence[RecordRow], step: str, names: dict[int, str]) -> dict[int, int]:
    """Give each unsealed record its log entry; returns record id -> log position."""
    sealed = {}
    for record in records:
        if record.log_seq is not None:
            sealed[record.id] = record.log_seq
            continue
        entry = append(tx, step, record_state(record, names[record.inbox_id]))
        tx.mark_sealed(record.id, entry.seq)
        sealed[record.id] = entry.seq
    return sealed


def recover(store: Store) -> int:
    """Seal every committed record the log does not cover, in record order."""
    total = 0
    while True:
        with store.transaction() as tx:
            names = {row.id: row.name for row in tx.inboxes()}
            pending = tx.unsealed_records(BATCH)
            seal(tx, pending, "recover", names)
        total += len(pending)
        if len(pending) < BATCH:
            return total


@dataclass
class Verification:
    """What :func:`verify` found. ``ok`` only when the chain is intact, every record is
    covered and (when given) the checkpoint matches."""

    entries: int = 0
    head: str = GENESIS
    root: str = merkle.EMPTY_ROOT.hex()
    broken_at: int | None = None
    broken_why: str | None = None
    uncovered: list[int] = field(default_factory=list)
    checkpoint_ok: bool | None = None
    checkpoint_why: str | None = None

    @property
    def ok(self) -> bool:
        return self.broken_at is None and not self.uncovered and self.checkpoint_ok is not False

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "head": self.head,
            "root": self.root,
            "broken_at": self.broken_at,
            "broken_why": self.broken_why,
            "uncovered_records": self.uncovered,
            "checkpoint_ok": self.checkpoint_ok,
            "checkpoint_why": self.checkpoint_why,
        }


def verify(store: Store, against: Checkpoint | None = None) -> Verification:
    """Replay the chain from genesis, recompute the Merkle root from the entries, and
    find every record no ``accept``/``recover`` entry covers.

    Truncating the tail of the log keeps a valid chain; only a checkpoint taken
    earlier (``against``) catches that, by its size and root.
    """
    report = Verification()
    prev, expected_seq = GENESIS, 1
    covered: set[int] = set()
    leaves: list[bytes] = []
    prefix_root: bytes | None = None
    with store.reading() as tx:
        while True:
            chunk = tx.log_entries(expected_seq, expected_seq + 10_000)
            if not chunk:
                break
            for entry in chunk:
                if report.broken_at is None:
                    why = _check_entry(entry, expected_seq, prev)
                    if why:
                        report.broken_at, report.broken_why = expected_seq, why
                prev, expected_seq = entry.hash, entry.seq + 1
                leaves.append(leaf_of(entry))
                if entry.step in SEALING_STEPS:
                    covered.update(_record_ids(entry))
                if against is not None and len(leaves) == against.tree_size:
                    prefix_root = merkle.root_of(leaves)
        seals = tx.record_seals()
    report.entries = len(leaves)
    report.head = prev
    report.root = merkle.root_of(leaves).hex()
    report.uncovered = [record_id for record_id, _ in seals if record_id not in covered]
    if against is not None:
        if against.tree_size == 0:
            prefix_root = merkle.EMPTY_ROOT
        if prefix_root is None:
            report.checkpoint_ok = False
            report.checkpoint_why = (
                f"the log has {len(leaves)} entries, fewer than the checkpoint's "
                f"{against.tree_size}: it was truncated"
            )
        elif prefix_root.hex() != against.root:
            report.checkpoint_ok = False
            report.checkpoint_why = (
                f"the first {against.tree_size} entries do not hash to the checkpoint's root: "
                f"the log was rewritten"
            )
        else:
            report.checkpoint_ok = True
    return report


def _check_entry(entry: LogEntry, expected_seq: int, prev: str) -> str | None:
    if entry.seq != expected_seq:
        return f"entry {expected_seq} is missing (next is {entry.seq})"
    if entry.hash != chain_hash(prev, entry.step, entry.state):
        return f"entry {entry.seq} does not hash to its recorded hash"
    return None


def _record_ids(entry: LogEntry) -> list[int]:
    try:
        state = json.loads(entry.state)
        return [int(state["record"])]
    except (ValueError, KeyError, TypeError):
        return []
