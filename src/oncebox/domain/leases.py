"""Leases: the time-bounded right to write into a scope, held under a fencing token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from oncebox.domain.kinds import Doc


@dataclass(frozen=True)
class LeaseState:
    """A scope's current lease: its token, and when it runs out on the server clock."""

    inbox_id: int
    scope: Annotated[str, Doc("The leased scope.")]
    token: Annotated[int, Doc("The fencing token; every older token is fenced.")]
    issued_at: float
    expires_at: Annotated[float, Doc("Unix seconds on the server clock.")]
    released_at: float | None


@dataclass(frozen=True)
class SealerState:
    """Who holds the log's append lease: a dedicated sealer (``holder``) until
    ``expires_at``, or nobody (``holder`` None); ``token`` fences a sealer that lost it."""

    token: int
    holder: str | None
    expires_at: float
