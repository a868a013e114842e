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
from collections.abc import Sequence
from functools import partial
from json.encoder import encode_basestring
from typing import Any

from oncebox.domain import LogEntry, LogEvent, NewRecordRow
from oncebox.engine import merkle
from oncebox.errors import StorageError
from oncebox.formats.jsontext import compact_encoder
from oncebox.store.base import Chain, Events

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


# A LogEntry from all its fields at C speed (a named tuple's own __new__ is Python).
_entry = partial(tuple.__new__, LogEntry)


def chain(tx: Chain, items: Sequence[LogEvent]) -> list[LogEntry]:
    """Append the events' entries and the Merkle nodes they complete, inside ``tx``. An
    entry that seals a record's revision names it: its seq is the revision's position on
    its inbox's feed, given here, at seal time."""
    head = tx.log_head()
    return chain_after(tx, (head.seq, head.hash) if head else None, items)


def chain_after(
    tx: Chain, end: tuple[int, str] | None, items: Sequence[LogEvent]
) -> list[LogEntry]:
    """:func:`chain` where the caller read where the log ends (its last entry's seq and
    hash; None: empty) in this transaction already, holding the log.

    Everything is computed here and written with one statement per table: the head is
    read once, and nodes completed earlier in the same call are kept in memory. Each
    entry's chain hash is :func:`chain_hash`, its leaf hash :func:`leaf_of`.
    """
    size, prev = end or (0, GENESIS)
    # Its Merkle tree's right edge, as this connection's last append left it, if it holds.
    memo = tx.log_edge
    edge = _right_edge(tx, size, prev)
    # A memo that held but lacks nodes (begun on a log another writer had appended to)
    # is filled where that costs no read: the log stayed this connection's, so its next
    # seal may well be sent the head alone. Not where it did not hold: under contention
    # the next seal finds the log moved again, and the fill would be wasted.
    held = memo is not None and edge is memo[2]
    if held and tx.log_block_at_hand and len(edge) != size.bit_count():
        _fill_edge(edge, size, Nodes(tx))
    seq = size + 1
    entries: list[LogEntry] = []
    leaves: list[bytes] = []
    sha256, add_entry, add_leaf = hashlib.sha256, entries.append, leaves.append
    new, entry = tuple.__new__, LogEntry  # called directly: a partial over it adds a call
    for step, text, record_id, revision, inbox_id in items:
        # chain_hash and leaf_of, written out: the two hashes of every entry appended.
        prev = sha256(f"{prev}|{step}|{text}".encode()).hexdigest()
        add_entry(new(entry, (seq, step, text, prev, inbox_id, record_id, revision)))
        add_leaf(sha256(f"\x00{seq}|{step}|{text}|{prev}".encode()).digest())
        seq += 1
    tx.append_log(entries)
    # Only the kept levels' nodes (_kept), built as they complete, on that edge.
    nodes = merkle.appended_nodes(size, leaves, Nodes(tx), NODE_STRIDE, edge)
    if nodes:  # one append in 16 completes a kept node
        tx.put_merkle_nodes(nodes)
    tx.log_edge = (seq - 1, prev, edge)
    return entries


def _right_edge(tx: Chain, size: int, last_hash: str) -> dict[int, bytes]:
    """The right edge of the tree of ``size`` entries that this connection's last append
    left, if the log still ends where that append ended it (at ``size``, with the chain
    hash ``last_hash``, read in this transaction with the log held); empty otherwise,
    the nodes then read. Another process or connection may have appended since, or that
    append's transaction may have rolled back. The hash chains every entry before it, so
    the same last seq and hash mean the same entries, hence the same tree. Taken out of
    the connection until the append is done: one that fails half-way leaves nothing."""
    kept, tx.log_edge = tx.log_edge, None
    if kept is not None and kept[0] == size and kept[1] == last_hash:
        edge: dict[int, bytes] = kept[2]
        return edge
    return {}


def _fill_edge(edge: dict[int, bytes], size: int, get: merkle.NodeGetter) -> None:
    """Complete ``edge`` for a tree of ``size`` leaves: one node per bit set in ``size``,
    the complete subtree ending the leaves at that level. Where the transaction holds
    the log's last block and kept nodes (:attr:`Chain.log_block_at_hand`), each comes
    without a read; kept whole, the edge lets the next seal on the connection read none
    of the log but its head (:mod:`oncebox.store.pgseal`). Some 40 hashes at most (the
    leaves of the last block among them), so only where the memo held."""
    level, rest = 0, size
    while rest:
        if rest & 1 and level not in edge:
            edge[level] = get(level, rest - 1)
        level += 1
        rest >>= 1


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

    def __init__(self, tx: Chain) -> None:
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


def event(
    tx: Events,
    step: str,
    state: dict[str, Any],
    record_id: int | None = None,
    revision: int | None = None,
    inbox_id: int | None = None,
) -> None:
    """Queue a log event in the writer's own transaction; the sealer appends it. One that
    names a record's revision (and its inbox) seals that revision: its entry's position is
    the revision's place on the feed.

    Writers never read or lock the log head, so ingest never waits on the log; the
    event commits or rolls back with the change it describes.
    """
    tx.queue_logs([LogEvent(step, state_text(state), record_id, revision, inbox_id)])


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


def first_revision_states(inbox: str, records: Sequence[NewRecordRow]) -> list[str]:
    """:func:`record_state_text` of each new record's first revision, in order: the
    inbox's name quoted once a batch, the witness (hex digits, nothing to escape) written
    as it is. An f-string, which joins its parts at once: a ``%`` template parses its
    format again on every record, and costs more."""
    quoted_inbox = _string(inbox)
    states: list[str] = []
    add = states.append
    for record_id, _, identity, witness, _, _, arrival, _, _ in records:
        snapshot_id = arrival.snapshot_id
        if type(record_id) is not int:  # a number's own spelling: as record_state_text
            add(record_state_text(inbox, record_id, identity, witness.hex(), 1, snapshot_id))
            continue
        add(
            f'{{"identity":{"null" if identity is None else _string(identity)},'
            f'"inbox":{quoted_inbox},"record":{record_id},"revision":1,'
            f'"snapshot_id":{"null" if snapshot_id is None else _string(snapshot_id)},'
            f'"witness":"{witness.hex()}"}}'
        )
    return states


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
