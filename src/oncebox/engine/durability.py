"""The durability step: how a write and the log entries it makes become durable with one
flush, so that a decision may be acknowledged only once both are (I2, I4).

Every write that matters goes through :func:`commit_sealed` (ingest, an operator's
resolution or replay, a lease, a reconciler's completion), and it is the one place that
says how, per backend:

- **One writer at a time (SQLite).** The log entries are appended inside the writing
  transaction itself: it holds the database's one write lock already, so appending costs
  no concurrency, and its one commit (one fsync in WAL mode with ``synchronous=FULL``)
  makes the change and its entries durable together. A crash leaves both or neither.
- **Many writers at once (PostgreSQL).** Writers must not queue for the log head while
  they decide, so the write only queues its events. A single delivery then takes the
  log last, after every row it locks, appends the queue and commits once, durably. A
  batch commits without waiting for the disk (``synchronous_commit = off``), letting go
  of the rows it locked, which the batches of other processes share (the apply step's
  keys); the seal that follows appends the queued events under the sealer's lease and
  commits durably. The write-ahead log is one sequence, so that
  durable commit's flush covers the relaxed one before it: one flush for both. If the
  server restarted or recovered from a crash in between (the relaxed commit may be
  lost), the seal's commit refuses (:class:`~oncebox.errors.StorageUnavailable`) and
  nothing is acknowledged; the sender's retry is decided again. Between the two commits
  a crash can leave a record without its entry: recovery seals it (``recover``), so the
  log still covers every record.

A store opened with ``seal=False`` defers sealing to :meth:`oncebox.Oncebox.recover`: its
writes then commit durably on their own.

**Counts need no flush.** A write that turns out to be nothing but counts (a duplicate's
seen count and last seen, a late replay's, the verdict counters) commits without waiting
for the disk and is acknowledged at once (:class:`Light`): a process crash loses nothing
of it, and a power cut (a server crash on PostgreSQL) can only take back counts made
since the last flush, never a record, an effect, a dead letter, a log entry or a lease.
What it decided against must already be durable, which is why a duplicate is counted
this way only when its record is sealed (on PostgreSQL a record is visible between its
relaxed commit and its seal's flush). PostgreSQL relaxes the transaction once the
decision knows (``SET LOCAL synchronous_commit``). SQLite cannot change the level
inside a transaction, so a write begins at the level its caller guesses (an ingest: the
one its inbox's last batch in this process needed), and the decision, which holds the
write lock, refuses before it writes if the guess was wrong; it then runs at the other.

Why not commit relaxed on SQLite and sync afterwards where the decision wrote more than
counts? SQLite has no call that syncs the WAL alone: it would take a second, durable
write transaction after every accepted delivery (more pages, and a lock taken twice),
and between the two commits other connections (the feed, forwarders, the console) would
already see a record that a power cut could still take back, which on SQLite nothing
does today. A wrong guess costs the batch's lookup twice (and a transaction begun and
rolled back), never a flush; a stream of new deliveries or of duplicates guesses right.
Guessing from a read before the transaction instead would cost every batch that lookup
twice.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import TypeVar

from oncebox.engine import crashpoints, sealing
from oncebox.store.base import Store, Tx, WrongLevel

T = TypeVar("T")
Positions = dict[int, int]  # record id -> log position, for records sealed after the commit


# How a write says it may be nothing but counts: ``(work, counted, likely)``.
# ``work(together, counts_only, tx)`` is the write itself, its transaction last so that a
# partial binds the rest (a closure or keywords cost an ingest more); with
# ``counts_only`` True it raises :class:`~oncebox.store.base.WrongLevel` before writing
# where it would write more, with False where it would write only counts (None:
# neither). ``counted`` tells whether a finished work wrote nothing but counts;
# ``likely`` guesses it beforehand. A plain tuple, one made per ingest: a named tuple's
# construction cost a single delivery more than the tuple's use.
Light = tuple[Callable[[bool, bool | None, Tx], T], Callable[[T], bool], bool]


def commit_sealed(
    store: Store,
    work: Callable[[Tx, bool], T] | None,
    seal: bool = True,
    *,
    watched: bool = False,
    light: Light[T] | None = None,
    alone: bool = False,
) -> tuple[T, Positions | None]:
    """Run ``work(tx, together)`` in a write transaction and make it, and the log events
    it writes, durable with one flush. ``together`` tells ``work`` to append its events
    to the log inside the transaction (where the store lets one writer in at a time);
    otherwise it queues them and they are sealed right after the commit, whose positions
    come back (None when they were appended in the transaction, or sealing is deferred).
    Returns only once everything is durable, except counts where ``light`` (then used
    instead of ``work``, which may be None) found the write was nothing but counts. A
    ``watched`` write (an ingest) passes the crash harness's points after its commit
    and after its seal (:mod:`oncebox.engine.crashpoints`). An ``alone`` write (a single
    delivery) is sealed in its own transaction where the store has many writers
    (:func:`_sealed_in_place`); a batch's seal stays a transaction of its own, so that
    the rows it locks are let go before it waits for the log."""
    if (not seal or store.single_writer) and light is not None and not store.relaxes_late:
        # SQLite's usual ingest, first: it makes no closure and no flag it does not use.
        result = _chosen_up_front(store, light, seal)
        if watched and crashpoints.ARMED:
            crashpoints.reach(crashpoints.AFTER_COMMIT)
            crashpoints.reach(crashpoints.AFTER_SEAL)
        return result, None
    return _committed(store, work, seal, watched, light, alone)


def _committed(
    store: Store,
    work: Callable[[Tx, bool], T] | None,
    seal: bool,
    watched: bool,
    light: Light[T] | None,
    alone: bool,
) -> tuple[T, Positions | None]:
    """:func:`commit_sealed` but for SQLite's usual ingest: a function of its own, since
    the closures here make a cell of each name they share on every call of the function
    that holds them, which cost that ingest more than its own steps."""
    relaxed = [False]

    def run(tx: Tx, together: bool) -> T:
        if light is None:
            assert work is not None
            return work(tx, together)
        light_work, counted, _ = light
        result = light_work(together, None, tx)
        relaxed[0] = counted(result) and tx.relax()  # False where it began flushed
        return result

    if not seal or store.single_writer:
        result = store.atomic(lambda tx: run(tx, seal))
        if watched:
            crashpoints.reach(crashpoints.AFTER_COMMIT)
            crashpoints.reach(crashpoints.AFTER_SEAL)
        return result, None
    if alone:
        return _sealed_in_place(store, run, relaxed, watched)
    # PostgreSQL opens the seal's transaction in the commit's own round trip.
    with getattr(store, "sealing_next", nullcontext)():
        result = store.atomic(lambda tx: run(tx, False), durable=False)
        _reach(watched, crashpoints.AFTER_COMMIT)
        if relaxed[0]:  # counts only: nothing queued to seal, nothing to make durable
            _reach(watched, crashpoints.AFTER_SEAL)
            return result, None
        sealed = sealing.seal_now(store, durable_point=True)
    _reach(watched, crashpoints.AFTER_SEAL)
    return result, sealing.positions(sealed)


def _sealed_in_place(
    store: Store, run: Callable[[Tx, bool], T], relaxed: list[bool], watched: bool
) -> tuple[T, Positions | None]:
    """One transaction for the write and its seal, where many writers share the store:
    the write queues its events as any other, then, last, takes the log and appends the
    queue, its own events included, and commits once. Begun relaxed, so that counts
    alone commit without a flush; taking the log makes the commit durable again (the
    store's part: an append never commits relaxed). The log is taken after every other
    row this transaction locks, so its holder waits for no other writer, and it is held
    from the seal's reads to the commit, as a seal of its own would hold it."""

    def sealed(tx: Tx) -> tuple[T, sealing.Sealed]:
        result = run(tx, False)
        return result, [] if relaxed[0] else sealing.seal_in_place(tx)

    result, appended = store.atomic(sealed, durable=False)
    _reach(watched, crashpoints.AFTER_COMMIT)
    _reach(watched, crashpoints.AFTER_SEAL)
    if relaxed[0]:
        return result, None
    return result, sealing.positions(appended)


def _chosen_up_front(store: Store, light: Light[T], seal: bool) -> T:
    """Where a transaction's level is fixed before it begins (SQLite) and no seal follows
    its commit. Begin at the level the light's ``likely`` guesses; a work at the wrong one
    refuses before writing (it holds the write lock, so what it read is what it would
    have written against), and runs again at the other. If the store changed in
    between, a third run takes the flush whatever it writes."""

    # Partials, not closures: one is made per ingest, and a closure costs several times more.
    work, _, likely = light
    try:
        return store.atomic(partial(work, seal, likely), durable=not likely)
    except WrongLevel:
        pass
    try:
        return store.atomic(partial(work, seal, not likely), durable=likely)
    except WrongLevel:
        return store.atomic(partial(work, seal, None))


def _reach(watched: bool, point: str) -> None:
    if watched:
        crashpoints.reach(point)
