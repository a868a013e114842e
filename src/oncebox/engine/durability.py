"""The durability step: how a write and the log entries it makes become durable with one
flush, so that a decision may be acknowledged only once both are (I2, I4).

Every write that matters goes through :func:`commit_sealed` (ingest, an operator's
resolution or replay, a lease, a reconciler's completion), and it is the one place that
says how, per backend:

- **One writer at a time (SQLite).** The log entries are appended inside the writing
  transaction itself: it holds the database's one write lock already, so appending costs
  no concurrency, and its one commit (one fsync in WAL mode with ``synchronous=FULL``)
  makes the change and its entries durable together. A crash leaves both or neither.
- **Many writers at once (PostgreSQL).** Writers must not queue for the log head, so the
  write only queues its events, and commits without waiting for the disk
  (``synchronous_commit = off``); the seal that follows appends the queued events under
  the sealer's lease and commits durably. The write-ahead log is one sequence, so that
  durable commit's flush covers the relaxed one before it: one flush for both. If the
  server restarted in between (the relaxed commit may be lost), the seal's commit refuses
  (:class:`~oncebox.errors.StorageUnavailable`) and nothing is acknowledged; the sender's
  retry is decided again. Between the two commits a crash can leave a record without its
  entry: recovery seals it (``recover``), so the log still covers every record.

A store opened with ``seal=False`` defers sealing to :meth:`oncebox.Oncebox.recover`: its
writes then commit durably on their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from oncebox.engine import crashpoints, sealing
from oncebox.store.base import Store, Tx

T = TypeVar("T")
Positions = dict[int, int]  # record id -> log position, for records sealed after the commit


def commit_sealed(
    store: Store, work: Callable[[Tx, bool], T], seal: bool = True, *, watched: bool = False
) -> tuple[T, Positions | None]:
    """Run ``work(tx, together)`` in a write transaction and make it, and the log events
    it writes, durable with one flush. ``together`` tells ``work`` to append its events
    to the log inside the transaction (where the store lets one writer in at a time);
    otherwise it queues them and they are sealed right after the commit, whose positions
    come back (None when they were appended in the transaction, or sealing is deferred).
    Returns only once everything is durable. A ``watched`` write (an ingest) passes the
    crash harness's points after its commit and after its seal
    (:mod:`oncebox.engine.crashpoints`)."""
    if not seal or store.single_writer:
        result = store.atomic(lambda tx: work(tx, seal))
        _reach(watched, crashpoints.AFTER_COMMIT)
        _reach(watched, crashpoints.AFTER_SEAL)
        return result, None
    result = store.atomic(lambda tx: work(tx, False), durable=False)
    _reach(watched, crashpoints.AFTER_COMMIT)
    sealed = sealing.seal_now(store, durable_point=True)
    _reach(watched, crashpoints.AFTER_SEAL)
    return result, {p.record_id: e.seq for p, e in sealed if p.record_id}


def _reach(watched: bool, point: str) -> None:
    if watched:
        crashpoints.reach(point)
