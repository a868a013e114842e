"""Leases with fencing tokens (seed 000): only the server clock and the token decide.

A lease is the right to deliver into one scope of a lease-fenced inbox until its
expiry on the server clock. Tokens come from one counter per store and only grow, so
a new lease on a scope fences every older token at once. A device's clock is recorded
with what it sends and never consulted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from oncebox.domain import EXPIRED_LEASE, STALE_TOKEN, LeaseState
from oncebox.engine import log
from oncebox.errors import InvalidOperation
from oncebox.formats import Delivery
from oncebox.store.base import Tx

_SCOPE = re.compile(r"[^\x00-\x1f]{1,256}")


@dataclass(frozen=True)
class Lease:
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


def fence(lease: LeaseState | None, token: int | None, now: float) -> str | None:
    """The rejection reason for a delivery under ``token`` at server time ``now``, if any.

    The token is checked before the expiry: a superseded token is stale even when its
    lease would still be running, and an expired lease is expired whatever the device
    that sent it believes the time is.
    """
    if lease is None or lease.released_at is not None or token is None or token != lease.token:
        return STALE_TOKEN
    if now > lease.expires_at:
        return EXPIRED_LEASE
    return None


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


def issue(tx: Tx, inbox_id: int, inbox: str, scope: str, ttl: float, now: float) -> Lease:
    if not ttl > 0:
        raise InvalidOperation(f"a lease needs a positive ttl, not {ttl}")
    check_scope(scope)
    token = tx.next_token()
    expires_at = now + ttl
    tx.put_lease(inbox_id, scope, token, now, expires_at)
    log.event(
        tx, "lease", {"inbox": inbox, "scope": scope, "token": token, "expires_at": expires_at}
    )
    return Lease(inbox, scope, token, expires_at)


def release(tx: Tx, inbox_id: int, inbox: str, scope: str, token: int, now: float) -> None:
    current = tx.leases_for(inbox_id, [scope]).get(scope)
    if current is None or current.token != token or current.released_at is not None:
        raise InvalidOperation(
            f"token {token} does not hold a lease on scope {scope!r} of inbox {inbox}"
        )
    tx.release_lease(inbox_id, scope, token, now)
    log.event(tx, "release", {"inbox": inbox, "scope": scope, "token": token})
