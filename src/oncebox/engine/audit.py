"""What an outside auditor gets: checkpoints and proofs, checkable without the store."""

from __future__ import annotations

import json
from typing import Any, Protocol

from oncebox.domain import Quarantined, Revision
from oncebox.engine import log, merkle
from oncebox.engine.checkpoint import Checkpoint, is_int, sign_checkpoint
from oncebox.engine.log import GENESIS
from oncebox.engine.proofs import RECORD_FIELDS, consistency_document, inclusion_document
from oncebox.engine.segment import check_range, feed_inbox, parse_state, segment_document
from oncebox.errors import InvalidOperation, NotFound
from oncebox.store.base import Chain, Store


def checkpoint(store: Store, private_key_pem: bytes | None = None) -> Checkpoint:
    """The tree's size and root now, signed with Ed25519 when a key is given."""
    with store.reading() as tx:
        head = tx.log_head()
        size = head.seq if head else 0
        root = merkle.tree_root(log.Nodes(tx), size)
        origin = f"oncebox:{tx.meta('store_id')}"
    point = Checkpoint(origin, size, root.hex(), head.hash if head else GENESIS)
    return sign_checkpoint(point, private_key_pem) if private_key_pem else point


def prove_record(store: Store, record_id: int, tree_size: int | None = None) -> dict[str, Any]:
    with store.reading() as tx:
        record = tx.get_record(record_id)
        if record is None:
            raise NotFound(f"no record {record_id}")
        if record.log_seq is None:
            raise InvalidOperation(f"record {record_id} is not sealed yet; run recover")
        entry = next(iter(tx.log_entries(record.log_seq, record.log_seq + 1)), None)
        head = tx.log_head()
        size = tree_size or (head.seq if head else 0)
        if entry is None or entry.seq > size:
            raise NotFound(f"record {record_id}'s log entry is not in a tree of size {size}")
        path = merkle.inclusion_proof(log.Nodes(tx), entry.seq - 1, size)
    # The proof is for the record's seal: the revision it had when it was sealed. An
    # accepted later revision is its own ``resolve`` entry, carrying the new witness.
    # It shows exactly what the seal covers, so a verifier can check every field shown.
    sealed = json.loads(entry.state)
    if sealed.get("record") != record.id:
        raise InvalidOperation(f"record {record_id}'s log entry {entry.seq} seals another record")
    about = {name: sealed[member] for name, member in RECORD_FIELDS.items() if member in sealed}
    document = inclusion_document(
        {"seq": entry.seq, "step": entry.step, "state": entry.state, "hash": entry.hash},
        entry.seq - 1,
        size,
        path,
        about,
    )
    json.dumps(document)  # proofs must always be plain JSON
    return document


def prove_consistency(store: Store, old_size: int, new_size: int | None = None) -> dict[str, Any]:
    with store.reading() as tx:
        head = tx.log_head()
        size = head.seq if head else 0
        new = size if new_size is None else new_size
        if not 0 < old_size <= new <= size:
            raise InvalidOperation(
                f"a consistency proof needs 0 < old ({old_size}) <= new ({new}) <= {size}"
            )
        path = merkle.consistency_proof(log.Nodes(tx), old_size, new)
    return consistency_document(old_size, new, path)


class Segmenting(Chain, Protocol):
    """What making a segment reads: the log and its tree, and each record's content at
    the revision an entry sealed."""

    def revisions(self, record_id: int) -> list[Revision]: ...

    def get_quarantine(self, quarantine_id: int, lock: bool = False) -> Quarantined | None: ...


def segment(
    store: Store,
    inbox: str,
    start: int,
    end: int,
    tree_size: int | None = None,
    whole: bool = False,
) -> dict[str, Any]:
    """The feed segment of log entries ``start`` to ``end`` for ``inbox``, proven
    against the tree of ``tree_size`` entries (default: the tree now), read in one
    snapshot on the listings' connections, which no writer waits for
    (:mod:`oncebox.engine.segment`)."""
    with store.scanning() as tx:
        head = tx.log_head()
        now = head.seq if head else 0
        size = now if tree_size is None else tree_size
        if size > now:
            raise InvalidOperation(f"the tree has {now} entries, not {size}")
        try:
            check_range(start, end, size)
        except ValueError as exc:
            raise InvalidOperation(str(exc)) from None
        entries = tx.log_entries(start, end + 1)
        contents = {}
        for entry in entries:
            state = parse_state(entry.state)
            if state is not None and feed_inbox(entry.step, state) == inbox:
                contents[entry.seq] = _content_sealed(tx, state)
        document = segment_document(
            origin=f"oncebox:{tx.meta('store_id')}",
            inbox=inbox,
            start=start,
            end=end,
            tree_size=size,
            get=log.Nodes(tx),
            entries=entries,
            contents=contents,
            whole=whole,
        )
    json.dumps(document)  # segments must always be plain JSON
    return document


def _content_sealed(tx: Segmenting, state: dict[str, Any]) -> bytes | None:
    """The content of the revision a feed entry sealed, or None once it is not kept: a
    record's seal names the record and revision; an operator's accepted newcomer (a
    ``resolve`` entry) names its quarantine row, which holds that content."""
    record_id, revision = state.get("record"), state.get("revision")
    if is_int(record_id) and is_int(revision):
        record = tx.get_record(record_id)
        if record is None or record.is_tombstone:
            return None
        if record.revision == revision:
            return record.content
        earlier = [r for r in tx.revisions(record_id) if r.revision == revision]
        return earlier[0].content if earlier else None
    quarantine_id = state.get("quarantine")
    row = tx.get_quarantine(quarantine_id) if is_int(quarantine_id) else None
    return row.content if row is not None else None
