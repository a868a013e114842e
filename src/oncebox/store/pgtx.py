"""One PostgreSQL transaction, in as few round trips as its reads allow.

A write transaction (:meth:`PostgresStore.atomic`) runs in psycopg's pipeline mode: a
statement whose answer nobody reads yet is sent at once, not waited for, and the next
read (or the commit) collects every answer in one turn. So what costs a round trip is a
read the code needs before it can go on, and the store asks for those together:

- a decision's reads, all at once (:meth:`PostgresTx.decision_reads`): the inbox lock,
  the scopes' leases, the server clock, the batch's stored records and fresh ids for the
  identities not stored yet; the engine then decides in Python, and its writes go out
  together with the ``COMMIT``;
- a seal's reads, all at once, as it takes the log (:meth:`PostgresTx.read_for_seal`):
  the sealer's lease, the clock, the queue, the log's head with the entries of its last
  Merkle block and the kept nodes the appends hash with (the head alone where the log
  still ends where this connection's last append left it); a single delivery's in its own
  transaction, once its writes are sent; a batch's in the very round trip that commits
  the decision before it (:meth:`PostgresStore.sealing_next`);
- a check that must hold before the commit (a duplicate's record still there) waits
  for its count just before the ``COMMIT`` (:meth:`PostgresTx.expect`).

Each statement sent costs the client about as much as a small round trip (psycopg
handles each apart), so the store also sends few: a decision's inbox lock and what it
reads once the lock is held (the clock, the stored records, the fresh ids) are one
statement, and so are the log's lease and what a seal reads once it holds it: each a
call of a server-side function (``decision_reads_locked``, ``seal_reads_held``,
migration 24) whose queries after the lock take a new snapshot, as a statement of
their own would (a statement reads one snapshot, taken as it starts, so what must see
the state after a lock is granted cannot share the lock's statement). A lease-fenced
inbox, whose scopes' leases are held between the lock and the lookup, sends the three
apart (``decision_lookup`` the last). A relaxed beginning's ``SET LOCAL`` rides with
the inbox lock; a seal's four writes are held back and go as one statement
(``seal_writes``) with whatever is sent next (:mod:`oncebox.store.pgseal`); a
transaction's own log events are held back until its seal takes them or its commit
queues them; a batch's writes are one statement per table, an array per column, each
typed (:mod:`oncebox.store.pgarrays`), and the writes nobody reads back (the records,
the apply step's rows, the counts) are held and go together as one statement
(:mod:`oncebox.store.pgfold`): a single delivery's in the statement that takes the
log, run before it takes it.

An error in a pipeline fails the statements after it up to the next sync, ``COMMIT``
included, so nothing of a failed transaction commits; the store rolls it back and
retries it as it always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from oncebox.domain import (
    Fenced,
    LeaseState,
    Newcomer,
    NewRecordRow,
    Stored,
    StoredRow,
)
from oncebox.errors import RetryTransaction
from oncebox.store.pgarrays import TYPED
from oncebox.store.pgpipe import Q, _first
from oncebox.store.pgseal import SealingTx

RECORDS_IDENTITY = "records_one_per_identity"
BYTEA_COLUMN = TYPED["bytea"][0]  # a batch's identities, as decision_reads takes them


def lost_identity(exc: BaseException) -> bool:
    """Whether a concurrent writer inserted one of a batch's identities first."""
    return (
        isinstance(exc, pg_errors.UniqueViolation) and exc.diag.constraint_name == RECORDS_IDENTITY
    )


class PostgresTx(SealingTx):
    """The store interface over one connection inside one transaction."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        clock: Callable[[], float] | None,
        pipeline: psycopg.Pipeline | None = None,
        level: str = "on",
    ) -> None:
        super().__init__(conn, clock, pipeline, level)
        # A relaxed beginning's SET LOCAL, held back to ride with the next statement.
        self._relax_next = False

    # -- the clock and durability --------------------------------------------------------
    def relax_durability(self) -> None:
        """Begun relaxed (``atomic(..., durable=False)``): the commit will not wait. Sent
        with the decision's inbox lock where one follows (one statement fewer)."""
        self._relax_next = self.deferred = True

    def _settle(self) -> None:
        if self._relax_next:
            self._relax_next = False
            self._conn.execute(Q["defer_durability"].sql)
        super()._settle()

    def relax(self) -> bool:
        """Counts only: a server restart may lose them, so nothing need cover the commit."""
        if not self.deferred:
            self._send("defer_durability")
        self.deferred = self.relaxed = True
        return True

    # -- deciding ------------------------------------------------------------------------
    def decision_reads(
        self, inbox_id: int, idents: Sequence[bytes], scopes: Sequence[str] | None
    ) -> tuple[dict[str, LeaseState], float, dict[bytes, StoredRow], list[int] | None]:
        """Everything a decision reads, in one turn: the inbox's lock, the scopes'
        leases (held), then the clock, the stored records and a fresh id for each
        identity not stored. Read in this order, so no wait lets a stale time pass."""
        if self._pipe is None:
            return super().decision_reads(inbox_id, idents, scopes)
        if idents and scopes is None:  # the lock and the lookup: one statement
            relaxed, self._relax_next = self._relax_next, False
            reads = [inbox_id, BYTEA_COLUMN(idents), relaxed]  # one identity: a bytea
            lookup, held = self._send("decision_reads", reads), {}
        else:
            wanted = json.dumps([ident.hex() for ident in idents])
            self.lock_identities(inbox_id, idents)
            names = json.dumps(sorted(set(scopes))) if scopes else None
            leases = self._send("held_leases", (Fenced.SCOPE, inbox_id, names)) if names else None
            if not idents:
                sent = self._send("now") if self._clock is None else None
                held = self._leases(leases)
                return held, _first(sent) if sent is not None else self.now(), {}, []
            # The clock, the stored records, the fresh ids: one statement after the locks.
            lookup = self._send("decision_lookup", {"idents": wanted, "inbox": inbox_id})
            held = self._leases(leases)
        stored: dict[bytes, StoredRow] = {}
        new_ids: list[int] = []
        clock = 0.0
        for kind, *row in lookup.fetchall():
            if kind == "stored":
                stored[bytes(row[1])] = Stored._make(row)
            elif kind == "fresh":
                new_ids.append(int(row[0]))
            else:
                clock = float(row[5])
        new_ids.sort()  # ascending: new records take them in identity order
        return held, clock if self._clock is None else self.now(), stored, new_ids

    def _leases(self, sent: psycopg.Cursor[Any] | None) -> dict[str, LeaseState]:
        if sent is None:
            return {}
        return {row.name: row for row in self._shaped(sent, "held_leases", LeaseState)}

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        # One advisory lock per inbox: deciders take it shared, so they never queue for
        # each other here; adjudication takes it exclusive, so no resend decides against
        # a record while it is being revised (it waits for the batches in flight, and
        # the server queues new ones behind it). Deciders cannot deadlock on each other
        # without identity locks: what two of them can wait on each other for, they
        # write in one order (new records in identity order, quarantine rows, duplicate
        # counts, generations and verdict counters sorted, each kind at the same point
        # of the transaction). One that meets an identity another uncommitted batch is
        # inserting waits for that commit, then decides again against the row
        # (RetryTransaction).
        if idents and self._relax_next and not exclusive:
            self._relax_next = False  # its SET LOCAL rides with the lock
            self._send("lock_inbox_shared_relaxed", (inbox_id,))
        elif idents:
            self._send("lock_inbox" if exclusive else "lock_inbox_shared", (inbox_id,))

    def insert_records(self, inbox_id: int, records: Sequence[NewRecordRow], now: float,
                       positions: Mapping[int, int] | None = None) -> int:  # fmt: skip
        try:
            self._hold("insert_records", self._record_rows(inbox_id, records, now, positions))
        except pg_errors.UniqueViolation as exc:
            if not lost_identity(exc):
                raise
            # A concurrent writer inserted one of these identities first (the statement
            # waited for its commit): decide the batch again against its row. Not
            # chained: the driver error would otherwise decide what the caller sees.
            raise RetryTransaction("an identity of this batch was inserted meanwhile") from None
        # All or none: an identity inserted meanwhile fails the statement (in a pipeline,
        # at the commit's turn, where the store has it decided again).
        return len(records)

    def count_duplicates(self, repeats: Mapping[int, int], now: float) -> int:
        rows = [(record_id, n, now) for record_id, n in sorted(repeats.items())]
        self._counted("count_duplicates", rows)
        return len(rows)

    def count_late_replays(self, late: Mapping[int, tuple[int, float]], now: float) -> int:
        rows = [(record_id, n, now, most) for record_id, (n, most) in sorted(late.items())]
        self._counted("count_late_replays", rows)
        return len(rows)

    def _counted(self, name: str, rows: list[tuple[Any, ...]]) -> None:
        # A stored row that vanished between the read and the count (retention dropped a
        # tombstone meanwhile) has the batch decided again, checked before the commit.
        self._hold(name, rows, len(rows), "a record changed under this batch")

    def quarantine(
        self, inbox_id: int, newcomers: Sequence[Newcomer], reason: str, now: float
    ) -> list[tuple[int, bool]]:
        # In (identity, witness) order: concurrent batches that share newcomers wait on
        # each other's rows in one order, so they queue instead of deadlocking.
        order = sorted(
            range(len(newcomers)), key=lambda i: (newcomers[i].ident, newcomers[i].witness)
        )
        kept = super().quarantine(inbox_id, [newcomers[i] for i in order], reason, now)
        placed: list[tuple[int, bool]] = [(0, False)] * len(newcomers)
        for i, row in zip(order, kept, strict=True):
            placed[i] = row
        return placed

    def _remember_dropped(self, record_id: int) -> None:
        """Nothing to remember: the identity sequence never goes back."""

    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        # A fixed order: concurrent batches then lock the counter rows in the same order.
        rows = [(inbox_id, hour, v, r, n) for (v, r), n in sorted(counts.items())]
        self._send_many("count_verdicts", rows)
