"""The one fence (issue 20, item 4): its rule as properties, and its leases on every backend
for each thing it fences (a sender's scope, the log's sealer, a worker's work key)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import BoxFactory
from oncebox import ManualClock
from oncebox.domain import EXPIRED_LEASE, SEALER, STALE_TOKEN, Fenced, LeaseState, Resource
from oncebox.engine import fence
from oncebox.errors import InvalidOperation

NOW = 1_800_000_000.0
leases = st.builds(
    LeaseState,
    kind=st.sampled_from(list(Fenced)),
    owner=st.integers(0, 5),
    name=st.text(max_size=5),
    token=st.integers(1, 50),
    holder=st.none() | st.text(max_size=3),
    issued_at=st.floats(NOW - 100, NOW),
    expires_at=st.floats(NOW - 100, NOW + 100),
    released_at=st.none() | st.floats(NOW - 100, NOW),
)


@given(
    lease=st.none() | leases,
    token=st.none() | st.integers(1, 50),
    now=st.floats(NOW - 200, NOW + 200),
)
def test_the_token_is_checked_before_the_expiry(
    lease: LeaseState | None, token: int | None, now: float
) -> None:
    said = fence.refused(lease, token, now)
    current = lease is not None and lease.released_at is None and token == lease.token
    if not current:
        assert said == STALE_TOKEN  # whatever the clock says
    elif lease is not None and now > lease.expires_at:
        assert said == EXPIRED_LEASE
    else:
        assert said is None


@given(lease=st.none() | leases, now=st.floats(NOW - 200, NOW + 200))
def test_a_lease_is_live_exactly_while_its_own_token_would_pass(
    lease: LeaseState | None, now: float
) -> None:
    passes = lease is not None and fence.refused(lease, lease.token, now) is None
    assert fence.live(lease, now) == passes


RESOURCES = [Resource(Fenced.SCOPE, 1, "S1"), SEALER, Resource(Fenced.WORK, 1, "a\x1fb\x1fc")]


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: str(r.kind))
def test_one_fence_for_every_resource(
    make_box: BoxFactory, clock: ManualClock, resource: Resource
) -> None:
    box = make_box()

    def run(work):  # type: ignore[no-untyped-def]
        return box.store.atomic(work)

    first = run(lambda tx: fence.take(tx, resource, "one", 10, tx.now()))
    assert fence.live(first, clock.now)
    # A live lease is its holder's alone, and its holder may take it again.
    with pytest.raises(fence.LeaseHeld):
        run(lambda tx: fence.take(tx, resource, "two", 10, tx.now()))
    again = run(lambda tx: fence.take(tx, resource, "one", 10, tx.now()))
    assert again.token > first.token
    held = run(lambda tx: fence.held(tx, resource))
    assert fence.refused(held, first.token, clock.now) == STALE_TOKEN  # fenced by its own
    stale = run(lambda tx: fence.renew(tx, fence.held(tx, resource), first.token, 10, tx.now()))
    assert stale is None
    renewed = run(lambda tx: fence.renew(tx, fence.held(tx, resource), again.token, 20, tx.now()))
    assert renewed is not None and renewed.expires_at == clock.now + 20
    # Past its expiry by the server clock, anyone may take it, fencing the old holder.
    clock.advance(21)
    assert run(lambda tx: fence.refused(fence.held(tx, resource), again.token, tx.now())) == (
        EXPIRED_LEASE
    )
    taken = run(lambda tx: fence.take(tx, resource, "two", 10, tx.now()))
    assert taken.token > again.token and taken.holder == "two"
    assert not run(lambda tx: fence.release(tx, fence.held(tx, resource), again.token, tx.now()))
    assert run(lambda tx: fence.release(tx, fence.held(tx, resource), taken.token, tx.now()))
    released = run(lambda tx: fence.held(tx, resource))
    assert not fence.live(released, clock.now)
    assert fence.refused(released, taken.token, clock.now) == STALE_TOKEN


def test_tokens_only_grow_across_everything_fenced(make_box: BoxFactory) -> None:
    box = make_box()
    tokens = []
    for resource in RESOURCES * 3:
        lease = box.store.atomic(lambda tx, r=resource: fence.grant(tx, r, None, 5, tx.now()))
        tokens.append(lease.token)
    tokens.append(box.lease("feed", "S9", 5).token)  # a sender's lease, the same counter
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_superseding_fences_the_holder_without_taking_it(make_box: BoxFactory) -> None:
    box = make_box()
    held = box.store.atomic(lambda tx: fence.take(tx, SEALER, "sealer", 30, tx.now()))
    fresh = box.store.atomic(lambda tx: fence.supersede(tx, SEALER, tx.now()))
    assert fresh.token > held.token and fresh.holder is None and fresh.released_at is not None
    now = box.store.now()
    current = box.store.atomic(lambda tx: fence.held(tx, SEALER))
    assert fence.refused(current, held.token, now) == STALE_TOKEN
    assert not fence.live(current, now)


@pytest.mark.parametrize("ttl", [float("inf"), float("nan"), 0.0, -1.0])
def test_a_lease_runs_out_some_time(make_box: BoxFactory, ttl: float) -> None:
    """``box.lease(..., float("inf"))`` handed out a lease that never ran out (so only a
    newer lease could ever fence its holder) and wrote ``"expires_at":Infinity`` into the
    log, which is not JSON; ``oncebox lease --ttl forever`` was refused, the library not.
    A reconciler's ``claim_ttl`` likewise: a worker that died held its key for good."""
    box = make_box()
    with pytest.raises(InvalidOperation, match="ttl"):
        box.lease("feed", "S1", ttl)
    with pytest.raises(InvalidOperation, match="ttl"):
        box.reconciler("listing", claim_ttl=ttl)
    assert [e.step for e in box.log_entries()].count("lease") == 0
