"""A sender's lease on one scope of a lease-fenced inbox: the right to deliver into it
until its expiry on the server clock, under the one fence (:mod:`oncebox.engine.fence`).
A device's clock is recorded with what it sends and never consulted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from oncebox.domain import STALE_TOKEN, Fenced, Resource
from oncebox.engine import fence, log
from oncebox.errors import InvalidOperation
from oncebox.formats import Delivery
from oncebox.store.base import Events, FencePort

_SCOPE = re.compile(r"[^\x00-\x1f]{1,256}")


@dataclass(frozen=True)
class Lease:
    """A sender's lease as it is handed out: the token to send, and until when."""

    inbox: str
    scope: str
    token: int
    expires_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "inbox": self.inbox,
            "scope": self.scope,
            "token": self.token,
            "expires_at": self.expires_at,
        }


def fence_detail(reason: str, delivery: Delivery) -> str:
    """What a fenced-out sender is told to do."""
    if reason == STALE_TOKEN:
        return (
            f"token {delivery.lease_token} is not the current lease on scope "
            f"{delivery.snapshot_id!r}; take a new lease"
        )
    return f"the lease on scope {delivery.snapshot_id!r} expired by the server clock"


def _text(scope: str) -> bool:
    try:
        scope.encode("utf-8")  # a lone surrogate is not text a store can hold
    except UnicodeEncodeError:
        return False
    return True


def check_scope(scope: str) -> None:
    if (
        not isinstance(scope, str)
        or not _SCOPE.fullmatch(scope)
        or scope != scope.strip()
        or not _text(scope)
    ):
        raise InvalidOperation(
            f"lease scope {scope!r}: use 1 to 256 characters of text, no control characters "
            f"or surrounding whitespace"
        )


def scope_of(inbox_id: int, scope: str) -> Resource:
    return Resource(Fenced.SCOPE, inbox_id, scope)


def issue(tx: Fencing, inbox_id: int, inbox: str, scope: str, ttl: float, now: float) -> Lease:
    check_scope(scope)
    held = fence.grant(tx, scope_of(inbox_id, scope), None, ttl, now)
    log.event(
        tx,
        "lease",
        {"inbox": inbox, "scope": scope, "token": held.token, "expires_at": held.expires_at},
    )
    return Lease(inbox, scope, held.token, held.expires_at)


def release(tx: Fencing, inbox_id: int, inbox: str, scope: str, token: int, now: float) -> None:
    check_scope(scope)  # one no lease can be on (a lone surrogate the store cannot hold)
    current = fence.held(tx, scope_of(inbox_id, scope))
    if not fence.release(tx, current, token, now):
        raise InvalidOperation(
            f"token {token} does not hold a lease on scope {scope!r} of inbox {inbox}"
        )
    log.event(tx, "release", {"inbox": inbox, "scope": scope, "token": token})


class Fencing(FencePort, Events, Protocol):
    """What a sender's lease is taken and given up with."""
