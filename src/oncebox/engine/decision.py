"""The pure rule that picks a verdict, and how a decision is made from one.

The words (:class:`~oncebox.domain.Verdict`, the reasons) and the :class:`Decision`
type are the domain's; here is what the engine decides with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any, Protocol, TypeVar

from oncebox.domain import APPLY_FAILED, Decision, NewRecordRow, StoredRow, Verdict
from oncebox.errors import ApplyError

OutcomeT = TypeVar("OutcomeT", bound="_Outcome")
_DEFAULTS = {f.name: f.default for f in fields(Decision) if f.default is not MISSING}
# Read once: on Python 3.11 the enum's metaclass has a __getattr__, which makes every
# ``Verdict.X`` a slow lookup (several hundred instructions); these run per delivery.
_ACCEPTED, _DUPLICATE = Verdict.ACCEPTED, Verdict.DUPLICATE


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


class _Templates(dict[str, dict[str, Any]]):
    """Inbox name -> the facts every decision of one verdict in that inbox shares (may
    be acked), in the order :func:`decision_of` leaves them: what :func:`quick_decisions`
    fills in per delivery. Made once per inbox, and only ever read. A dictionary per
    verdict, not a cache keyed by it: an enum member hashes in Python (``Enum.__hash__``),
    which cost a single delivery more than its decision."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__()
        self.verdict = verdict

    def __missing__(self, inbox: str) -> dict[str, Any]:
        made = self[inbox] = {**_DEFAULTS, "inbox": inbox, "verdict": self.verdict,
                              "may_ack": True}  # fmt: skip
        return made


_ACCEPTED_TEMPLATES, _DUPLICATE_TEMPLATES = _Templates(_ACCEPTED), _Templates(_DUPLICATE)


class _Outcome(Protocol):
    """What :func:`quick_decisions` reads of the walk's outcomes (engine.walk): a named
    tuple, unpacked at once, (verdict, item, row, seen, reason, detail)."""

    def __iter__(self) -> Iterator[Any]: ...

    @property
    def verdict(self) -> Verdict: ...
    @property
    def item(self) -> Any: ...
    @property
    def row(self) -> int: ...
    @property
    def seen(self) -> StoredRow | None: ...
    @property
    def reason(self) -> str: ...


def quick_decisions(
    inbox: str,
    outcomes: Sequence[OutcomeT],
    records: Sequence[NewRecordRow],
    sealed: Mapping[int, int],
    other: Callable[[int, OutcomeT, Mapping[int, int]], Decision],
) -> list[Decision]:
    """The decisions of a batch's outcomes, in order: an accepted delivery's and a plain
    duplicate's (nearly all of them) made here over the verdict's template
    (:class:`_Templates`), their facts set one by one instead of through keyword
    arguments (which cost more than the object itself); the rest by ``other``.
    ``sealed`` gives the log positions of records sealed in the batch."""
    accepted, duplicate = _ACCEPTED_TEMPLATES[inbox], _DUPLICATE_TEMPLATES[inbox]
    made = []
    new = object.__new__
    for index, outcome in enumerate(outcomes):
        # Unpacked at once, not read field by field: this loop runs over every delivery.
        verdict, item, row, seen, reason, _ = outcome
        identity = item[2]  # the Prepared's Identity
        if verdict is _ACCEPTED and identity is not None:
            record_id, revision, position = records[row][0], 1, None
            shared = accepted
        elif verdict is _DUPLICATE and not reason and seen is not None:
            record_id, _, _, revision, _, _, position = seen
            shared = duplicate
        else:  # the rarer kinds, each as it needs
            made.append(other(index, outcome, sealed))
            continue
        # Over the template, in line: this loop runs over every delivery of every batch.
        decision: Decision = new(Decision)
        data = decision.__dict__
        data.update(shared)
        data["identity"], data["witness"], _, _ = identity
        data["record_id"] = record_id
        data["revision"] = revision
        data["log_position"] = position if position is not None else sealed.get(record_id)
        made.append(decision)
    return made


def repeat_decision(inbox: str, item: Any, seen: StoredRow) -> Decision:
    """:func:`quick_decisions`' decision of a single plain duplicate of a sealed record
    (``item`` a Prepared, ``seen`` the record it repeats), made without a batch's loop
    (checked against it in tests/test_single_round_six.py)."""
    decision: Decision = object.__new__(Decision)
    data = decision.__dict__
    data.update(_DUPLICATE_TEMPLATES[inbox])
    data["identity"], data["witness"], _, _ = item[2]  # its Identity
    data["record_id"], _, _, data["revision"], _, _, data["log_position"] = seen
    return decision


def unapplied(error: ApplyError) -> Decision:
    """An apply step's failure where a batch answers each delivery: rejected, nothing
    of it stored, so it must not be acknowledged. Why it failed is the step's business
    (the server's log): its words may name the store's tables, which no sender sees."""
    detail = (
        f"the apply step of inbox {error.inbox} failed on this delivery; nothing of it was "
        f"stored: resend it once the step is fixed"
    )
    return decision_of(error.inbox, Verdict.REJECTED, False, reason=APPLY_FAILED, detail=detail)
