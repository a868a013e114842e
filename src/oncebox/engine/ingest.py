"""The ingest pipeline, in DESIGN.md's order: bound, decode, identify, decide, commit.

Everything before the transaction is pure (:func:`prepare`); everything inside it goes
through the store interface (:func:`decide`). Invalid input never reaches dedup state,
so a later valid copy of the same identity still applies (seed 003, R1).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from oncebox.engine import crashpoints, leases, log
from oncebox.engine.apply import BATCHED, ApplyStep, Change, FirstRevision
from oncebox.engine.decision import (
    CONFLICT_REASON,
    LATE_REPLAY,
    Decision,
    Verdict,
    classify,
    decision_of,
)
from oncebox.errors import ApplyError, StorageUnavailable
from oncebox.formats import Codec, Decoded, Delivery, Identity, Invalid, Unreadable, identify
from oncebox.formats.jsontext import compact_encoder
from oncebox.store.base import Arrival, InboxRow, NewRecord, RecordRow, Tx

# Queues one log event: (step, state text, record id).
Queue = Callable[[str, str, "int | None"], object]

logger = logging.getLogger("oncebox")

DEAD_LETTER_HEAD = 65_536


@dataclass(frozen=True)
class ActiveInbox:
    """A declared inbox with its codec and apply step resolved."""

    row: InboxRow
    codec: Codec
    apply: ApplyStep

    @property
    def name(self) -> str:
        return self.row.name


class Prepared(NamedTuple):
    """One delivery after the pure steps: decoded and identified, or refused.

    ``ident`` (the identity's SHA-256, what stores key records by) and ``witness`` (the
    witness as bytes) are computed here, once per delivery. A named tuple: one is built
    per delivery, and a frozen dataclass costs several times more to build.
    """

    delivery: Delivery
    decoded: Decoded | None = None
    identity: Identity | None = None
    invalid: Invalid | None = None
    ident: bytes | None = None
    witness: bytes | None = None


def prepare(codec: Codec, delivery: Delivery) -> Prepared:
    """Bound the raw size, then decode, validate and identify; never touches storage."""
    if len(delivery.body) > codec.max_bytes:
        invalid = Invalid("too_large", f"{len(delivery.body)} bytes exceeds {codec.max_bytes}")
        return Prepared(delivery, invalid=invalid)
    if isinstance(delivery, Unreadable):  # its transport adapter could not read it
        return Prepared(delivery, invalid=Invalid("bad_format", delivery.detail))
    try:
        decoded = codec.decode(delivery)
        identity = identify(codec, decoded)
    except Invalid as invalid:
        return Prepared(delivery, invalid=invalid)
    except Exception as exc:  # a user codec's bug must not lose the delivery
        return Prepared(delivery, invalid=Invalid("codec_error", f"{type(exc).__name__}: {exc}"))
    witness = bytes.fromhex(identity.witness)
    return Prepared(delivery, decoded, identity, None, identity.digest_bytes, witness)


_NO_ARRIVAL = Arrival()


def _arrival(delivery: Delivery) -> Arrival:
    facts = (delivery.device_time, delivery.snapshot_id, delivery.delivery_id)
    if facts == (None, None, None):
        return _NO_ARRIVAL  # the common case; Arrival is immutable, so one serves all
    return Arrival(*facts)


_FIELDS_ENCODE = compact_encoder(sort_keys=True, ensure_ascii=True)


def _fields_json(decoded: Decoded) -> str:
    fields = decoded.fields
    return _FIELDS_ENCODE(fields if type(fields) is dict else dict(fields))


def _reject(tx: Tx, inbox: ActiveInbox, item: Prepared, now: float) -> Decision:
    """Step 2's refusal: a bounded dead letter, nothing in dedup state."""
    delivery = item.delivery
    invalid = item.invalid or Invalid("bad_format")
    letter = tx.dead_letter(
        inbox.row.id,
        invalid.reason,
        invalid.detail,
        delivery.body[:DEAD_LETTER_HEAD],
        len(delivery.body),
        hashlib.sha256(delivery.body).hexdigest(),
        delivery.key,
        _arrival(delivery),
        now,
    )
    return Decision(
        inbox.name,
        Verdict.REJECTED,
        False,
        reason=invalid.reason,
        detail=invalid.detail,
        identity=delivery.key,
        dead_letter_id=letter,
    )


def decide(tx: Tx, inbox: ActiveInbox, item: Prepared, now: float, index: int = 0) -> Decision:
    """Decide one prepared delivery inside an open transaction."""
    if item.invalid is not None or item.decoded is None or item.identity is None:
        return _reject(tx, inbox, item, now)
    delivery = item.delivery
    if inbox.row.fenced:
        # Step 3, fence: the scope's current token, then the server clock's verdict on
        # its expiry. A fenced-out delivery is not stored, so it must not be acked.
        lease = tx.get_lease(inbox.row.id, delivery.snapshot_id or "")
        # The clock is read after the lease row is held: a wait for locks must not let
        # an expired lease pass on a time taken before the wait.
        refused = leases.fence(lease, delivery.lease_token, tx.now())
        if refused is not None:
            return Decision(
                inbox.name,
                Verdict.REJECTED,
                False,
                reason=refused,
                detail=_fence_detail(refused, delivery, lease),
            )

    # A row can vanish under us (retention dropping a tombstone in another transaction);
    # then the identity is simply decided again against what is there now.
    for _ in range(3):
        decision = _decide_identity(tx, inbox, item, now, index)
        if decision is not None:
            return decision
    raise StorageUnavailable("the record kept changing under this delivery; retry")


def _decide_identity(
    tx: Tx, inbox: ActiveInbox, item: Prepared, now: float, index: int
) -> Decision | None:
    delivery = item.delivery
    assert item.decoded is not None and item.identity is not None
    assert item.ident is not None and item.witness is not None
    identity, decoded, ident, witness = item.identity, item.decoded, item.ident, item.witness
    existing = tx.find_record(inbox.row.id, ident)
    if existing is None:
        crashpoints.reach(crashpoints.BEFORE_INSERT)
        record_id = tx.insert_record(
            inbox.row.id,
            ident,
            identity.identity,
            witness,
            decoded.content,
            _fields_json(decoded),
            _arrival(delivery),
            now,
        )
        if record_id is not None:
            return _accept(tx, inbox, item, record_id, index)
        # A concurrent writer inserted this identity between our read and our insert;
        # its row is committed now, so decide against it like any other.
        existing = tx.find_record(inbox.row.id, ident)
        if existing is None:
            return None
    return _against(tx, inbox, item, existing, now, tx.queue_log)


def _against(
    tx: Tx,
    inbox: ActiveInbox,
    item: Prepared,
    existing: RecordRow,
    now: float,
    queue: Queue,
    repeats: Counter[int] | None = None,
) -> Decision | None:
    """Decide a delivery whose identity is stored: duplicate, late replay or conflict.
    None when the row vanished meanwhile (decide it again). With ``repeats``, a plain
    duplicate is counted there for the caller to write with its batch."""
    assert item.decoded is not None and item.identity is not None
    assert item.ident is not None and item.witness is not None
    identity, decoded, delivery = item.identity, item.decoded, item.delivery
    ident, witness = item.ident, item.witness
    facts: dict[str, Any] = {"identity": identity.identity, "witness": identity.witness}
    verdict = classify(existing.witness, witness)

    if verdict is Verdict.DUPLICATE:
        if existing.is_tombstone:
            # A resend from beyond the retention window: recognised by its tombstone,
            # never applied again.
            if not tx.touch_late_replay(existing.id, now, now - existing.first_seen):
                return None
            return Decision(
                inbox.name,
                verdict,
                False,
                reason=LATE_REPLAY,
                record_id=existing.id,
                revision=existing.revision,
                late_replay=True,
                log_position=existing.log_seq,
                **facts,
            )
        if repeats is not None:
            repeats[existing.id] += 1
        elif not tx.touch_duplicate(existing.id, now):
            return None
        return decision_of(
            inbox.name,
            verdict,
            identity=identity.identity,
            witness=identity.witness,
            record_id=existing.id,
            revision=existing.revision,
            log_position=existing.log_seq,
        )

    # Conflict: first write wins. The record and its effects stay exactly as they are;
    # the newcomer is kept for an operator, never merged and never dropped.
    quarantine_id, is_new = tx.quarantine(
        inbox.row.id,
        ident,
        identity.identity,
        existing.id,
        witness,
        decoded.content,
        _fields_json(decoded),
        CONFLICT_REASON,
        _arrival(delivery),
        now,
    )
    if is_new:
        state = {
            "inbox": inbox.name,
            "quarantine": quarantine_id,
            "record": existing.id,
            "identity": identity.identity,
            "witness": identity.witness,
            "reason": CONFLICT_REASON,
        }
        queue("quarantine", log.state_text(state), None)
    return Decision(
        inbox.name,
        verdict,
        False,
        reason=CONFLICT_REASON,
        record_id=existing.id,
        revision=existing.revision,
        quarantine_id=quarantine_id,
        first_quarantine=is_new,
        late_replay=existing.is_tombstone,
        log_position=existing.log_seq,
        **facts,
    )


def _accept(tx: Tx, inbox: ActiveInbox, item: Prepared, record_id: int, index: int) -> Decision:
    """Run the apply step in the deciding transaction and queue the record's seal."""
    decision = _accepted(inbox, item, record_id, tx.queue_log)
    _apply(tx, inbox, _change(inbox, item, record_id), index)
    crashpoints.reach(crashpoints.AFTER_INSERT)
    return decision


def _change(inbox: ActiveInbox, item: Prepared, record_id: int) -> Change:
    """What the apply step gets for a new record."""
    assert item.decoded is not None and item.identity is not None
    return Change(
        inbox.name, inbox.row.id, record_id, item.identity.identity, 1, item.decoded.fields
    )


def _accepted(inbox: ActiveInbox, item: Prepared, record_id: int, queue: Queue) -> Decision:
    """A new record's decision; queues its seal."""
    assert item.identity is not None
    identity = item.identity.identity
    witness = item.identity.witness
    state = log.record_state_text(
        inbox.name, record_id, identity, witness, 1, item.delivery.snapshot_id
    )
    queue("accept", state, record_id)
    return decision_of(
        inbox.name,
        Verdict.ACCEPTED,
        identity=identity,
        witness=witness,
        record_id=record_id,
        revision=1,
    )


def _apply(tx: Tx, inbox: ActiveInbox, change: Change, index: int) -> None:
    try:
        inbox.apply(tx, change)
    except Exception as exc:
        raise ApplyError(
            f"inbox {inbox.name}: apply step failed on delivery {index}: "
            f"{type(exc).__name__}: {exc}",
            index=index,
        ) from exc


def alert(decisions: list[Decision]) -> None:
    """Tell operators about new conflicts, once they are committed."""
    for d in decisions:
        if d.first_quarantine:
            logger.warning(
                "oncebox conflict: inbox=%s identity=%s record=%s quarantine=%s",
                d.inbox,
                d.identity,
                d.record_id,
                d.quarantine_id,
            )


def decide_all(tx: Tx, inbox: ActiveInbox, items: list[Prepared], now: float) -> list[Decision]:
    """Decide many in one transaction, in order, exactly as one by one would."""
    idents = [item.ident for item in items]
    tx.lock_identities(inbox.row.id, [ident for ident in idents if ident is not None])
    if inbox.row.fenced:
        # Each delivery answers to its scope's lease at the moment it is decided.
        decisions = [decide(tx, inbox, item, now, index) for index, item in enumerate(items)]
    else:
        decisions = _decide_batch(tx, inbox, items, idents, now)
    counts = Counter([(str(d.verdict), d.reason or "") for d in decisions])
    tx.count_verdicts(inbox.row.id, int(now // 3600), dict(counts))
    return decisions


def _decide_batch(
    tx: Tx, inbox: ActiveInbox, items: list[Prepared], idents: list[bytes | None], now: float
) -> list[Decision]:
    """:func:`decide` for a whole batch in a few statements instead of several per
    delivery: the batch's stored records are read at once, its new identities inserted
    at once (in delivery order, so ids come out as one by one would give them), and the
    built-in apply steps and log events written at once. Duplicates, conflicts and
    refusals still take the one-by-one path."""
    known = tx.find_records(inbox.row.id, list({i for i in idents if i is not None}))
    firsts: dict[bytes, int] = {}
    for index, ident in enumerate(idents):
        if ident is not None and ident not in known and ident not in firsts:
            firsts[ident] = index
    news = {ident: _new_record(items[index], ident) for ident, index in firsts.items()}
    inserted: dict[bytes, int] = {}
    if news:
        crashpoints.reach(crashpoints.BEFORE_INSERT)
        inserted = tx.insert_records(inbox.row.id, list(news.values()), now)
        lost = [ident for ident in firsts if ident not in inserted]
        if lost:
            # A concurrent writer inserted these first; decide against its rows.
            known.update(tx.find_records(inbox.row.id, lost))

    batched = BATCHED.get(inbox.apply)
    repeats: Counter[int] = Counter()
    first_revisions: list[FirstRevision] = []
    events: list[tuple[str, str, int | None]] = []

    def queue(step: str, state: str, record_id: int | None) -> None:
        events.append((step, state, record_id))

    decisions: list[Decision] = []
    for index, (item, ident) in enumerate(zip(items, idents, strict=True)):
        if ident is None:
            decisions.append(_reject(tx, inbox, item, now))
            continue
        record_id = inserted.get(ident)
        if record_id is not None:
            if firsts[ident] == index:
                decisions.append(_accepted(inbox, item, record_id, queue))
                if batched is None:
                    _apply(tx, inbox, _change(inbox, item, record_id), index)
                else:
                    assert item.decoded is not None
                    first_revisions.append((record_id, item.decoded.fields))
                continue
            # A repeat of an identity this batch inserted: decided against that row,
            # built only now since most batches have none.
            if ident not in known:
                known[ident] = _fresh_row(inbox.row.id, news[ident], record_id, now)
        stored = known.get(ident)
        verdict = _against(tx, inbox, item, stored, now, queue, repeats) if stored else None
        # Gone meanwhile (retention) or lost to a writer we cannot see: one by one.
        decisions.append(verdict or decide(tx, inbox, item, now, index))
    if batched is not None and first_revisions:
        try:
            batched(tx, inbox.row.id, first_revisions)
        except Exception as exc:
            raise ApplyError(
                f"inbox {inbox.name}: apply step failed on a batch: {type(exc).__name__}: {exc}",
                index=firsts[next(iter(firsts))],
            ) from exc
    if repeats and len(tx.touch_duplicates(repeats, now)) != len(repeats):
        # A stored row vanished between the read and the count: retention dropped a
        # record whose window had passed. Nothing of this batch is kept; a retry
        # decides it against what is there now.
        raise StorageUnavailable("a record changed under this batch; retry")
    tx.queue_logs(events)
    if first_revisions or inserted:
        crashpoints.reach(crashpoints.AFTER_INSERT)
    return decisions


def _new_record(item: Prepared, ident: bytes) -> NewRecord:
    assert item.decoded is not None and item.identity is not None and item.witness is not None
    return NewRecord(
        ident,
        item.identity.identity,
        item.witness,
        item.decoded.content,
        _fields_json(item.decoded),
        _arrival(item.delivery),
    )


def _fresh_row(inbox_id: int, new: NewRecord, record_id: int, now: float) -> RecordRow:
    """The row a batch just inserted, as a later delivery in the batch will see it."""
    arrival = new.arrival
    return RecordRow(
        id=record_id,
        inbox_id=inbox_id,
        ident=new.ident,
        identity=new.identity,
        witness=new.witness,
        revision=1,
        content=new.content,
        fields=new.fields,
        first_seen=now,
        last_seen=now,
        seen_count=1,
        evicted_at=None,
        late_replays=0,
        device_time=arrival.device_time,
        snapshot_id=arrival.snapshot_id,
        delivery_id=arrival.delivery_id,
    )


def _fence_detail(reason: str, delivery: Delivery, lease: object) -> str:
    if reason == leases.STALE_TOKEN:
        return (
            f"token {delivery.lease_token} is not the current lease on scope "
            f"{delivery.snapshot_id!r}; take a new lease"
        )
    return f"the lease on scope {delivery.snapshot_id!r} expired by the server clock"
