"""A seal's reads and writes on PostgreSQL, in one transaction of the store
(:mod:`oncebox.store.pgtx`): the log's lease and everything a seal reads next in one
statement (``seal_reads_held``, migrations 24 and 26: the log's last block and kept
nodes, or its head alone where the connection's kept edge is still the tree's), sent in
the transaction's pipeline or in the commit's round trip before it
(:meth:`PostgresStore.sealing_next`); its writes (log entries, Merkle nodes, seal
positions, the queue rows it drained) held back and sent as one statement
(``seal_writes``) with whatever goes next; and the transaction's own log events held
back, so that a seal in this very transaction (a single delivery's) appends them
without their touching the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from oncebox.domain import SEALER, LeaseState, LogEntry, LogEvent, PendingEvent, Record
from oncebox.errors import RetryTransaction
from oncebox.store.pgarrays import typed
from oncebox.store.pgpipe import PipelinedTx, Q

# Ids of a transaction's own events, sealed in it before they were ever queued: above
# any the queue gives, so they drain after what was queued before them.
OWN_EVENTS = 1 << 62
SEAL_BATCH = 1000  # what a seal reads of the queue (engine.log.BATCH): prefetched alike
LOG_BLOCK = 16  # entries under one kept Merkle node (engine.log.NODE_STRIDE levels)
# The parts of seal_writes, in its order, with how many arrays each takes.
SEAL_PARTS = (("append_log", 7), ("put_merkle_node", 3), ("mark_sealed", 2), ("drop_pending", 1))


class SealingTx(PipelinedTx):
    """A transaction's seal: its reads taken with the log's lease, its writes held."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        clock: Callable[[], float] | None,
        pipeline: psycopg.Pipeline | None = None,
        level: str = "on",
    ) -> None:
        super().__init__(conn, clock, pipeline)
        self._level = level  # the connection's synchronous_commit, to go back to
        # Its commit will not wait for the WAL flush / nor need a durable one to cover it.
        self.deferred = self.relaxed = False
        # A seal's reads, fetched with its lock (see held), each taken once.
        self._now: float | None = None
        self._pending: list[PendingEvent] | None = None
        self._tail: list[LogEntry] | None = None
        self._lease: dict[str, LeaseState] | None = None
        self._nodes: dict[tuple[int, int], bytes] = {}  # stored, so never stale
        self.log_block_at_hand = False  # the log's last block and kept nodes read whole
        self._seal: dict[str, list[Any]] = {}  # its writes, sent as one statement
        # Log events this transaction queued, held back: a seal in this very transaction
        # (a single delivery's) appends them without their touching the queue; otherwise
        # they are queued in the commit's round trip (before_commit), or before any read
        # of the queue.
        self._own: list[LogEvent] = []

    def _settle(self) -> None:
        if self._seal:
            seal, self._seal = self._seal, {}
            arrays: list[Sequence[Any]] = []
            for name, width in SEAL_PARTS:  # a part with no rows: each of its arrays empty
                rows = seal.get(name)
                arrays += list(zip(*rows, strict=True)) if rows else [()] * width
            sql = Q["seal_writes"].sql
            self._execute(sql, typed(sql, arrays))
        # Then the writes held (pgfold): always after the seal's, which are written just
        # after a read (a seal begins by taking the log), and every read sends them.
        super()._settle()

    # -- the clock and durability
    def _durable_again(self) -> bool:
        """Whether this transaction was begun relaxed; from now on it is not."""
        was, self.deferred = self.deferred, False
        return was

    def now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        if self._now is not None:
            now, self._now = self._now, None
            return now
        return float(self._one("now")[0])

    # -- log events: held back, queued only where no seal of this transaction takes them
    def queue_logs(self, events: Sequence[LogEvent]) -> None:
        self._own.extend(events)

    def _queue_own(self) -> None:
        if self._own:
            own, self._own = self._own, []
            self._send_many("queue_logs", own)

    def before_commit(self) -> None:
        self._queue_own()
        super().before_commit()

    def last_pending_id(self) -> int:
        self._queue_own()
        return super().last_pending_id()

    def log_pending_count(self) -> int:
        self._queue_own()
        return super().log_pending_count()

    def unsealed_records(self, limit: int) -> list[Record]:
        self._queue_own()
        return super().unsealed_records(limit)

    # A seal's writes: held back, then sent as one statement (seal_writes) with whatever
    # comes next (the COMMIT, or a read, which then sees them).
    def mark_sealed(self, seals: Sequence[tuple[int, int]]) -> None:
        self._seal.setdefault("mark_sealed", []).extend(seals)

    def drop_pending(self, event_ids: Sequence[int]) -> None:
        drained = [(i,) for i in event_ids if i < OWN_EVENTS]  # our own were never queued
        self._seal.setdefault("drop_pending", []).extend(drained)

    def put_merkle_nodes(self, nodes: Sequence[tuple[int, int, bytes]]) -> None:
        self._seal.setdefault("put_merkle_node", []).extend(nodes)

    # -- sealing: its reads with its lock
    def held(
        self, kind: str, owner: int, names: Sequence[str], exclusive: bool = False
    ) -> dict[str, LeaseState]:
        sealer = (kind, owner, list(names), exclusive) == (*SEALER[:2], [SEALER.name], True)
        if sealer and self.deferred and self._pipe is None:
            self._durable_again()
            self._conn.execute(Q["insist_durability"].sql, (self._level,))
        if sealer and self._lease is None and self._pipe is not None:
            self.read_for_seal()
        if sealer and self._lease is not None:
            lease, self._lease = self._lease, None  # read as its transaction began
            return lease
        return super().held(kind, owner, names, exclusive)

    def read_for_seal(self) -> Callable[[], None]:
        """The log's lease, held, and what a seal reads next, in one statement (a
        function whose reads come after the lock is granted). In this transaction's
        pipeline, their answers are taken in at once; otherwise (sent in the pipeline of
        the commit before) by the call returned, once they are there. A transaction
        begun relaxed that takes the log commits durably after all (an append is what a
        durable commit covers): the same statement sets its level back."""
        level = self._level if self._durable_again() else None
        # The decision's writes held before it go in the same statement, done first.
        params = (level, SEAL_BATCH, LOG_BLOCK, *self._known_end())
        reads, folded = self._send_after_held("seal_reads_held", "seal_reads_after", params)
        counted = len(folded) + 1 if folded else 0  # its counts' columns, then the reads'

        def take() -> None:
            pending: list[PendingEvent] = []
            tail: list[LogEntry] = []
            nodes: dict[tuple[int, int], bytes] = {}
            lease: dict[str, LeaseState] = {}
            block = True  # the last block and the kept nodes came, unless the head alone
            rows = reads.fetchall()
            for part, write in enumerate(folded):  # what the writes folded in changed
                if write.expected is not None and rows[0][part] != write.expected:
                    raise RetryTransaction(write.why)
            for (
                kind,
                a,
                b,
                step,
                state,
                hashed,
                node,
                record,
                revision,
                inbox,
                at,
                *until,
            ) in [row[counted:] for row in rows] if counted else rows:
                if kind == "pending":
                    pending.append(PendingEvent(a, step, state, record, revision, inbox))
                elif kind == "tail":
                    tail.append(LogEntry(a, step, state, hashed))
                elif kind == "node":
                    nodes[int(a), int(b)] = bytes(node)
                elif kind == "lease":
                    lease[step] = LeaseState(SEALER.kind, a, step, b, state, at, *until)
                elif kind == "head":  # where the connection's last append left it
                    tail.append(LogEntry(a, step, state, hashed))
                    block = False
                elif self._clock is None:
                    self._now = float(at)
            self._lease = lease
            self._pending = sorted(pending, key=lambda event: event.id)
            self._tail = sorted(tail, key=lambda entry: entry.seq)
            self._nodes = nodes
            self.log_block_at_hand = block

        if self._pipe is not None:
            take()
        return take

    def _known_end(self) -> tuple[int | None, str | None]:
        """Where the log ended after this connection's last committed append (its seq and
        chain hash), sent so that the server, finding the log still ending there, sends
        the head alone (migration 26): the kept edge rebuilds nothing, so nothing more of
        the log is read. None where no edge is kept, or one that lacks a node: an edge
        holds one node per bit set in the log's size, each a complete subtree (the
        engine's memo, engine/log.py); one begun on a log it did not read whole lacks
        some, and the block and nodes sent with the log's head fill them in."""
        memo = self.log_edge
        if memo is None or len(memo[2]) != int(memo[0]).bit_count():
            return None, None
        return memo[0], memo[1]

    def merkle_nodes(self, level: int, start: int, end: int) -> list[bytes]:
        nodes = self._nodes
        if all((level, i) in nodes for i in range(start, end)):
            return [nodes[level, i] for i in range(start, end)]
        return super().merkle_nodes(level, start, end)

    def pending_log(self, limit: int) -> list[PendingEvent]:
        if self._pending is not None and limit == SEAL_BATCH:
            pending, self._pending = self._pending, None
            own, self._own = self._own, []
            return pending + [PendingEvent(OWN_EVENTS + i, *e) for i, e in enumerate(own)]
        self._queue_own()
        return super().pending_log(limit)

    def log_head(self) -> LogEntry | None:
        if self._tail is not None:
            return self._tail[-1] if self._tail else None
        return super().log_head()

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        tail = self._tail
        if tail and tail[0].seq <= start:
            return [entry for entry in tail if start <= entry.seq < end]
        if tail is not None and not tail:  # the log was empty: only what this one appended
            return []
        return super().log_entries(start, end)

    def append_log(self, entries: Sequence[LogEntry]) -> None:
        self._seal.setdefault("append_log", []).extend(entries)
        if self._tail is not None:
            self._tail = [*self._tail, *entries]  # the tail stays the log's whole tail
