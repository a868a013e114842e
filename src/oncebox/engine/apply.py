"""Which apply step an inbox runs: a built-in one by name, a user's by ``module:name``
(a :class:`~oncebox.engine.step.Step`, or a plain function), or one given directly.

What a step is, and all it gets, is :mod:`oncebox.engine.step`; the built-in steps are
:mod:`oncebox.engine.steps`, written against that same interface.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from oncebox.engine.step import Change, FunctionStep, NoEffect, Step, StepFailed
from oncebox.engine.steps.generation import GENERATION
from oncebox.engine.steps.triage import TRIAGE
from oncebox.errors import ApplyError, ConfigError

if TYPE_CHECKING:
    from oncebox.engine.ingest import ActiveInbox
    from oncebox.store.base import StepTx

BUILT_IN: dict[str, Step] = {"none": NoEffect(), "generation": GENERATION, "triage": TRIAGE}

ApplyStep = Step | Callable[[Any, Any], None]  # a step, or a function step(tx, change)


def resolve_apply(step: ApplyStep | str) -> Step:
    """A built-in step by name, ``module:name`` for a user's own, or a step or function."""
    if isinstance(step, str):
        if step in BUILT_IN:
            return BUILT_IN[step]
        step = _load(step)
    if isinstance(step, Step):
        return step
    if callable(step):
        return FunctionStep(step, apply_name(step))
    raise ConfigError(f"apply step {step!r} is neither a step nor callable")


def _load(spelled: str) -> ApplyStep:
    module_name, _, attr = spelled.partition(":")
    if not attr:
        known = ", ".join(sorted(BUILT_IN))
        raise ConfigError(f"unknown apply step {spelled!r} (built in: {known}; or module:function)")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load apply step {spelled!r}: {exc}") from None
    if not (isinstance(found, Step) or callable(found)):
        raise ConfigError(f"apply step {spelled!r} is not callable")
    return found  # type: ignore[no-any-return]


def apply_name(step: ApplyStep | str) -> str:
    """How the store records an inbox's step: its name, or ``module:qualname``."""
    if isinstance(step, str):
        return step
    if isinstance(step, Step) and not isinstance(step, FunctionStep):
        if BUILT_IN.get(step.name) is step:
            return step.name
        return f"{type(step).__module__}:{step.name}"
    function = step.function if isinstance(step, FunctionStep) else step
    module = getattr(function, "__module__", "?")
    return f"{module}:{getattr(function, '__qualname__', repr(function))}"


def apply_new(
    tx: StepTx, inbox: ActiveInbox, changes: Sequence[Change], firsts: Sequence[int]
) -> None:
    """Run the inbox's apply step over the changes of a batch's new records at once
    (``firsts``: the delivery index of each). Any failure is an :class:`ApplyError`
    naming the delivery it failed on, where the step could say (None otherwise: the
    caller halves the batch)."""
    name = inbox.name
    try:
        inbox.apply.apply(tx, changes)
    except StepFailed as failed:
        index = firsts[failed.index]
        raise ApplyError(
            f"inbox {name}: apply step failed on delivery {index}: {failed}",
            index=index,
            inbox=name,
        ) from failed.cause
    except Exception as exc:
        # A step over the whole batch cannot say which record it failed on (None):
        # a single record's failure is exact, so a batch of one still names it.
        raise ApplyError(
            f"inbox {name}: apply step failed on a batch: {type(exc).__name__}: {exc}",
            index=firsts[0] if len(firsts) == 1 else None,
            inbox=name,
        ) from exc
