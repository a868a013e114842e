"""Verifying the log (I4): the chain replayed from genesis, its Merkle root recomputed,
every record's seal found, and what is read beside the entries but not hashed (the
stored Merkle nodes, the revision each entry puts on the feed) checked against them.

Apart from :mod:`oncebox.engine.log`, which writes the log: this only reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oncebox.domain import LogEntry
from oncebox.engine import merkle
from oncebox.engine.checkpoint import Checkpoint
from oncebox.engine.log import GENESIS, SEALING_STEPS, _kept, chain_hash, leaf_of
from oncebox.store.base import Chain, Store

# Seconds a record's queued seal may wait before verify calls the record uncovered: a
# dedicated sealer (or the next writer) seals the queue within its lease's 30 s, so one
# younger than this is on its way, and one older is stuck (run recover).
SEAL_PATIENCE = 60.0


@dataclass
class Verification:
    """What :func:`verify` found. ``ok`` only when the chain is intact, every record is
    covered or ``queued`` (its seal waits in the queue, accepted less than
    :data:`SEAL_PATIENCE` ago: a live store is not a broken one) and (when given) the
    checkpoint matches."""

    entries: int = 0
    head: str = GENESIS
    root: str = merkle.EMPTY_ROOT.hex()
    broken_at: int | None = None
    broken_why: str | None = None
    uncovered: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
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
            "queued_records": self.queued,
            "checkpoint_ok": self.checkpoint_ok,
            "checkpoint_why": self.checkpoint_why,
        }


def verify(store: Store, against: Checkpoint | None = None) -> Verification:
    """Replay the chain from genesis, recompute the Merkle root from the entries, and
    find every record no ``accept``/``recover`` entry covers; check what is read beside
    the entries but not hashed (the stored Merkle nodes, what each entry puts on the
    feed) against them; and check ``against`` is this store's checkpoint.

    Truncating the tail of the log keeps a valid chain; only a checkpoint taken
    earlier (``against``) catches that, by its size and root.
    """
    report = Verification()
    prev, expected_seq = GENESIS, 1
    covered: set[int] = set()
    leaves: list[bytes] = []
    prefix_root: bytes | None = None
    with store.reading() as tx:
        last = tx.log_head()
        inbox_ids = {inbox.name: inbox.id for inbox in tx.inboxes()}
        listed: dict[int, int] = {}  # position -> the record the feed lists there
        while True:
            chunk = tx.log_rows(expected_seq, expected_seq + 10_000)
            if not chunk:
                if last is not None and last.seq >= expected_seq and report.broken_at is None:
                    # An empty read before the last entry is a hole wider than a read,
                    # not the log's end: the chain is broken there.
                    report.broken_at = expected_seq
                    report.broken_why = (
                        f"entries {expected_seq} to {expected_seq + 9_999} are missing "
                        f"(the log goes on to {last.seq})"
                    )
                break
            for entry in chunk:
                if report.broken_at is None:
                    why = _check_entry(entry, expected_seq, prev) or _check_feed(entry, inbox_ids)
                    if why:
                        report.broken_at, report.broken_why = expected_seq, why
                if entry.record_id is not None:
                    listed[entry.seq] = entry.record_id
                prev, expected_seq = entry.hash, entry.seq + 1
                leaves.append(leaf_of(entry))
                if entry.step in SEALING_STEPS:
                    covered.update(_record_ids(entry))
                if against is not None and len(leaves) == against.tree_size:
                    prefix_root = merkle.root_of(leaves)
        seals = tx.record_seals()
        now = tx.now()
        waiting = {rid for rid, seen in tx.queued_seals() if now - seen < SEAL_PATIENCE}
        origin = f"oncebox:{tx.meta('store_id')}"
        if report.broken_at is None:
            found = _stored_node_disagrees(tx, leaves) or _seal_off_the_feed(
                seals, listed, len(leaves)
            )
            if found:
                report.broken_at, report.broken_why = found
    report.entries = len(leaves)
    report.head = prev
    report.root = merkle.root_of(leaves).hex()
    missing = [rid for rid, position in seals if position is None or rid not in covered]
    report.queued = [rid for rid in missing if rid in waiting]
    report.uncovered = [rid for rid in missing if rid not in waiting]
    if against is not None:
        if against.tree_size == 0:
            prefix_root = merkle.EMPTY_ROOT
        if against.origin != origin:
            # Stores fed alike hold the same entries, hence the same roots: only the
            # origin (which the signature covers) tells whose log a checkpoint is of.
            report.checkpoint_ok = False
            report.checkpoint_why = (
                f"the checkpoint is of another log, {against.origin}, not this store's {origin}"
            )
        elif prefix_root is None:
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


def _stored_node_disagrees(tx: Chain, leaves: list[bytes]) -> tuple[int, str] | None:
    """The first kept Merkle node that is not the one the entries hash to, as (the first
    entry it covers, why), or None. Why: checkpoints and proofs are built from the stored
    nodes, not from the entries, so a node edited in the store would have the service
    sign a root its own log does not have; and a node over entries past the log's end
    shows a tail that was cut off. Nodes are kept contiguously from index 0, so reading
    one past the complete ones finds any stray."""
    row, level = leaves, 0
    while row:
        row = [merkle.node_hash(a, b) for a, b in zip(row[::2], row[1::2], strict=False)]
        level += 1
        if not _kept(level):
            continue
        stored = tx.merkle_nodes(level, 0, len(row) + 1)
        width = 1 << level
        for index, value in enumerate(stored):
            first, last = index * width + 1, (index + 1) * width
            if index >= len(row):
                return len(leaves) + 1, (
                    f"the stored Merkle node ({level}, {index}) covers entries {first} to "
                    f"{last}, past the log's last entry {len(leaves)}: its tail was cut off"
                )
            if value != row[index]:
                return first, (
                    f"the stored Merkle node ({level}, {index}) is not the hash of entries "
                    f"{first} to {last}: checkpoints and proofs built from it are wrong"
                )
        if len(stored) < len(row):
            index = len(stored)
            return index * width + 1, (
                f"the stored Merkle node ({level}, {index}) over entries {index * width + 1} "
                f"to {(index + 1) * width} is missing"
            )
    return None


def _check_feed(entry: LogEntry, inbox_ids: dict[str, int]) -> str | None:
    """Why the revision ``entry`` puts on the feed (its inbox, record and revision
    columns, which the chain does not hash) is not the one its step and state seal, or
    None. Why: the feed hands out what those columns name; one changed in the store
    hands consumers another record, or none, at that position. An entry that seals no
    revision names none; a resolution names its own inbox (its record is not in its
    state). Older stores were given these columns by migration 18 where a record's
    seal is, so an entry may name nothing where it seals a record no longer there."""
    named = (entry.inbox_id, entry.record_id, entry.revision)
    if named == (None, None, None):
        return None
    try:
        state = json.loads(entry.state)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        state = {}
    inbox = state.get("inbox")
    own_inbox = inbox_ids.get(inbox) if isinstance(inbox, str) else None
    if entry.step in SEALING_STEPS and "record" in state:
        sealed = (own_inbox, state.get("record"), state.get("revision"))
        if own_inbox is None and isinstance(inbox, str) and inbox == str(entry.inbox_id):
            sealed = (entry.inbox_id, *sealed[1:])  # recovered where the inbox had no name
    elif entry.step == "resolve" and state.get("action") == "accept":
        sealed = (own_inbox, entry.record_id, entry.revision)
    else:
        sealed = (None, None, None)
    if None in named or named != sealed:
        return (
            f"entry {entry.seq} puts inbox {entry.inbox_id}'s record {entry.record_id} "
            f"revision {entry.revision} on the feed, not what its {entry.step} entry seals"
        )
    return None


def _seal_off_the_feed(
    seals: list[tuple[int, int | None]], listed: dict[int, int], size: int
) -> tuple[int, str] | None:
    """The first record whose seal's position (among the ``size`` entries, all read)
    does not list it on the feed, as (that position, why), or None: the feed would skip
    the record there."""
    off = [
        (pos, rid)
        for rid, pos in seals
        if pos is not None and pos <= size and listed.get(pos) != rid
    ]
    if not off:
        return None
    position, record_id = min(off)
    return position, (
        f"entry {position} is record {record_id}'s seal, but the feed lists "
        f"{listed.get(position, 'nothing')} there"
    )


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
