"""Delivering a dead letter again: the delivery it kept (or the operator's correction of
it), and what deciding it does to the dead letter and says in the log.

A dead letter keeps a bounded head of what arrived (64 KiB), its full length and digest.
Only one kept whole can be delivered again as it was: replaying a part would decide other
bytes than the sender sent, under its identity. An operator may supply a corrected body
(and key) instead; the log then names the old and the new SHA-256.

A delivery again is decided by the one decision path like any other. What differs is
only what happens to its dead letter, in the same transaction (:func:`settle`): decided
(accepted, duplicate, conflict), it closes as ``replayed``; refused again, the same dead
letter counts one attempt more, with the reason and the time, and no new dead letter is
made, nor is the refusal counted again (the first one was).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, NamedTuple

from oncebox.domain import UNSTORED, DeadLetter, LogEvent, Verdict
from oncebox.engine import log
from oncebox.engine.ingest import Prepared, signature_of_fact
from oncebox.errors import InvalidOperation
from oncebox.formats import Delivery, Oversize
from oncebox.store.letters import Retrying


class Replay(NamedTuple):
    """Who delivers dead letters again and why: an operator's replay, or lines of an
    export fed back (``via``: ``replay`` or ``line``)."""

    actor: str | None = None
    note: str | None = None
    via: str = "line"


LINES = Replay()


class Settled(NamedTuple):
    """What one delivery again was decided as, for its dead letter and the log."""

    verdict: Verdict
    reason: str
    record_id: int | None
    quarantine_id: int | None


def kept_in_part(letter: DeadLetter) -> str | None:
    """Why a dead letter cannot be replayed as it was (its head is not all that arrived),
    or None; as true of a listing's preview of it as of the whole."""
    kept = len(letter.head) if letter.kept is None else letter.kept
    if letter.length == kept:
        return None
    return (
        f"dead letter {letter.id} was kept only in part (the first {kept:,} of "
        f"{letter.length:,} bytes), so it cannot be replayed as it was: ask its sender to "
        f"send it again, or replay it with a corrected body"
    )


def replayable(letter: DeadLetter) -> Delivery:
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


def corrected(letter: DeadLetter, body: bytes | None, key: str | None) -> Delivery:
    """What a replay decides: the dead letter as kept, or with the operator's ``body``
    and ``key`` in place of its own (its other facts kept; no signature, which vouched
    for the bytes that arrived, not these)."""
    if body is None and key is None:
        return replayable(letter)
    if body is None:
        body = replayable(letter).body
    return Delivery(
        body=body,
        key=letter.key if key is None else key,
        snapshot_id=letter.snapshot_id,
        device_time=letter.device_time,
        delivery_id=letter.delivery_id,
    )


def replay_verdict(verdict: Verdict, reason: str) -> str:
    """``accepted``, or ``rejected:bad_checksum`` and the like: what a row shows."""
    return f"{verdict}:{reason}" if reason else str(verdict)


_DEAD_LETTER = attrgetter("delivery.dead_letter")  # a Prepared's, if it names one


def held(tx: Retrying, inbox_id: int, items: Sequence[Prepared]) -> dict[int, DeadLetter]:
    """The dead letters the deliveries of a batch deliver again, by delivery index, held
    until the transaction ends (in id order, so two batches cannot deadlock on them).
    An id that names no dead letter of this inbox is not one: that delivery is decided
    as any other."""
    letters = list(map(_DEAD_LETTER, items))  # at C speed: nearly every batch names none
    if letters.count(None) == len(letters):
        return {}
    wanted = {i: letter for i, letter in enumerate(letters) if letter is not None}
    ids = sorted(set(wanted.values()))
    found = {letter_id: tx.get_dead_letter(letter_id) for letter_id in ids}
    return {
        i: letter
        for i, letter_id in wanted.items()
        if (letter := found.get(letter_id)) is not None and letter.inbox_id == inbox_id
    }


def settle(
    tx: Retrying,
    inbox: str,
    letter: DeadLetter,
    item: Prepared,
    outcome: Settled,
    now: float,
    replay: Replay,
) -> LogEvent:
    """Close ``letter`` or count one attempt more on it, as ``outcome`` says; its log
    event (appended with the batch's own)."""
    if outcome.verdict is Verdict.REJECTED:
        # Fenced out (stale token, expired lease): nothing was decided, it stays as it was;
        # nor does one replayed (corrected) already open again: its delivery is decided.
        reopen = outcome.reason not in UNSTORED and letter.replayed_at is None
        tx.mark_refused_again(letter.id, outcome.reason, now, reopen)
    else:
        tx.mark_replayed(letter.id, now, replay.actor, replay_verdict(*outcome[:2]))
    state: dict[str, Any] = {
        "inbox": inbox,
        "dead_letter": letter.id,
        "via": replay.via,
        "actor": replay.actor,
        "verdict": str(outcome.verdict),
        "reason": outcome.reason or None,
        "record": outcome.record_id,
        "quarantine": outcome.quarantine_id,
        "attempts": letter.attempts + 1,
        "note": replay.note,
    }
    delivery = item.delivery
    new_sha = delivery.sha256 if isinstance(delivery, Oversize) else _sha256(delivery.body)
    if new_sha != letter.sha256 or delivery.key != letter.key:
        state["corrected"] = {"old_sha256": letter.sha256, "new_sha256": new_sha}
        if delivery.key != letter.key:
            state["corrected"].update(old_key=letter.key, new_key=delivery.key)
    return LogEvent("replay", log.state_text(state))


def _sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
