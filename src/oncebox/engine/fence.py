"""The one fence: leases with fencing tokens, where only the server clock decides.

Everything that must have one writer at a time holds a lease on its resource (see
:class:`~oncebox.domain.Resource`): a sender on its scope of a lease-fenced inbox, the
log's dedicated sealer, a reconciler worker on a work key. The rules are the same for
all, and written only here:

- a token comes from one counter per store and only grows, so a newer lease fences
  every older token at once (:func:`grant`, :func:`supersede`);
- a write under a token is refused if the token is not the resource's current one
  (``stale_token``), and then if the lease ran out by the server clock
  (``expired_lease``): token first, then expiry (:func:`refused`). A device's clock, or
  a worker's, is never consulted;
- a lease that ran out, or was released, may be taken by anyone; a live one only by
  its holder (:func:`take`).

Reading a resource's lease (:meth:`~oncebox.store.base.FencePort.held`) holds it until
the transaction ends, so no new lease can slip in between a check and what it admits.
"""

from __future__ import annotations

import math

from oncebox.domain import EXPIRED_LEASE, STALE_TOKEN, LeaseState, Resource
from oncebox.errors import InvalidOperation
from oncebox.store.base import FencePort


class LeaseHeld(InvalidOperation):
    """Another holder's lease on the resource is live."""

    def __init__(self, lease: LeaseState) -> None:
        super().__init__(f"held by {lease.holder} until {lease.expires_at}")
        self.lease = lease


def check_ttl(ttl: object) -> None:
    """A lease's ttl: a number of seconds, positive and finite (one that never runs out
    is no lease, nor JSON, logged). Text or a bool is not one: compared, it would raise
    a TypeError, or pass for 1."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise InvalidOperation(f"a lease needs a positive ttl, and a finite one, not {ttl!r:.40}")


def refused(lease: LeaseState | None, token: int | None, now: float) -> str | None:
    """Why a write under ``token`` at server time ``now`` is refused, if it is.

    The token is checked before the expiry: a superseded token is stale even while its
    lease would still run, and an expired lease is expired whatever the writer believes
    the time is.
    """
    if lease is None or lease.released_at is not None or token is None or token != lease.token:
        return STALE_TOKEN
    if now > lease.expires_at:
        return EXPIRED_LEASE
    return None


def live(lease: LeaseState | None, now: float) -> bool:
    """Whether someone holds the lease now: neither released nor run out."""
    return lease is not None and lease.released_at is None and now <= lease.expires_at


def held(tx: FencePort, resource: Resource) -> LeaseState | None:
    """The resource's lease, held alone until the transaction ends."""
    found = tx.held(resource.kind, resource.owner, [resource.name], exclusive=True)
    return found.get(resource.name)


def grant(
    tx: FencePort, resource: Resource, holder: str | None, ttl: float, now: float
) -> LeaseState:
    """A new lease on ``resource`` until ``now + ttl``: the next token, which fences
    every older one."""
    check_ttl(ttl)
    lease = LeaseState(*resource, tx.next_token(), holder, now, now + ttl)
    tx.put_lease(lease)
    return lease


def take(tx: FencePort, resource: Resource, holder: str, ttl: float, now: float) -> LeaseState:
    """``holder``'s lease on ``resource``: granted if nobody else holds a live one
    (the holder's own live lease is taken again, under a new token)."""
    check_ttl(ttl)  # before a live lease is reported held: the caller's error comes first
    current = held(tx, resource)
    if current is not None and live(current, now) and current.holder != holder:
        raise LeaseHeld(current)
    return grant(tx, resource, holder, ttl, now)


def renew(
    tx: FencePort, lease: LeaseState | None, token: int, ttl: float, now: float
) -> LeaseState | None:
    """The lease under ``token`` extended to ``now + ttl``, or None if the fence refuses
    the token (superseded, released or run out)."""
    if lease is None or refused(lease, token, now) is not None:
        return None
    renewed = LeaseState(*lease.resource, lease.token, lease.holder, lease.issued_at, now + ttl)
    tx.put_lease(renewed)
    return renewed


def release(tx: FencePort, lease: LeaseState | None, token: int, now: float) -> bool:
    """Give up the lease held under ``token``; False if it is not the current one."""
    if lease is None or lease.token != token or lease.released_at is not None:
        return False
    tx.put_lease(
        LeaseState(*lease.resource, lease.token, lease.holder, lease.issued_at,
                   lease.expires_at, now)
    )  # fmt: skip
    return True


def supersede(tx: FencePort, resource: Resource, now: float) -> LeaseState:
    """Fence whoever holds ``resource`` without taking it: a fresh token, released at
    once (a writer taking the log over from a sealer whose lease ran out)."""
    lease = LeaseState(*resource, tx.next_token(), None, now, now, now)
    tx.put_lease(lease)
    return lease

