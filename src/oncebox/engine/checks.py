"""Filters and actions checked against what is known: an unknown value is an error that
names the known ones and the closest, never an empty answer."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from oncebox.domain import REFUSAL_REASONS, LetterStatus
from oncebox.errors import InvalidOperation, UnknownValue
from oncebox.store.letters import Selecting


def unknown(what: str, value: str, known: Sequence[str]) -> UnknownValue:
    """An unknown value's error: the known ones, and the closest when one is close."""
    close = difflib.get_close_matches(value, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return UnknownValue(
        f"unknown {what} {value!r}{hint}; known: {', '.join(known) or 'none'}",
        known=tuple(known),
    )


def check_status(status: str | None) -> str | None:
    """A dead-letter status filter: one of open, replayed, archived (None: any)."""
    known = [s.value for s in LetterStatus]
    if status is not None and status not in known:
        raise unknown("status", status, known)
    return status


def check_reason(tx: Selecting, inbox_ids: Sequence[int | None], reason: str | None) -> None:
    """A reason filter names a reason the codecs refuse for, or one these inboxes'
    dead letters have (a user's codec may add its own)."""
    if reason is None or reason in REFUSAL_REASONS:
        return
    stored = {r for inbox_id in inbox_ids for r in tx.dead_letter_reasons(inbox_id)}
    if reason not in stored:
        raise unknown("reason", reason, sorted(stored | set(REFUSAL_REASONS)))


def whole_number(value: object, what: str, least: int = 0) -> int:
    """``value`` as a position or a count: an integer (not a bool) of at least ``least``.
    Anything else is the caller's error, said as one, rather than a comparison's
    TypeError, the store's refusal, or a float kept as a cursor."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    raise InvalidOperation(f"{what} is a whole number, {least} or more, not {value!r:.40}")
