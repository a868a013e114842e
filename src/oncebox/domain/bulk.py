"""What an operator's action on many dead letters or conflicts at once selected, and
what it did to each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from oncebox.domain.kinds import Doc


@dataclass(frozen=True)
class BulkItem:
    """One item a bulk action acted on, and what became of it."""

    id: Annotated[int, Doc("The dead letter's or the quarantine row's id.")]
    inbox: Annotated[str, Doc("Its inbox.")]
    outcome: Annotated[
        str,
        Doc(
            "What it became: a replay's verdict (accepted, duplicate, conflict, "
            "rejected:REASON), archived, kept or accepted; or failed."
        ),
    ]
    detail: Annotated[str | None, Doc("Why it failed, or what the refusal said.")] = None


@dataclass(frozen=True)
class BulkRun:
    """A bulk action's one call: at most its limit of items, each through the same path
    as one at a time, recorded once in the log."""

    action: Annotated[str, Doc("replay, archive or resolve:keep / resolve:accept.")]
    count: Annotated[int, Doc("How many items this call acted on.")]
    items: Annotated[tuple[BulkItem, ...], Doc("Each item, in id order, and its outcome.")]
    next_after: Annotated[
        int | None,
        Doc("More may match: run again with after set to this; null when none are left."),
    ]
    log_position: Annotated[
        int | None,
        Doc("The log entry that records this call: null for now (the entry is sealed "
            "after the call; not given back yet)."),
    ] = None
