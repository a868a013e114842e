"""Leases: the time-bounded right to write into a resource, held under a fencing token.

One kind of lease fences everything that must have one writer at a time: a sender's
scope of a lease-fenced inbox, the log's dedicated sealer, a reconciler's claim on a
work key, a dispatcher's claim on a forward. Tokens come from one counter
per store and only grow, so a newer lease fences every older token at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class Fenced(StrEnum):
    """What a lease fences."""

    SCOPE = "scope"  # a sender's scope of a lease-fenced inbox (a snapshot)
    SEALER = "sealer"  # the log's dedicated sealer
    WORK = "work"  # a reconciler's claim on a work key
    CONSUMER = "consumer"  # a consumer's cursor over an inbox's feed
    FORWARD = "forward"  # a dispatcher's claim on one pending forward (an outbox row)


class Resource(NamedTuple):
    """What one lease is on: its kind, the inbox it belongs to (0 for the store's own,
    the sealer's) and its name within (the scope, the work key; "" for the sealer)."""

    kind: Fenced
    owner: int
    name: str


SEALER = Resource(Fenced.SEALER, 0, "")


@dataclass(frozen=True)
class LeaseState:
    """The lease on one resource: its token, its holder (None: no dedicated holder),
    and when it runs out on the server clock (or was released)."""

    kind: str
    owner: int
    name: str
    token: int
    holder: str | None
    issued_at: float
    expires_at: float
    released_at: float | None = None

    @property
    def resource(self) -> Resource:
        return Resource(Fenced(self.kind), self.owner, self.name)

    @property
    def scope(self) -> str:
        """A sender's scope, for an inbox's lease (its name)."""
        return self.name

    @property
    def inbox_id(self) -> int:
        return self.owner
