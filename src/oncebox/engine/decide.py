"""The one decision path: prepared deliveries decided together, in one transaction.

A single delivery is a batch of one; there is no second path to keep in step. Inside
the transaction, in the ingest order (docs/concepts.md#ingest-order):

1. hold what the batch decides against (identity locks, the scopes' leases), and only
   then read the server clock, so that no wait can let a stale time pass;
2. fence each delivery of a lease-fenced inbox against its scope's lease, the invalid
   ones too: without the current lease nothing is stored, not even a dead letter;
3. read the batch's stored records, all at once;
4. walk the deliveries in order (:class:`Walk`, pure): each one's verdict against what is
   stored and what the deliveries before it in the batch left, exactly as deciding them
   one by one would give;
5. write what the walk decided with one statement per kind (dead letters, quarantine,
   duplicate counts, log events, records, the apply step's effects, verdict counts).

Invalid input never reaches dedup state (ingest order, step 2), and a fenced-out delivery
stores nothing at all, valid or not, so it must not be acknowledged (step 3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, Protocol

from oncebox.domain import CONFLICT_REASON, LogEvent, NewRecordRow, StoredRow, Verdict
from oncebox.engine import crashpoints, fence, log, outbox, replay, sealing
from oncebox.engine.apply import apply_new
from oncebox.engine.counting import counted, heavier, verdict_counts
from oncebox.engine.decided import Decided, Repeated
from oncebox.engine.ingest import ActiveInbox, Prepared
from oncebox.engine.step import Change, NoEffect
from oncebox.engine.walk import Outcome, Walk
from oncebox.errors import RetryTransaction
from oncebox.store.base import Deciding, DecidingAtOnce, Outbox, Sealing, StepTx, WrongLevel
from oncebox.store.letters import Retrying

# Built from all their fields at C speed (a named tuple's own __new__ is Python).
_outcome = partial(tuple.__new__, Outcome)
_event = partial(tuple.__new__, LogEvent)
_IDENT = itemgetter(4)  # a Prepared's ident
# The verdicts as plain names (see oncebox.engine.walk); ``.value`` is a Python property.
_ACCEPTED, _DUPLICATE, _CONFLICT = Verdict.ACCEPTED, Verdict.DUPLICATE, Verdict.CONFLICT
_DUPLICATE_VALUE = _DUPLICATE.value


class DecisionTx(DecidingAtOnce, Deciding, Sealing, Retrying, StepTx, Outbox, Protocol):
    """What deciding a batch takes of its transaction: the decision path's own port, the
    log (its entries, sealed in the same transaction where the store allows) with the
    fence, the dead letters a delivery again comes from, what the inbox's apply step
    writes with, and the outbox its accepted records' forwards are written to."""


def decide_batch(
    tx: DecisionTx,
    inbox: ActiveInbox,
    items: Sequence[Prepared],
    seal: bool,
    again: replay.Replay = replay.LINES,
    counts_only: bool | None = None,
) -> Decided | Repeated:
    """Decide ``items`` inside ``tx``, writing everything the decisions need.

    With ``seal``, the log entries are appended in this very transaction where the log
    is free (see :func:`sealing.record_events`). Raises :class:`RetryTransaction` when
    another writer changed a record this batch read (possible on PostgreSQL only); the
    store then runs the whole work again. A delivery that names a dead letter of this
    inbox delivers it again (``again`` says who and why; see :mod:`oncebox.engine.replay`).
    ``counts_only`` True / False: :class:`WrongLevel`, nothing written, unless it is / isn't.
    """
    inbox_id = inbox.row.id
    if len(items) == 1:  # a single delivery's: no generator to run and dictionary to fill
        idents = [] if items[0].ident is None else [items[0].ident]
    else:
        # Each identity once, in order, at C speed (a refused delivery's None dropped).
        distinct = dict.fromkeys(map(_IDENT, items))
        distinct.pop(None, None)
        idents = list(distinct)
    # Steps 1 to 3's reads at once (on PostgreSQL in one round trip).
    scopes = [item.delivery.snapshot_id or "" for item in items] if inbox.row.fenced else None
    current, now, found, fresh = tx.decision_reads(inbox_id, idents, scopes)
    if len(items) == 1 and scopes is None and counts_only is not False:
        seen = found.get(items[0].ident) if items[0].ident is not None else None
        if seen is not None and _plain_repeat(items[0], seen):
            return _one_duplicate(tx, inbox, items[0], seen, now)
    fenced: dict[int, str] = {}
    if scopes is not None:
        # Every delivery is fenced, valid or not: a sender without the scope's current
        # lease stores nothing at all, not even a dead letter.
        for index, item in enumerate(items):
            lease = current.get(item.delivery.snapshot_id or "")
            refused = fence.refused(lease, item.delivery.lease_token, now)
            if refused is not None:
                fenced[index] = refused
    # The identities decided against what is stored, each once: without a fence, those
    # read, and the stored records all those found (a store finds only what it was asked).
    if fenced:
        unfenced = (item.ident for i, item in enumerate(items) if i not in fenced)
        wanted = [ident for ident in dict.fromkeys(unfenced) if ident]
        stored = {ident: found[ident] for ident in wanted if ident in found}
    else:
        wanted, stored = idents, found
    if counts_only is not None and counts_only == heavier(items, stored, fenced):
        raise WrongLevel(f"the batch is {'not ' if counts_only else ''}only duplicates")
    unknown = len(wanted) - len(stored)
    # A single delivery naming no dead letter delivers none again (what held finds).
    single_plain = len(items) == 1 and items[0].delivery.dead_letter is None
    retried = {} if single_plain else replay.held(tx, inbox_id, items)
    if fresh is None or len(fresh) < unknown:  # read apart, or a writer got in between
        fresh = tx.reserve_record_ids(unknown) if unknown else []
    walk = Walk(stored, fresh, retried)
    walk.walk(items, fenced, now)
    if counts_only and not counted(walk):  # a delivery again from a dead letter
        raise WrongLevel("the batch would write more than counts")
    return _write(tx, inbox, walk, now, seal, again)


def decide_items(
    inbox: ActiveInbox,
    items: Sequence[Prepared],
    together: bool,
    counts_only: bool | None,
    tx: DecisionTx,
) -> Decided | Repeated:
    """:func:`decide_batch` with the transaction last, as the durability step calls it
    (the work of a :data:`~oncebox.engine.durability.Light`): a partial over the batch
    then costs an ingest less than a closure would."""
    return decide_batch(tx, inbox, items, together, counts_only=counts_only)


def _plain_repeat(item: Prepared, seen: StoredRow) -> bool:
    """Whether ``item`` repeats ``seen`` as a plain duplicate: the same content, of a
    record still kept and already sealed, not delivered again from a dead letter."""
    _, _, witness, _, evicted_at, _, log_seq = seen
    return (
        witness == item.witness
        and evicted_at is None
        and log_seq is not None
        and item.delivery.dead_letter is None
    )


def _one_duplicate(
    tx: DecisionTx, inbox: ActiveInbox, item: Prepared, seen: StoredRow, now: float
) -> Repeated:
    """A single delivery that is a plain duplicate (:func:`_plain_repeat`) of an unfenced
    inbox: what the walk and :func:`_write` decide and write for it, its two counts,
    without a walk or a batch's bookkeeping (checked against them in
    tests/test_cpu_fast_paths.py and tests/test_single_round_six.py)."""
    if tx.count_duplicates({seen[0]: 1}, now) != 1:  # its record's id, counted once
        raise RetryTransaction("a record changed under this batch")
    tx.count_verdicts(inbox.row.id, int(now // 3600), {(_DUPLICATE_VALUE, ""): 1})
    return Repeated(inbox.name, item, seen)


def _write(
    tx: DecisionTx, inbox: ActiveInbox, walk: Walk, now: float, seal: bool, again: replay.Replay
) -> Decided:
    """Step 5: every write of the batch, one statement per kind."""
    inbox_id, name = inbox.row.id, inbox.name
    letter_ids = tx.dead_letter(inbox_id, walk.letters, now) if walk.letters else []
    kept = tx.quarantine(inbox_id, walk.newcomers, CONFLICT_REASON, now) if walk.newcomers else []

    # The log events, in delivery order: each new record's seal and each newcomer's first
    # quarantine (its repeats in the batch only count). Sealed in this transaction where
    # the backend lets the writer append; queued for the sealer otherwise.
    opened: set[int] = set()
    records = walk.records
    states = log.first_revision_states(name, records) if records else []
    if not (walk.newcomers or walk.retried):
        events = _seal_events(inbox_id, records, states)
    else:
        events = _events(tx, inbox_id, name, walk, states, kept, opened, now, again)
    positions = sealing.record_events(tx, events, seal) if events else {}

    if records:
        if crashpoints.ARMED:
            crashpoints.reach(crashpoints.BEFORE_INSERT)
        # Where their seals were appended in this transaction, the records keep their place.
        if tx.insert_records(inbox_id, records, now, positions or None) != len(records):
            # A concurrent writer inserted one of these identities first.
            raise RetryTransaction("an identity of this batch was inserted meanwhile")
        _apply(tx, inbox, walk)
        # What the new records owe downstream commits with them (none without destinations).
        if inbox.forward:
            outbox.enqueue(tx, inbox, [(r[0], 1, r[2]) for r in records], now)  # id, identity
        if crashpoints.ARMED:
            crashpoints.reach(crashpoints.AFTER_INSERT)
    # Counted after the inserts: a repeat of a record this batch inserted counts on it.
    if walk.repeats and tx.count_duplicates(walk.repeats, now) != len(walk.repeats):
        # A stored row vanished between the read and the count (retention dropped a
        # tombstone meanwhile): decide the batch again against what is there now.
        raise RetryTransaction("a record changed under this batch")
    if walk.late and tx.count_late_replays(walk.late, now) != len(walk.late):
        raise RetryTransaction("a record changed under this batch")
    tx.count_verdicts(inbox_id, int(now // 3600), verdict_counts(walk))
    return Decided(name, walk, kept, letter_ids, opened, positions)


def _seal_events(
    inbox_id: int, records: Sequence[NewRecordRow], states: Sequence[str]
) -> list[LogEvent]:
    """The log events of a batch whose only events are its new records' seals (no
    newcomer, no delivery again): one a record, in their deliveries' order, which is the
    records' own; made at C speed, without the loop over every outcome that
    :func:`_events` runs (checked against it in tests/test_cpu_round_four.py)."""
    events = zip(repeat("accept"), states, map(itemgetter(0), records), repeat(1), repeat(inbox_id))
    return list(map(tuple.__new__, repeat(LogEvent), events))


def _events(
    tx: DecisionTx,
    inbox_id: int,
    name: str,
    walk: Walk,
    states: Sequence[str],
    kept: Sequence[tuple[int, bool]],
    opened: set[int],
    now: float,
    again: replay.Replay,
) -> list[LogEvent]:
    """A batch's log events, in delivery order: each new record's seal (its state text
    in ``states``, by row), each newcomer's first quarantine (its repeats in the batch
    only count; ``opened`` gets the outcomes that opened one) and each delivery again's
    settling of the dead letter it came from."""
    events: list[LogEvent] = []
    first_rows: set[int] = set()
    tried: dict[int, int] = {}  # dead letter id -> its deliveries again so far in the batch
    decided: set[int] = set()  # dead letters an earlier delivery again decided (replayed)
    for index, outcome in enumerate(walk.outcomes):
        if outcome.verdict is _ACCEPTED:
            record = walk.records[outcome.row]
            events.append(_event(("accept", states[outcome.row], record[0], 1, inbox_id)))
        elif (
            outcome.verdict is _CONFLICT and kept[outcome.row][1] and outcome.row not in first_rows
        ):
            first_rows.add(outcome.row)
            opened.add(index)
            events.append(LogEvent("quarantine", _quarantine_state(name, walk, outcome, kept)))
        if index in walk.retried:
            letter, settled = walk.retried[index], _settled(walk, outcome, kept)
            # One named again earlier in the batch: this attempt comes after that one's,
            # as one by one (the row was read once, before the batch's first attempt).
            before = tried.get(letter.id, 0)
            tried[letter.id] = before + 1
            if before:
                letter = dataclasses.replace(letter, attempts=letter.attempts + before)
                if letter.id in decided:  # replayed by that attempt: not opened again
                    letter = dataclasses.replace(letter, replayed_at=now)
            if settled.verdict is not Verdict.REJECTED:
                decided.add(letter.id)
            events.append(replay.settle(tx, name, letter, outcome.item, settled, now, again))
    return events


def _quarantine_state(
    name: str, walk: Walk, outcome: Outcome, kept: Sequence[tuple[int, bool]]
) -> str:
    newcomer = walk.newcomers[outcome.row]
    return log.state_text(
        {
            "inbox": name,
            "quarantine": kept[outcome.row][0],
            "record": newcomer.record_id,
            "identity": newcomer.identity,
            "witness": newcomer.witness.hex(),
            "reason": CONFLICT_REASON,
        }
    )


def _settled(walk: Walk, outcome: Outcome, kept: Sequence[tuple[int, bool]]) -> replay.Settled:
    """What a delivery again was decided as, for the dead letter it came from."""
    verdict, accepted = outcome.verdict, outcome.verdict is Verdict.ACCEPTED
    seen = outcome.seen
    record = walk.records[outcome.row][0] if accepted else None if seen is None else seen[0]
    quarantined = kept[outcome.row][0] if verdict is Verdict.CONFLICT else None
    return replay.Settled(verdict, outcome.reason, record, quarantined)


def _apply(tx: StepTx, inbox: ActiveInbox, walk: Walk) -> None:
    """The apply step for every new record, in the deciding transaction (I5), the whole
    batch at once (:func:`~oncebox.engine.apply.apply_new`)."""
    if type(inbox.apply) is NoEffect:
        return  # keeps the record only: no change to build for it
    name, inbox_id = inbox.name, inbox.row.id
    changes = [
        Change(name, inbox_id, record_id, identity, 1, _fields(walk.outcomes[i].item))
        for (record_id, _, identity, *_), i in zip(walk.records, walk.firsts, strict=True)
    ]
    apply_new(tx, inbox, changes, walk.firsts)


def _fields(item: Prepared) -> Mapping[str, Any]:
    assert item.decoded is not None
    return item.decoded.fields
