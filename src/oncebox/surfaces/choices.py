"""The choices an operator is offered, spelled from the domain's vocabulary once, for
every surface: the CLI's options, the HTTP API's parameters and bodies, the console."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from oncebox.domain import QuarantineStatus, Resolution

ALL = "all"  # a listing of every status
STATUSES = (*(status.value for status in QuarantineStatus), ALL)
RESOLUTIONS = tuple(resolution.value for resolution in Resolution)

if TYPE_CHECKING:  # to a type checker, plain strings; at run time, the exact choices
    StatusChoice = str
    ResolutionChoice = str
else:
    StatusChoice = Literal[STATUSES]
    ResolutionChoice = Literal[RESOLUTIONS]


def status_filter(choice: str) -> str | None:
    """The status a listing keeps to, or None for every one."""
    return None if choice == ALL else choice
