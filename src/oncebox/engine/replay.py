"""Replaying a dead letter: the delivery it kept, and what the log says of the replay.

A dead letter keeps a bounded head of what arrived (64 KiB), its full length and digest.
Only one kept whole can be delivered again: replaying a part would decide other bytes
than the sender sent, under its identity.
"""

from __future__ import annotations

from typing import Any

from oncebox.domain import DeadLetter, Decision
from oncebox.engine.ingest import signature_of_fact
from oncebox.errors import InvalidOperation
from oncebox.formats import Delivery


def kept_in_part(letter: DeadLetter | DeadLetter) -> str | None:
    """Why a dead letter cannot be replayed (its head is not all that arrived), or None;
    as true of a listing's preview of it as of the whole."""
    kept = len(letter.head) if letter.kept is None else letter.kept
    if letter.length == kept:
        return None
    return (
        f"dead letter {letter.id} was kept only in part (the first {kept:,} of "
        f"{letter.length:,} bytes), so it cannot be replayed: ask its sender to send it again"
    )


def replayable(letter: DeadLetter | DeadLetter) -> Delivery:
    """The delivery a dead letter kept, with its transport facts (not its lease token,
    which dead letters do not keep) and the signature it was verified with on arrival:
    what a replay decides, and what a download of it re-delivers."""
    head = bytes(letter.head)
    why = kept_in_part(letter)
    if why is not None:
        raise InvalidOperation(why)
    if len(head) != letter.length:  # a listing's preview: read the dead letter whole first
        raise InvalidOperation(f"dead letter {letter.id} was read only in part")
    return Delivery(
        body=head,
        key=letter.key,
        snapshot_id=letter.snapshot_id,
        device_time=letter.device_time,
        delivery_id=letter.delivery_id,
        signature=signature_of_fact(letter.signature, letter.key),
    )


def replay_verdict(decision: Decision) -> str:
    """``accepted``, or ``rejected:bad_checksum`` and the like: what a row shows."""
    return f"{decision.verdict}:{decision.reason}" if decision.reason else str(decision.verdict)


def replay_state(
    letter: DeadLetter, decision: Decision, actor: str | None, note: str | None = None
) -> dict[str, Any]:
    """The log entry of a replay: which dead letter, who and why, and what it became."""
    return {
        "inbox": decision.inbox,
        "dead_letter": letter.id,
        "actor": actor,
        "verdict": str(decision.verdict),
        "reason": decision.reason,
        "record": decision.record_id,
        "quarantine": decision.quarantine_id,
        "new_dead_letter": decision.dead_letter_id,
        "note": note,
    }
