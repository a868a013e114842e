"""Apply steps: the effects of a record, run inside the transaction that decides it.

Because the record insert and its effects commit or roll back together, a crash can
never leave a record without its effects or effects without their record (I5).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncebox.domain import LedgerRow
from oncebox.errors import ConfigError
from oncebox.formats import Invalid
from oncebox.formats.json_event import bounded_string
from oncebox.store.base import Tx


@dataclass(frozen=True)
class Change:
    """A record's new content: its first revision, or one an operator accepted.

    ``previous`` holds the fields of the revision it replaces (None for the first), so
    a step can move its effects by the difference instead of adding the whole again.
    """

    inbox: str
    inbox_id: int
    record_id: int
    identity: str
    revision: int
    fields: Mapping[str, Any]
    previous: Mapping[str, Any] | None = None


ApplyStep = Callable[[Tx, Change], None]


def no_effect(tx: Tx, change: Change) -> None:
    """Keep the record only."""


def _work_key(fields: Mapping[str, Any]) -> tuple[str, str, str]:
    return (fields["seller_id"], fields["sku"], fields["marketplace_id"])  # WORK_KEY


def bump_generation(tx: Tx, change: Change) -> None:
    """Seed 002: a new event makes its work key dirty, whatever its event time."""
    keys = [_work_key(change.fields)]
    if change.previous is not None and _work_key(change.previous) != keys[0]:
        # The accepted revision moved the event to another key: the old key's refreshed
        # state was derived from an event that no longer says that, so refresh it too.
        keys.append(_work_key(change.previous))
    tx.bump_generations(change.inbox_id, keys)


def _ledger_row(record_id: int, fields: Mapping[str, Any]) -> LedgerRow:
    return LedgerRow(
        record_id,
        fields["site"],
        fields["need"],
        int(fields["headcount"]),
        int(fields["pri"]),
    )


def triage(tx: Tx, change: Change) -> None:
    """Seed 003: one ledger row per frame id; a revision replaces it by the difference."""
    row = _ledger_row(change.record_id, change.fields)
    if change.previous is None:
        tx.ledger_insert(change.inbox_id, [row])
    else:
        tx.ledger_replace(change.inbox_id, row)


# A first revision as the batched steps take it: (record id, fields). They need no
# more, and building a Change for each record of a batch costs more than the step.
FirstRevision = tuple[int, Mapping[str, Any]]


def bump_generations(tx: Tx, inbox_id: int, records: Sequence[FirstRevision]) -> None:
    """bump_generation for a batch of first revisions, in one round trip."""
    if records:
        tx.bump_generations(inbox_id, [_work_key(fields) for _, fields in records])


def triage_many(tx: Tx, inbox_id: int, records: Sequence[FirstRevision]) -> None:
    """triage for a batch of first revisions: ledger rows at once, totals once per key."""
    if records:
        tx.ledger_insert(inbox_id, [_ledger_row(rid, fields) for rid, fields in records])


# -- what a step can take ----------------------------------------------------------------
# A step's fields are checked at decode, with the codec's own rules (DESIGN.md, ingest
# step 2): a value a step cannot take is the delivery's ``bad_field`` dead letter, never
# a failure inside the deciding transaction, where it would fail the delivery's whole
# batch (and, on HTTP, everyone's requests decided with it).
FieldCheck = Callable[[Mapping[str, Any]], None]
COUNT_MAX = 999_999_999  # nine digits, as an H1 frame's counts: any sum fits 64 bits


def _field(fields: Mapping[str, Any], name: str) -> Any:
    if name not in fields:
        raise Invalid("missing_field", f"field {name} is missing (the apply step needs it)")
    return fields[name]


def _count(fields: Mapping[str, Any], name: str) -> None:
    value = _field(fields, name)
    if type(value) is not int or not 0 <= value <= COUNT_MAX:
        raise Invalid("bad_field", f"{name} must be a whole number from 0 to {COUNT_MAX:,}")


def work_key_fields(fields: Mapping[str, Any]) -> None:
    """``generation``: a work key of three bounded strings."""
    for name in WORK_KEY:
        bounded_string(_field(fields, name), name)


def triage_fields(fields: Mapping[str, Any]) -> None:
    """``triage``: a site and a need (bounded strings), a headcount and a priority."""
    for name in ("site", "need"):
        bounded_string(_field(fields, name), name)
    _count(fields, "headcount")
    _count(fields, "pri")


WORK_KEY = ("seller_id", "sku", "marketplace_id")
NEEDS: dict[ApplyStep, tuple[str, ...]] = {
    bump_generation: WORK_KEY,
    triage: ("site", "need", "headcount", "pri"),
}
_CHECKS: dict[ApplyStep, FieldCheck] = {
    bump_generation: work_key_fields,
    triage: triage_fields,
}


def field_check(step: ApplyStep) -> FieldCheck | None:
    """How ``step``'s fields are checked at decode: a built-in step's rules, or a user
    step's own ``check_fields(fields)`` (raising :class:`oncebox.Invalid`), if it has one."""
    return _CHECKS.get(step) or getattr(step, "check_fields", None)


def needed_fields(step: ApplyStep) -> tuple[str, ...]:
    """The fields a step cannot run without (a user step's ``needs_fields``, if any)."""
    return NEEDS.get(step) or tuple(getattr(step, "needs_fields", ()))


# Built-in steps that can take a whole batch of first revisions at once. Their effects
# are sums, so they come out the same as applying the changes one by one.
BATCHED: dict[ApplyStep, Callable[[Tx, int, Sequence[FirstRevision]], None]] = {
    no_effect: lambda tx, inbox_id, records: None,
    bump_generation: bump_generations,
    triage: triage_many,
}


BUILT_IN: dict[str, ApplyStep] = {
    "none": no_effect,
    "generation": bump_generation,
    "triage": triage,
}


def resolve_apply(step: ApplyStep | str) -> ApplyStep:
    """A built-in step by name, ``module:function`` for a user's own, or a callable."""
    if callable(step):
        return step
    if step in BUILT_IN:
        return BUILT_IN[step]
    module_name, _, attr = step.partition(":")
    if not attr:
        known = ", ".join(sorted(BUILT_IN))
        raise ConfigError(f"unknown apply step {step!r} (built in: {known}; or module:function)")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load apply step {step!r}: {exc}") from None
    if not callable(found):
        raise ConfigError(f"apply step {step!r} is not callable")
    return found  # type: ignore[no-any-return]


def apply_name(step: ApplyStep | str) -> str:
    if isinstance(step, str):
        return step
    for name, known in BUILT_IN.items():
        if known is step:
            return name
    return f"{getattr(step, '__module__', '?')}:{getattr(step, '__qualname__', repr(step))}"
