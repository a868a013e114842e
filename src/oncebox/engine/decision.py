"""The pure rule that picks a verdict, and how a decision is made from one.

The words (:class:`~oncebox.domain.Verdict`, the reasons) and the :class:`Decision`
type are the domain's; here is what the engine decides with them.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from oncebox.domain import APPLY_FAILED, Decision, Verdict
from oncebox.errors import ApplyError

_DEFAULTS = {f.name: f.default for f in fields(Decision) if f.default is not MISSING}


def classify(existing_witness: bytes | None, witness: bytes) -> Verdict:
    """First write wins: no record means accept, the same content is a duplicate, and
    different content under the same identity is a conflict (never an overwrite)."""
    if existing_witness is None:
        return Verdict.ACCEPTED
    if existing_witness == witness:
        return Verdict.DUPLICATE
    return Verdict.CONFLICT


def decision_of(inbox: str, verdict: Verdict, may_ack: bool = False, **facts: Any) -> Decision:
    """``Decision(inbox, verdict, may_ack, **facts)``, for the per-delivery paths.

    Why: a frozen dataclass's ``__init__`` sets each of its 14 fields through
    ``object.__setattr__``; filling the instance's ``__dict__`` at once gives the same
    object several times faster. ``facts`` must name fields (checked in the tests).
    """
    made: Decision = object.__new__(Decision)
    made.__dict__.update(_DEFAULTS, inbox=inbox, verdict=verdict, may_ack=may_ack, **facts)
    return made


def unapplied(error: ApplyError) -> Decision:
    """An apply step's failure where a batch answers each delivery: rejected, nothing
    of it stored, so it must not be acknowledged. Why it failed is the step's business
    (the server's log): its words may name the store's tables, which no sender sees."""
    detail = (
        f"the apply step of inbox {error.inbox} failed on this delivery; nothing of it was "
        f"stored: resend it once the step is fixed"
    )
    return decision_of(error.inbox, Verdict.REJECTED, False, reason=APPLY_FAILED, detail=detail)
