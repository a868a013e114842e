"""The ingest pipeline, in DESIGN.md's order: bound, decode, identify, decide, commit.

Everything before the transaction is pure (:func:`prepare`); everything inside it goes
through the store interface (:func:`decide`). Invalid input never reaches dedup state,
so a later valid copy of the same identity still applies (seed 003, R1).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from oncebox.engine import crashpoints, leases, log
from oncebox.engine.apply import ApplyStep, Change
from oncebox.engine.decision import CONFLICT_REASON, LATE_REPLAY, Decision, Verdict, classify
from oncebox.errors import ApplyError, StorageUnavailable
from oncebox.formats import Codec, Decoded, Delivery, Identity, Invalid, identify
from oncebox.store.base import Arrival, InboxRow, Tx

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


@dataclass(frozen=True)
class Prepared:
    """One delivery after the pure steps: decoded and identified, or refused."""

    delivery: Delivery
    decoded: Decoded | None = None
    identity: Identity | None = None
    invalid: Invalid | None = None


def prepare(codec: Codec, delivery: Delivery) -> Prepared:
    """Bound the raw size, then decode, validate and identify; never touches storage."""
    if len(delivery.body) > codec.max_bytes:
        invalid = Invalid("too_large", f"{len(delivery.body)} bytes exceeds {codec.max_bytes}")
        return Prepared(delivery, invalid=invalid)
    try:
        decoded = codec.decode(delivery)
        return Prepared(delivery, decoded, identify(codec, decoded))
    except Invalid as invalid:
        return Prepared(delivery, invalid=invalid)
    except Exception as exc:  # a user codec's bug must not lose the delivery
        return Prepared(delivery, invalid=Invalid("codec_error", f"{type(exc).__name__}: {exc}"))


def _arrival(delivery: Delivery) -> Arrival:
    return Arrival(delivery.device_time, delivery.snapshot_id, delivery.delivery_id)


def _fields_json(decoded: Decoded) -> str:
    return json.dumps(dict(decoded.fields), sort_keys=True, separators=(",", ":"))


def decide(tx: Tx, inbox: ActiveInbox, item: Prepared, now: float, index: int = 0) -> Decision:
    """Decide one prepared delivery inside an open transaction."""
    delivery = item.delivery
    if item.invalid is not None or item.decoded is None or item.identity is None:
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
    identity, decoded = item.identity, item.decoded
    ident = hashlib.sha256(identity.identity.encode("utf-8")).digest()
    witness = bytes.fromhex(identity.witness)
    facts: dict[str, Any] = {"identity": identity.identity, "witness": identity.witness}
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
            return _accept(tx, inbox, item, record_id, index, facts)
        # A concurrent writer inserted this identity between our read and our insert;
        # its row is committed now, so decide against it like any other.
        existing = tx.find_record(inbox.row.id, ident)
        if existing is None:
            return None
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
        if not tx.touch_duplicate(existing.id, now):
            return None
        return Decision(
            inbox.name,
            verdict,
            False,
            record_id=existing.id,
            revision=existing.revision,
            log_position=existing.log_seq,
            **facts,
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
        log.event(
            tx,
            "quarantine",
            {
                "inbox": inbox.name,
                "quarantine": quarantine_id,
                "record": existing.id,
                "identity": identity.identity,
                "witness": identity.witness,
                "reason": CONFLICT_REASON,
            },
        )
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


def _accept(
    tx: Tx,
    inbox: ActiveInbox,
    item: Prepared,
    record_id: int,
    index: int,
    facts: dict[str, Any],
) -> Decision:
    """Run the apply step in the deciding transaction and queue the record's seal."""
    assert item.decoded is not None and item.identity is not None
    identity = item.identity
    change = Change(inbox.name, inbox.row.id, record_id, identity.identity, 1, item.decoded.fields)
    try:
        inbox.apply(tx, change)
    except Exception as exc:
        raise ApplyError(
            f"inbox {inbox.name}: apply step failed on delivery {index}: "
            f"{type(exc).__name__}: {exc}",
            index=index,
        ) from exc
    state = log.record_state(
        inbox.name, record_id, identity.identity, identity.witness, 1, item.delivery.snapshot_id
    )
    log.event(tx, "accept", state, record_id)
    crashpoints.reach(crashpoints.AFTER_INSERT)
    return Decision(inbox.name, Verdict.ACCEPTED, False, record_id=record_id, revision=1, **facts)


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
    tx.lock_identities(
        inbox.row.id, [item.identity.digest_bytes for item in items if item.identity is not None]
    )
    decisions = [decide(tx, inbox, item, now, index) for index, item in enumerate(items)]
    counts = Counter((str(d.verdict), d.reason or "") for d in decisions)
    tx.count_verdicts(inbox.row.id, int(now // 3600), dict(counts))
    return decisions


def _fence_detail(reason: str, delivery: Delivery, lease: object) -> str:
    if reason == leases.STALE_TOKEN:
        return (
            f"token {delivery.lease_token} is not the current lease on scope "
            f"{delivery.snapshot_id!r}; take a new lease"
        )
    return f"the lease on scope {delivery.snapshot_id!r} expired by the server clock"
