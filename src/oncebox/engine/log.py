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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

from oncebox.engine import merkle
from oncebox.engine.checkpoint import Checkpoint
from oncebox.errors import InvalidOperation, StorageError
from oncebox.formats.jsontext import compact_encoder
from oncebox.store.base import LogEntry, PendingEvent, Store, Tx

GENESIS = "GENESIS"
SEALING_STEPS = ("accept", "recover")
BATCH = 1000


def chain_hash(prev: str, step: str, state: str) -> str:
    return hashlib.sha256(f"{prev}|{step}|{state}".encode()).hexdigest()


_STATE_ENCODE = compact_encoder(sort_keys=True, ensure_ascii=False)
_string = encode_basestring  # how _STATE_ENCODE writes a string


def state_text(state: dict[str, Any]) -> str:
    return _STATE_ENCODE(state)


def leaf_of(entry: LogEntry) -> bytes:
    return merkle.leaf_hash(merkle.entry_leaf_data(entry.seq, entry.step, entry.state, entry.hash))


def chain(tx: Tx, items: Sequence[tuple[str, str]]) -> list[LogEntry]:
    """Append ``(step, state)`` entries and the Merkle nodes they complete, inside ``tx``.

    Everything is computed here and written with one statement per table: the head is
    read once, and nodes completed earlier in the same call are kept in memory. Each
    entry's chain hash is :func:`chain_hash`, its leaf hash :func:`leaf_of`.
    """
    head = tx.log_head()
    prev, seq = (head.hash, head.seq + 1) if head else (GENESIS, 1)
    first = seq
    entries: list[LogEntry] = []
    for step, text in items:
        entry = LogEntry(seq, step, text, chain_hash(prev, step, text))
        entries.append(entry)
        prev, seq = entry.hash, seq + 1
    leaves = [leaf_of(entry) for entry in entries]
    tx.append_log(entries)
    completed = merkle.appended_nodes(first - 1, leaves, Nodes(tx))
    tx.put_merkle_nodes([node for node in completed if _kept(node[0])])
    return entries


# Which Merkle nodes the store keeps: levels 4, 8, 12, ... (one row per 16 entries, and
# fewer above), not every level. A leaf is its entry's hash, so it never needs a row of
# its own; any other node is rebuilt from at most 8 nodes of the kept level below it.
NODE_STRIDE = 4


def _kept(level: int) -> bool:
    return level > 0 and level % NODE_STRIDE == 0


class Nodes:
    """The Merkle node getter over a transaction (what :mod:`merkle` calls ``get``):
    kept nodes are read, leaves come from their log entries, and every other node is
    hashed from the nearest kept level below it."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx

    def __call__(self, level: int, index: int) -> bytes:
        if _kept(level):
            found = self.tx.merkle_nodes(level, index, index + 1)
            if not found:
                raise StorageError(f"the Merkle node ({level}, {index}) is missing")
            return found[0]
        below = level - level % NODE_STRIDE
        width = 1 << (level - below)
        start, end = index * width, (index + 1) * width
        if below == 0:
            children = [leaf_of(e) for e in self.tx.log_entries(start + 1, end + 1)]
        else:
            children = self.tx.merkle_nodes(below, start, end)
        if len(children) != width:
            raise StorageError(f"the Merkle node ({level}, {index}) is not complete in the store")
        return merkle.root_of(children)


def record_events(
    tx: Tx, events: Sequence[tuple[str, str, int | None]], seal: bool
) -> dict[int, int]:
    """Seal ``events`` (step, state, record id) in this transaction where ``seal`` asks
    for it and no live dedicated sealer holds the log; queue them for the sealer
    otherwise. Returns record id -> log position for each record sealed here.

    Events queued earlier are appended first, so the log keeps queue order.
    """
    if not (seal and _take_log(tx)):
        tx.queue_logs(events)
        return {}
    while drain(tx):
        pass
    entries = chain(tx, [(step, state) for step, state, _ in events])
    return {
        record_id: entry.seq
        for (_, _, record_id), entry in zip(events, entries, strict=True)
        if record_id is not None
    }


def seal_queued(tx: Tx) -> None:
    """Append what this transaction (and any before it) queued, in this transaction,
    unless a live dedicated sealer holds the log."""
    if _take_log(tx):
        while drain(tx):
            pass


def _take_log(tx: Tx) -> bool:
    """Whether this transaction may append to the log: no live dedicated sealer holds it.
    Taking over from one whose lease ran out fences it with a fresh token."""
    row = tx.lock_sealer()
    now = tx.now()
    if row.holder is None:
        return True
    if row.expires_at >= now:
        return False
    tx.set_sealer(tx.next_token(), None, now)
    return True


def event(tx: Tx, step: str, state: dict[str, Any], record_id: int | None = None) -> None:
    """Queue a log event in the writer's own transaction; the sealer appends it.

    Writers never read or lock the log head, so ingest never waits on the log; the
    event commits or rolls back with the change it describes.
    """
    tx.queue_logs([(step, state_text(state), record_id)])


def record_state_text(
    inbox: str,
    record_id: int,
    identity: str | None,
    witness: str,
    revision: int,
    snapshot_id: str | None,
) -> str:
    """``state_text(record_state(...))``, written directly: it runs once per record."""
    if type(record_id) is not int or type(revision) is not int:
        return state_text(record_state(inbox, record_id, identity, witness, revision, snapshot_id))
    return (
        f'{{"identity":{"null" if identity is None else _string(identity)},'
        f'"inbox":{_string(inbox)},"record":{record_id},"revision":{revision},'
        f'"snapshot_id":{"null" if snapshot_id is None else _string(snapshot_id)},'
        f'"witness":{_string(witness)}}}'
    )


def record_state(
    inbox: str,
    record_id: int,
    identity: str | None,
    witness: str,
    revision: int,
    snapshot_id: str | None,
) -> dict[str, Any]:
    return {
        "inbox": inbox,
        "record": record_id,
        "identity": identity,
        "witness": witness,
        "revision": revision,
        "snapshot_id": snapshot_id,
    }


class StaleSealer(InvalidOperation):
    """This sealer's lease was superseded or expired; another sealer owns the log now."""


Sealed = list[tuple[PendingEvent, LogEntry]]


def drain(tx: Tx, orphans_upto: int = 0, pending: list[PendingEvent] | None = None) -> Sealed:
    """Append queued events (the next ``BATCH`` unless given, read in this transaction)
    to the chain in queue order; returns what went where.

    Seal order is the order the sealer drains the queue, which follows the order events
    were queued, not the order their transactions committed: an event whose transaction
    commits late is sealed in a later batch. A record's seal that recovery found orphaned
    (queued at or before ``orphans_upto``: its process died between its commit and its
    seal) is a ``recover`` entry.
    """
    if pending is None:
        pending = tx.pending_log(BATCH)
    if not pending:
        return []
    steps = [
        (
            "recover" if item.id <= orphans_upto and item.record_id is not None else item.step,
            item.state,
        )
        for item in pending
    ]
    entries = chain(tx, steps)
    tx.mark_sealed(
        [
            (e.seq, p.record_id)
            for p, e in zip(pending, entries, strict=True)
            if p.record_id is not None
        ]
    )
    tx.drop_pending([p.id for p in pending])
    return list(zip(pending, entries, strict=True))


def seal_now(store: Store, orphans_upto: int = 0, durable_point: bool = False) -> Sealed:
    """Seal everything queued, as one short-lived sealer.

    It holds the sealer row's lock for one transaction. Taking over from a dedicated
    :class:`Sealer` whose lease ran out, it also takes a fresh token, which fences that
    sealer. If a live sealer holds the lease, it is left to that sealer.

    With ``durable_point``, its first commit writes even when there is nothing to seal,
    so that its flush makes the caller's earlier non-durable commit durable.
    """

    def batch(tx: Tx, first: bool) -> tuple[Sealed, bool]:
        row = tx.lock_sealer()
        now = tx.now()
        live = row.holder is not None and row.expires_at >= now
        pending = [] if live else tx.pending_log(BATCH)
        if not pending:
            if durable_point and first:
                tx.probe_write(now)
            return [], False
        if row.holder is not None:
            # Taking over from a dedicated sealer whose lease ran out: a fresh token
            # fences it, so its next append is refused.
            tx.set_sealer(tx.next_token(), None, now)
        return drain(tx, orphans_upto, pending), len(pending) == BATCH

    sealed: Sealed = []
    more = True
    while more:
        first = not sealed
        done, more = store.atomic(lambda tx: batch(tx, first))  # noqa: B023 (called at once)
        sealed += done
    return sealed


class Sealer:
    """A long-running sealer that holds the log under a lease with a fencing token.

    Every append checks, in its own transaction, that the token is still the current
    one and the lease has not expired on the server clock; a sealer that paused past
    its lease is refused instead of appending out of turn.
    """

    def __init__(self, store: Store, holder: str, ttl: float = 30.0) -> None:
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.token: int | None = None

    def acquire(self) -> int:
        def take(tx: Tx) -> int:
            row = tx.lock_sealer()
            now = tx.now()
            if row.holder not in (None, self.holder) and row.expires_at >= now:
                raise InvalidOperation(
                    f"the log is held by sealer {row.holder} until {row.expires_at}"
                )
            token = tx.next_token()
            tx.set_sealer(token, self.holder, now + self.ttl)
            return token

        self.token = self.store.atomic(take)
        return self.token

    def seal(self) -> int:
        """Drain the queue under this sealer's lease; returns how many were appended."""

        def batch(tx: Tx) -> int:
            row = tx.lock_sealer()
            now = tx.now()
            if row.token != self.token or row.holder != self.holder or now > row.expires_at:
                raise StaleSealer(
                    f"sealer {self.holder} holds token {self.token}, but the log's current "
                    f"sealer token is {row.token}"
                )
            tx.set_sealer(row.token, self.holder, now + self.ttl)
            return len(drain(tx))

        return self.store.atomic(batch)

    def release(self) -> None:
        def give_up(tx: Tx) -> None:
            row = tx.lock_sealer()
            if row.token == self.token:
                tx.set_sealer(row.token, None, tx.now())

        self.store.atomic(give_up)
        self.token = None


# How long a queued seal may wait for its own writer before recovery calls it orphaned.
# A live writer seals within milliseconds of its commit (or another writer's seal pass
# takes it along); only a dead one leaves its seal queued this long.
ORPHAN_GRACE = 0.2


def recover(store: Store, grace: float = ORPHAN_GRACE) -> int:
    """Seal every committed record the log does not cover; returns how many.

    Two kinds are left by a crash or an older version: records whose seal is still
    queued (their process died between the commit and the seal) and records with no
    queued seal at all. Both are sealed as ``recover`` entries. A queued seal counts as
    orphaned only if it is still queued ``grace`` seconds after recovery first saw it,
    so that opening a store beside live writers does not relabel their seals.
    """
    recovered = 0
    with store.reading() as tx:
        seen = tx.last_pending_id()
    if seen:
        time.sleep(grace)
        sealed = seal_now(store, orphans_upto=seen)
        recovered = sum(1 for p, _ in sealed if p.record_id is not None and p.id <= seen)
    while True:

        def orphans(tx: Tx) -> int:
            row = tx.lock_sealer()
            if row.holder is not None and row.expires_at >= tx.now():
                return 0  # a live sealer owns the log
            records = tx.unsealed_records(BATCH)
            names = {inbox.id: inbox.name for inbox in tx.inboxes()}
            states = [
                record_state_text(
                    names.get(r.inbox_id, str(r.inbox_id)),
                    r.id,
                    r.identity,
                    r.witness.hex(),
                    r.revision,
                    r.snapshot_id,
                )
                for r in records
            ]
            entries = chain(tx, [("recover", state) for state in states])
            tx.mark_sealed([(e.seq, r.id) for r, e in zip(records, entries, strict=True)])
            return len(records)

        done = store.atomic(orphans)
        recovered += done
        if done < BATCH:
            return recovered


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
    report.uncovered = [
        record_id for record_id, position in seals if position is None or record_id not in covered
    ]
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
