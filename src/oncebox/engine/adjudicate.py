"""An operator's verdict on a quarantined newcomer: keep the original, or accept it.

Accepting makes the newcomer the record's next revision and runs the inbox's apply
step with the previous fields, so effects move by the difference. The revision it
replaces is kept; nothing is silent and nothing is lost.
"""

from __future__ import annotations

import json
from typing import Protocol

from oncebox.domain import NOTE_MAX, Quarantined, QuarantineStatus, Resolution
from oncebox.engine import log, outbox
from oncebox.engine.ingest import ActiveInbox
from oncebox.engine.step import Change, StepFailed
from oncebox.errors import ApplyError, InvalidOperation, NotFound
from oncebox.store.base import Operating, Outbox, StepTx


def check_note(note: str | None, required: bool = False) -> None:
    """An operator's note: at most :data:`~oncebox.domain.NOTE_MAX` characters, and
    not blank where one is required (a resolution must say why)."""
    if required and not (note or "").strip():
        raise InvalidOperation("this action needs a note saying why")
    if note is not None and len(note) > NOTE_MAX:
        raise InvalidOperation(
            f"a note is at most {NOTE_MAX:,} characters; this one has {len(note):,}"
        )


class Resolving(Operating, StepTx, Outbox, Protocol):
    """What resolving a quarantined newcomer takes: the operators' port, what the inbox's
    apply step writes with (an accepted newcomer moves its effects), and the outbox (an
    accepted revision is forwarded like an accepted record)."""


def resolve(
    tx: Resolving,
    inbox: ActiveInbox,
    row: Quarantined,
    action: Resolution,
    note: str,
    now: float,
    actor: str | None = None,
) -> Quarantined:
    """Resolve a quarantine row that ``tx`` read with ``lock=True``.

    The row lock makes a second operator wait and then see the row closed; the identity
    lock keeps a concurrent resend of the same identity from deciding against a record
    that is being revised.
    """
    check_note(note, required=True)
    if row.status != QuarantineStatus.OPEN:
        raise InvalidOperation(f"quarantine {row.id} is already {row.status}")
    tx.lock_identities(inbox.row.id, [row.ident], exclusive=True)
    revised: tuple[int, int] | None = None  # (record id, revision) the newcomer became
    if action is Resolution.KEEP:
        tx.close_quarantine(row.id, action.status, note, now, actor)
    else:
        stored = tx.find_records(inbox.row.id, [row.ident]).get(row.ident)
        record = tx.get_record(stored[0]) if stored is not None else None  # by its id
        # Past its tombstone's horizon, the identity may have a new record: not the one
        # this newcomer conflicted with, whose newer content accepting would overwrite.
        if record is None or record.is_tombstone or record.id != row.record_id:
            raise InvalidOperation(
                f"quarantine {row.id}: the original record was evicted by retention, so "
                f"there is nothing to revise; keep it instead"
            )
        if record.witness != row.witness:
            assert row.fields is not None  # read whole, under its lock
            # When it last arrived: the newcomer's arrival, or a resend of the original
            # since; never this resolution, which is no delivery (an inbox gone silent
            # stays silent).
            arrived = max(record.last_seen, row.last_seen)
            revision = tx.revise_record(
                record, row.witness, row.content, row.fields, now, note, arrived
            )
            revised = (record.id, revision)
            change = Change(
                inbox.name,
                inbox.row.id,
                record.id,
                row.identity,
                revision,
                json.loads(row.fields),
                json.loads(record.fields or "{}"),
            )
            try:
                inbox.apply.apply(tx, [change])
            except StepFailed as failed:
                raise ApplyError(
                    f"inbox {inbox.name}: apply step failed on accepting quarantine "
                    f"{row.id}: {failed}",
                    inbox=inbox.name,
                ) from failed.cause
            except Exception as exc:
                raise ApplyError(
                    f"inbox {inbox.name}: apply step failed on accepting quarantine "
                    f"{row.id}: {exc}",
                    inbox=inbox.name,
                ) from exc
            outbox.enqueue(tx, inbox, [(record.id, revision, row.identity)], now)
        tx.close_quarantine(row.id, action.status, note, now, actor)
    log.event(
        tx,
        "resolve",
        {
            "inbox": inbox.name,
            "quarantine": row.id,
            "action": str(action),
            "note": note,
            "actor": actor,
            "witness": row.witness.hex(),
        },
        # An accepted newcomer is the record's next revision: sealing this entry puts
        # that revision on the feed.
        record_id=revised[0] if revised else None,
        revision=revised[1] if revised else None,
        inbox_id=inbox.row.id if revised else None,
    )
    closed = tx.get_quarantine(row.id)
    if closed is None:
        raise NotFound(f"quarantine {row.id} vanished")
    return closed
