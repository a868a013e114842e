"""Lease and fencing simulation: many holders, one controllable server clock, one checker.

Why: fencing (DESIGN.md I3) is only as good as the cases it has met. Here seeded holders
take, renew, release and lose leases on a :class:`oncebox.ManualClock`; they pause for
longer than the TTL and come back writing with the token they held, their device clocks
run ahead or behind (and ride along with every delivery as ``device_time``), and some
deliberately write with old, forged or foreign tokens; now and then a relay sends several
writes at one instant as one batch (its own, an old or a peer's token, a forged one, a
resend, the same body twice), which the engine decides on its set-based path, each
delivery against its scope's lease in delivery order. Every attempt goes into a history
with the server time and the store's answer, and the history is checked against a model
of the lease that knows only the server clock and the tokens:

- a write is accepted only if its token was the scope's current, unreleased token and
  the server time was not past its expiry (else ``stale_token`` first, then
  ``expired_lease``), and its verdict (accepted or duplicate) follows content dedup;
- from the store's own answers alone: at no point are writes of two tokens of one scope
  accepted at once (same server time, no lease change between), and never is an older
  token's write accepted after a newer token's write on the same scope;
- tokens only grow, expiries are ``server time + ttl``, releases succeed only for the
  current token, and the final store holds exactly the records the model accepted.

Everything follows from the seed, so a failure replays from the command it prints.
Negative controls show the checker can fail: a doctored history (a refused stale write
marked accepted) must be flagged; the same simulation against a deliberately broken
fence (monkeypatched in this process only) must show stale or expired writes accepted;
and two broken models (one trusting device clocks, one ignoring supersession) must
disagree with the store, which shows skew and stale tokens actually decided outcomes.

    .venv/bin/python reliability/leasesim.py                  # SQLite and PostgreSQL
    .venv/bin/python reliability/leasesim.py --seed 17 --seeds 1 --backend sqlite
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.domain import LeaseState
from oncebox.engine import fence

INBOXES = ("feed", "feed2")  # two fenced inboxes: scopes of one never fence the other
STALE = "stale_token"
EXPIRED = "expired_lease"
REFUSALS = (STALE, EXPIRED)
PASSED = ("accepted", "duplicate")
START = 1_800_000_000.0
HERE = Path(__file__).resolve()


# -- the history ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One attempt as the holder saw it. ``result`` for a write is the verdict, or the
    refusal reason; for take/renew ``ok`` (with ``token`` and ``expires_at`` as issued);
    for release ``ok`` or ``refused``."""

    seq: int
    at: float  # the server clock when the attempt was made
    holder: int
    op: str  # take | renew | release | write
    inbox: str
    scope: str
    token: int | None
    result: str
    kind: str = ""  # what the write was meant to test: normal, zombie, old, forged, ...
    ttl: float | None = None
    expires_at: float | None = None
    body: str | None = None
    device_time: float | None = None
    believed_valid: bool | None = None  # the holder's own view from its device clock
    batch: int = 0  # the size of the batch the write went in (0: sent on its own)


@dataclass
class Report:
    """What the checker found; every ``*_accepted`` and mismatch figure must be 0."""

    writes: int = 0
    stale_accepted: int = 0  # token not the scope's current one, yet accepted
    expired_accepted: int = 0  # current token past its expiry, yet accepted
    valid_refused: int = 0
    wrong_reason: int = 0  # stale_token against expired_lease (token first, then expiry)
    wrong_verdict: int = 0  # accepted against duplicate
    two_holders: int = 0  # two tokens of one scope accepted at one instant
    token_regressions: int = 0  # an older token accepted after a newer one on a scope
    bad_issue: int = 0  # a token not above every earlier one, or a wrong expiry
    release_mismatch: int = 0
    final_mismatch: int = 0  # store records or lease rows against the model
    at_expiry: int = 0  # current-token writes at exactly the expiry instant (valid)
    just_after_expiry: int = 0  # current-token writes at most 1 ms past it (expired)
    outcomes: Counter[str] = field(default_factory=Counter)
    batched_outcomes: Counter[str] = field(default_factory=Counter)  # of writes in batches
    in_batches: int = 0  # anomalies flagged on writes that went in a batch
    examples: list[str] = field(default_factory=list)

    ANOMALIES = (
        "stale_accepted",
        "expired_accepted",
        "valid_refused",
        "wrong_reason",
        "wrong_verdict",
        "two_holders",
        "token_regressions",
        "bad_issue",
        "release_mismatch",
        "final_mismatch",
    )

    def anomalies(self) -> int:
        return sum(getattr(self, name) for name in self.ANOMALIES)

    def flag(self, name: str, event: Event | None, note: str) -> None:
        setattr(self, name, getattr(self, name) + 1)
        self.in_batches += bool(event and event.batch)
        if len(self.examples) < 12:
            self.examples.append(f"{name}: {note}" + (f" | {event}" if event else ""))

    def merge(self, other: Report) -> None:
        self.writes += other.writes
        self.at_expiry += other.at_expiry
        self.just_after_expiry += other.just_after_expiry
        for name in self.ANOMALIES:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.outcomes.update(other.outcomes)
        self.batched_outcomes.update(other.batched_outcomes)
        self.in_batches += other.in_batches
        self.examples.extend(other.examples[: max(0, 12 - len(self.examples))])


# -- the model ------------------------------------------------------------------------------
@dataclass
class ScopeState:
    token: int | None = None
    expires_at: float = float("-inf")
    released: bool = False


Decide = Callable[[ScopeState, Event], str | None]


def server_model(state: ScopeState, write: Event) -> str | None:
    """The lease as DESIGN.md states it: the token first, then the server clock."""
    if state.token is None or state.released or write.token != state.token:
        return STALE
    if write.at > state.expires_at:
        return EXPIRED
    return None


def device_clock_model(state: ScopeState, write: Event) -> str | None:
    """Broken on purpose: trusts the device time the delivery carried."""
    if state.token is None or state.released or write.token != state.token:
        return STALE
    assert write.device_time is not None
    return EXPIRED if write.device_time > state.expires_at else None


def no_supersession_model(
    issued: dict[tuple[str, str], dict[int, float]],
) -> Decide:
    """Broken on purpose: any token ever issued on the scope counts until its own expiry."""

    def decide(state: ScopeState, write: Event) -> str | None:
        expiry = issued[(write.inbox, write.scope)].get(write.token or -1)
        if expiry is None:
            return STALE
        return EXPIRED if write.at > expiry else None

    return decide


@dataclass(frozen=True)
class Final:
    """The store at the end: which written bodies it holds and how many records in all
    (so nothing is there that was never sent), per inbox; lease rows per scope."""

    records: dict[str, set[str]]
    counts: dict[str, int]
    leases: dict[tuple[str, str], tuple[int, float, bool]]


def check(
    history: Sequence[Event], final: Final | None = None, decide: Decide = server_model
) -> Report:
    """Check a history against the lease model; with ``final``, the end state as well."""
    report = Report()
    scopes: dict[tuple[str, str], ScopeState] = defaultdict(ScopeState)
    issued: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    stored: dict[str, set[str]] = defaultdict(set)
    highest = 0
    # Per scope: the last accepted write's token, and the "instant" it was accepted in:
    # (server time, lease changes on the scope so far). Two tokens accepted in one instant
    # means two holders at once; a lower token after a higher one, a zombie getting in.
    lease_changes: Counter[tuple[str, str]] = Counter()
    instant_tokens: dict[tuple[str, str], tuple[tuple[float, int], set[int]]] = {}
    newest_written: dict[tuple[str, str], int] = {}
    for event in sorted(history, key=lambda e: e.seq):
        where = (event.inbox, event.scope)
        state = scopes[where]
        if event.op in ("take", "renew"):
            assert event.token is not None and event.expires_at is not None
            assert event.ttl is not None
            if event.token <= highest:
                report.flag("bad_issue", event, f"token {event.token} not above {highest}")
            if event.expires_at != event.at + event.ttl:
                report.flag("bad_issue", event, "expiry is not server time + ttl")
            highest = max(highest, event.token)
            scopes[where] = ScopeState(event.token, event.expires_at, False)
            issued[where][event.token] = event.expires_at
            lease_changes[where] += 1
        elif event.op == "release":
            ok = state.token is not None and not state.released and event.token == state.token
            if ok != (event.result == "ok"):
                report.flag("release_mismatch", event, f"model says {'ok' if ok else 'refused'}")
            if event.result == "ok":
                state.released = True
                lease_changes[where] += 1
        elif event.op == "write":
            report.writes += 1
            report.outcomes[f"{event.kind}:{event.result}"] += 1
            if event.batch:
                report.batched_outcomes[event.result] += 1
            expected = decide(state, event)
            if event.token == state.token and not state.released:
                self_at = event.at - state.expires_at
                report.at_expiry += self_at == 0
                report.just_after_expiry += 0 < self_at <= 1e-3
            passed = event.result in PASSED
            if expected is None and not passed:
                report.flag("valid_refused", event, "model: the token was current and unexpired")
            elif expected is not None and passed:
                name = "stale_accepted" if expected == STALE else "expired_accepted"
                report.flag(name, event, f"model: {expected}")
            elif expected is not None and event.result != expected:
                report.flag("wrong_reason", event, f"model: {expected}")
            if passed:
                assert event.body is not None and event.token is not None
                new = event.body not in stored[event.inbox]
                if (event.result == "accepted") != new:
                    report.flag(
                        "wrong_verdict", event, f"model: {'accepted' if new else 'duplicate'}"
                    )
                stored[event.inbox].add(event.body)
                instant = (event.at, lease_changes[where])
                seen = instant_tokens.get(where)
                tokens = seen[1] if seen and seen[0] == instant else set()
                tokens.add(event.token)
                instant_tokens[where] = (instant, tokens)
                if len(tokens) > 1:
                    report.flag("two_holders", event, f"tokens {sorted(tokens)} at one instant")
                if event.token < newest_written.get(where, 0):
                    report.flag("token_regressions", event, f"after token {newest_written[where]}")
                newest_written[where] = max(newest_written.get(where, 0), event.token)
    if final is not None:
        for inbox in INBOXES:
            want = {_identity(body) for body in stored[inbox]}
            have = final.records.get(inbox, set())
            if want != have or final.counts.get(inbox, 0) != len(want):
                report.flag(
                    "final_mismatch",
                    None,
                    f"{inbox}: {len(want - have)} accepted but missing, "
                    f"{len(have - want)} stored but never accepted, "
                    f"{final.counts.get(inbox, 0)} records in all for {len(want)} accepted",
                )
        for where, state in scopes.items():
            if state.token is None:
                continue
            row = final.leases.get(where)
            if row != (state.token, state.expires_at, state.released):
                report.flag("final_mismatch", None, f"lease {where}: store {row}, model {state}")
    return report


def _identity(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def doctor(
    history: Sequence[Event], reason: str, limit: int = 3, after_newer: bool = False
) -> tuple[list[Event], int]:
    """A copy of ``history`` with up to ``limit`` writes refused for ``reason`` marked
    accepted, and how many were changed: the checker must flag each one. With
    ``after_newer``, only writes whose scope already took a write under a newer token
    (a zombie getting in: the two-holder checks must see it too)."""
    doctored = list(history)
    changed = 0
    newest: dict[tuple[str, str], int] = {}
    for i, event in enumerate(doctored):
        if event.op != "write" or event.token is None:
            continue
        where = (event.inbox, event.scope)
        if event.result in PASSED:
            newest[where] = max(newest.get(where, 0), event.token)
        if after_newer and not event.token < newest.get(where, 0):
            continue
        if event.result == reason and event.kind != "forged":
            doctored[i] = replace(event, result="accepted", body=f"doctored-{event.seq}")
            changed += 1
            if changed == limit:
                break
    return doctored, changed


# -- the simulation -------------------------------------------------------------------------
@dataclass
class Holder:
    id: int
    skew: float  # device clock minus server clock
    inbox: str | None = None
    scope: str | None = None
    token: int | None = None
    expires_at: float = 0.0
    paused_until: float = float("-inf")
    resumed: bool = False
    old: list[tuple[str, str, int]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # bodies to send again
    sent: list[str] = field(default_factory=list)  # accepted bodies (resent: duplicates)


@dataclass(frozen=True)
class Params:
    seed: int
    ops: int
    holders: int
    scopes: int
    ttl: float


@dataclass
class Run:
    params: Params
    history: list[Event]
    final: Final
    pauses: int
    skews: list[float]
    clock_steps: int
    server_span: float
    believed_but_expired: int  # device clock said valid, server said expired
    believed_expired_but_valid: int  # device clock said expired, server accepted


def params_for(seed: int, ops: int) -> Params:
    """Shape from the seed too: one scope (all holders fight) up to many, short to long
    TTLs, a few holders to many."""
    rnd = random.Random(f"shape-{seed}")
    return Params(
        seed=seed,
        ops=ops,
        holders=rnd.choice([2, 3, 5, 8, 16, 32]),
        scopes=rnd.choice([1, 1, 2, 4, 8]),
        ttl=rnd.choice([0.5, 5.0, 30.0, 300.0]),
    )


def simulate(params: Params, url: str = "sqlite:///:memory:") -> Run:
    """Run one seeded simulation against a fresh store at ``url``."""
    rnd = random.Random(params.seed)
    ttl = params.ttl
    clock = ManualClock(START)
    specs = [InboxSpec(name, codec="feed") for name in INBOXES]
    holders = []
    for i in range(params.holders):
        draw = rnd.random()
        # Both ways, and well past the TTL: a device clock is recorded, never trusted.
        skew = 0.0 if draw < 0.3 else rnd.uniform(-2 * ttl, 2 * ttl)
        holders.append(Holder(i, skew))
    history: list[Event] = []
    seq = 0
    pauses = clock_steps = 0
    believed_but_expired = believed_expired_but_valid = 0
    highest = 0
    box = oncebox.open(url, inboxes=specs, clock=clock)
    try:

        def record(**fields: Any) -> Event:
            nonlocal seq
            seq += 1
            event = Event(seq=seq, at=clock.now, **fields)
            history.append(event)
            return event

        def take(h: Holder, op: str, inbox: str, scope: str) -> None:
            nonlocal highest
            lease_ttl = ttl * rnd.choice([0.5, 1.0, 1.0, 2.0])
            lease = box.lease(inbox, scope, lease_ttl)
            if h.token is not None and h.inbox and h.scope:
                h.old.append((h.inbox, h.scope, h.token))
            h.inbox, h.scope, h.token, h.expires_at = inbox, scope, lease.token, lease.expires_at
            highest = max(highest, lease.token)
            record(
                holder=h.id,
                op=op,
                inbox=inbox,
                scope=scope,
                token=lease.token,
                result="ok",
                ttl=lease_ttl,
                expires_at=lease.expires_at,
            )

        def write(h: Holder, kind: str, inbox: str, scope: str, token: int, body: str) -> str:
            return send(h, inbox, [(kind, scope, token, body)])[0]

        def send(h: Holder, inbox: str, writes: Sequence[tuple[str, str, int, str]]) -> list[str]:
            """Writes (kind, scope, token, body) to ``inbox`` at this instant: one on its
            own, several as one batch. Returns each one's verdict or refusal reason."""
            nonlocal believed_but_expired, believed_expired_but_valid
            device = clock.now + h.skew
            believed = device <= h.expires_at
            deliveries = [
                Delivery(
                    body.encode(),
                    snapshot_id=scope,
                    lease_token=token,
                    device_time=repr(device),
                    delivery_id=f"d{seq}-{j}",
                )
                for j, (_, scope, token, body) in enumerate(writes)
            ]
            if len(deliveries) == 1:
                decisions = [box.ingest(inbox, deliveries[0])]
            else:
                decisions = box.ingest_batch(inbox, deliveries)
            results = []
            for (kind, scope, token, body), decision in zip(writes, decisions, strict=True):
                result = decision.reason if decision.reason in REFUSALS else str(decision.verdict)
                assert result in (*PASSED, *REFUSALS), decision
                if decision.may_ack != (result in PASSED):
                    raise AssertionError(f"may_ack {decision.may_ack} on {result}: {decision}")
                if kind == "normal" and result == EXPIRED and believed:
                    believed_but_expired += 1
                if kind in ("normal", "sloppy") and result in PASSED and not believed:
                    believed_expired_but_valid += 1
                record(
                    holder=h.id,
                    op="write",
                    inbox=inbox,
                    scope=scope,
                    token=token,
                    result=result,
                    kind=kind,
                    body=body,
                    device_time=device,
                    believed_valid=believed,
                    batch=len(writes) if len(writes) > 1 else 0,
                )
                results.append(result)
            return results

        def relay(h: Holder, inbox: str, scope: str, token: int, body: str) -> None:
            """Several writes at one instant in one batch, through one inbox: the
            holder's own (normal or sloppy), and mixed in an old token's, a peer's, a
            forged one, a resend and the same new body twice."""
            own = "normal" if clock.now + h.skew <= h.expires_at else "sloppy"
            writes: list[tuple[str, str, int, str]] = []
            fresh: list[str] = []
            resent: list[str] = []
            for j in range(rnd.randint(2, 6)):
                pick = rnd.random()
                olds = [(s, t) for i, s, t in h.old if i == inbox]
                peers = [p for p in holders if p is not h and p.token and p.inbox == inbox]
                if pick < 0.15 and olds:
                    writes.append(("old", *rnd.choice(olds), f"{body}-b{j}"))
                elif pick < 0.25 and peers:
                    peer = rnd.choice(peers)
                    assert peer.scope is not None and peer.token is not None
                    writes.append(("borrowed", peer.scope, peer.token, f"{body}-b{j}"))
                elif pick < 0.32:
                    writes.append(("forged", scope, highest + rnd.randint(1, 1000), f"{body}-b{j}"))
                elif pick < 0.42 and h.refused:
                    again = h.refused.pop(rnd.randrange(len(h.refused)))
                    writes.append(("resend", scope, token, again))
                    resent.append(again)
                elif pick < 0.55 and (fresh or h.sent):
                    writes.append(("redelivery", scope, token, rnd.choice(fresh or h.sent)))
                else:
                    fresh.append(f"{body}-b{j}")
                    writes.append((own, scope, token, fresh[-1]))
            for (kind, _, _, sent), result in zip(writes, send(h, inbox, writes), strict=True):
                if kind in (own, "resend"):
                    (h.sent if result in PASSED else h.refused).append(sent)

        def release(h: Holder, inbox: str, scope: str, token: int) -> None:
            try:
                box.release(inbox, scope, token)
                outcome = "ok"
            except oncebox.InvalidOperation:
                outcome = "refused"
            record(holder=h.id, op="release", inbox=inbox, scope=scope, token=token, result=outcome)

        def scope_pick() -> tuple[str, str]:
            return rnd.choice(INBOXES), f"scope-{rnd.randrange(params.scopes)}"

        done = 0
        while done < params.ops:
            roll = rnd.random()
            if roll < 0.3:
                clock_steps += 1
                step = rnd.random()
                live = [h.expires_at for h in holders if h.token and h.expires_at >= clock.now]
                if step < 0.15 and live:
                    clock.now = rnd.choice(live)  # exactly on an expiry: still valid
                elif step < 0.25 and live:
                    clock.now = rnd.choice(live) + rnd.choice([1e-6, 1e-3, 0.5])
                elif step < 0.3:
                    clock.advance(ttl * rnd.uniform(1.0, 3.0))
                else:
                    clock.advance(ttl * rnd.uniform(0.0, 0.25))
                continue
            h = rnd.choice(holders)
            if clock.now < h.paused_until:
                continue  # stopped: a GC pause, a suspended VM, a partition
            body = f"s{params.seed}-h{h.id}-n{seq}"
            if h.token is None or h.inbox is None or h.scope is None:
                if rnd.random() < 0.3:  # idle holders come back now and then
                    done += 1
                    take(h, "take", *scope_pick())
                continue
            done += 1
            if h.resumed:
                # Back from a pause longer than the TTL: it still believes its lease.
                h.resumed = False
                write(h, "zombie", h.inbox, h.scope, h.token, body)
                continue
            # The holder's own view: the expiry it was told, against its device clock.
            believes = clock.now + h.skew <= h.expires_at
            action = rnd.random()
            if action < 0.03:
                done -= 1  # a pause is not an operation on the store
                pauses += 1
                h.paused_until = clock.now + ttl * rnd.uniform(1.1, 3.0)
                h.resumed = True
            elif action < 0.07 and h.old:
                inbox, scope, token = rnd.choice(h.old)
                write(h, "old", inbox, scope, token, body)
            elif action < 0.08:
                write(h, "forged", h.inbox, h.scope, highest + rnd.randint(1, 1000), body)
            elif action < 0.09:
                other = INBOXES[1 - INBOXES.index(h.inbox)]
                write(h, "foreign", other, h.scope, h.token, body)
            elif action < 0.12:
                release(h, h.inbox, h.scope, h.token)
                h.old.append((h.inbox, h.scope, h.token))
                h.inbox = h.scope = h.token = None
            elif action < 0.14 and h.old:
                # Releasing a token it lost long ago: refused unless still current.
                release(h, *rnd.choice(h.old))
            elif action < 0.17 and h.refused:
                # A body once fenced out left no dedup state: sent again, it may land.
                again = h.refused.pop(rnd.randrange(len(h.refused)))
                if write(h, "resend", h.inbox, h.scope, h.token, again) in PASSED:
                    h.sent.append(again)
                else:
                    h.refused.append(again)
            elif action < 0.19 and h.sent:
                write(h, "redelivery", h.inbox, h.scope, h.token, rnd.choice(h.sent))
            elif action < 0.21 and h.id % 4 == 0 and len(holders) > 1:
                # A misbehaving peer copies another holder's scope and token, no lease.
                peer = rnd.choice([p for p in holders if p is not h])
                if peer.token is not None and peer.inbox and peer.scope:
                    write(h, "borrowed", peer.inbox, peer.scope, peer.token, body)
                else:
                    done -= 1
            elif 0.21 <= action < 0.24:
                relay(h, h.inbox, h.scope, h.token, body)
            elif (not believes and action < 0.8) or (believes and action < 0.28):
                take(h, "renew", h.inbox, h.scope)
            else:
                # "sloppy": writes although its own clock says the lease ran out.
                kind = "normal" if believes else "sloppy"
                result = write(h, kind, h.inbox, h.scope, h.token, body)
                (h.sent if result in PASSED else h.refused).append(body)

        written: dict[str, set[str]] = defaultdict(set)
        for event in history:
            if event.op == "write" and event.body is not None:
                written[event.inbox].add(event.body)
        records = {inbox: _stored_identities(box, inbox, written[inbox]) for inbox in INBOXES}
        counts = {inbox: int(box.stats(inbox)["records"]) for inbox in INBOXES}
        lease_rows = {
            (inbox, row.scope): (row.token, row.expires_at, row.released_at is not None)
            for inbox in INBOXES
            for row in box.leases(inbox)
        }
        verification = box.verify()
        if not verification.ok:
            raise AssertionError(f"log verify failed: {verification}")
    finally:
        box.close()
    return Run(
        params,
        history,
        Final(records, counts, lease_rows),
        pauses,
        [h.skew for h in holders],
        clock_steps,
        clock.now - START,
        believed_but_expired,
        believed_expired_but_valid,
    )


def _stored_identities(box: oncebox.Oncebox, inbox: str, bodies: set[str]) -> set[str]:
    """The identities among every body ever sent to ``inbox`` that the store holds."""
    return {
        identity for identity in map(_identity, bodies) if box.record(inbox, identity) is not None
    }


# -- negative controls ------------------------------------------------------------------------
def _fence_ignoring_supersession(
    lease: LeaseState | None, token: int | None, now: float
) -> str | None:
    """Broken on purpose: any token passes while the scope's current lease runs."""
    if lease is None or lease.released_at is not None or token is None:
        return STALE
    return EXPIRED if now > lease.expires_at else None


def _fence_ignoring_expiry(lease: LeaseState | None, token: int | None, now: float) -> str | None:
    """Broken on purpose: the current token passes whatever the server clock says."""
    return _original_fence(lease, token, float("-inf"))


_original_fence = fence.refused
BROKEN_FENCES: dict[str, Callable[[LeaseState | None, int | None, float], str | None]] = {
    "ignores supersession": _fence_ignoring_supersession,
    "ignores expiry": _fence_ignoring_expiry,
}


@contextlib.contextmanager
def broken_fence(name: str) -> Iterator[None]:
    """Swap the one fence's rule for a broken one in this process (the engine looks it
    up as ``fence.refused`` on every delivery), and put the real one back afterwards."""
    fence.refused = BROKEN_FENCES[name]  # type: ignore[assignment]
    try:
        yield
    finally:
        fence.refused = _original_fence


@dataclass
class Controls:
    doctored: int = 0
    doctored_flagged: int = 0  # stale_accepted found in the doctored history
    doctored_zombies: int = 0  # stale writes after a newer token's, marked accepted
    doctored_two_holders: int = 0  # two-holder or token-order findings among those
    doctored_expired: int = 0
    doctored_expired_flagged: int = 0
    broken: dict[str, Report] = field(default_factory=dict)
    device_model_disagrees: int = 0
    supersession_model_disagrees: int = 0

    def failures(self) -> list[str]:
        out = []
        if self.doctored == 0 or self.doctored_flagged < self.doctored:
            out.append(
                f"checker flagged {self.doctored_flagged} of {self.doctored} doctored writes"
            )
        if self.doctored_zombies == 0 or self.doctored_two_holders < self.doctored_zombies:
            out.append(
                f"two-holder checks flagged {self.doctored_two_holders} of "
                f"{self.doctored_zombies} doctored zombie writes"
            )
        if self.doctored_expired == 0 or self.doctored_expired_flagged < self.doctored_expired:
            out.append(
                f"checker flagged {self.doctored_expired_flagged} of {self.doctored_expired} "
                f"doctored expired writes"
            )
        for name, report in self.broken.items():
            if report.stale_accepted + report.expired_accepted == 0:
                out.append(f"the fence that {name} was not caught")
        if self.device_model_disagrees == 0:
            out.append("device clocks never mattered to a decision: the skews are too small")
        if self.supersession_model_disagrees == 0:
            out.append("supersession never mattered to a decision")
        return out


def disagreements(run: Run, decide: Decide) -> int:
    """Writes the store decided differently from a (broken) model."""
    report = check(run.history, decide=decide)
    return report.stale_accepted + report.expired_accepted + report.valid_refused


def controls(seed: int, ops: int, url: str = "sqlite:///:memory:") -> Controls:
    """Every negative control on one seed's run (and two more runs with broken fences)."""
    found = Controls()
    run = simulate(params_for(seed, ops), url)
    doctored, found.doctored = doctor(run.history, STALE)
    doctored_report = check(doctored)
    found.doctored_flagged = doctored_report.stale_accepted
    zombies, found.doctored_zombies = doctor(run.history, STALE, after_newer=True)
    zombie_report = check(zombies)
    found.doctored_two_holders = zombie_report.two_holders + zombie_report.token_regressions
    expired, found.doctored_expired = doctor(run.history, EXPIRED)
    found.doctored_expired_flagged = check(expired).expired_accepted
    found.device_model_disagrees = disagreements(run, device_clock_model)
    issued: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for event in run.history:
        if event.op in ("take", "renew") and event.token is not None:
            assert event.expires_at is not None
            issued[(event.inbox, event.scope)][event.token] = event.expires_at
    found.supersession_model_disagrees = disagreements(run, no_supersession_model(issued))
    for name in BROKEN_FENCES:
        with broken_fence(name):
            broken = simulate(params_for(seed, ops), url)
        found.broken[name] = check(broken.history, broken.final)
    return found


# -- figures ------------------------------------------------------------------------------------
@dataclass
class Tally:
    """Figures over many runs."""

    runs: int = 0
    report: Report = field(default_factory=Report)
    ops: Counter[str] = field(default_factory=Counter)
    holders: int = 0
    scopes: int = 0
    pauses: int = 0
    skews: list[float] = field(default_factory=list)
    clock_steps: int = 0
    server_span: float = 0.0
    believed_but_expired: int = 0
    believed_expired_but_valid: int = 0
    batches: int = 0
    batched_writes: int = 0
    failed_seeds: list[int] = field(default_factory=list)

    def add(self, run: Run, report: Report) -> None:
        self.runs += 1
        self.report.merge(report)
        for event in run.history:
            label = event.op if event.op != "release" else f"release:{event.result}"
            self.ops[label] += 1
            if event.batch:
                self.batched_writes += 1
                self.batches += 1 / event.batch
        self.holders += run.params.holders
        self.scopes += run.params.scopes * len(INBOXES)
        self.pauses += run.pauses
        self.skews.extend(run.skews)
        self.clock_steps += run.clock_steps
        self.server_span += run.server_span
        self.believed_but_expired += run.believed_but_expired
        self.believed_expired_but_valid += run.believed_expired_but_valid
        if report.anomalies():
            self.failed_seeds.append(run.params.seed)

    def lines(self) -> list[str]:
        r = self.report
        ahead = [s for s in self.skews if s > 0]
        behind = [s for s in self.skews if s < 0]
        kinds: Counter[str] = Counter()
        results: Counter[str] = Counter()
        for label, n in r.outcomes.items():
            kind, _, result = label.partition(":")
            kinds[kind] += n
            results[result] += n
        total_ops = sum(self.ops.values())
        return [
            f"  operations: {total_ops:,} (take {self.ops['take']:,}, renew {self.ops['renew']:,}, "
            f"release {self.ops['release:ok']:,} + {self.ops['release:refused']:,} refused, "
            f"write {self.ops['write']:,}, of which {self.batched_writes:,} in "
            f"{round(self.batches):,} batches of 2 to 6); clock steps {self.clock_steps:,}, "
            f"server time spanned {self.server_span:,.0f} s",
            f"  holders: {self.holders:,}; scopes: {self.scopes:,} (over {len(INBOXES)} fenced "
            f"inboxes); pauses longer than the TTL: {self.pauses:,}",
            f"  device skews: {len(ahead)} ahead (up to +{max(ahead, default=0):,.1f} s), "
            f"{len(behind)} behind (down to {min(behind, default=0):,.1f} s), "
            f"{len(self.skews) - len(ahead) - len(behind)} none",
            "  writes by kind: " + ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())),
            "  write outcomes: " + ", ".join(f"{k} {n:,}" for k, n in sorted(results.items())),
            "  in batches: "
            + ", ".join(f"{k} {n:,}" for k, n in sorted(r.batched_outcomes.items())),
            "  outcomes by kind: " + ", ".join(f"{k} {n:,}" for k, n in sorted(r.outcomes.items())),
            f"  current-token writes at exactly the expiry instant {r.at_expiry:,} (valid), "
            f"at most 1 ms past it {r.just_after_expiry:,} (expired)",
            f"  device clock said valid, server clock said expired (refused): "
            f"{self.believed_but_expired:,}; device said expired, server accepted: "
            f"{self.believed_expired_but_valid:,}",
            f"  stale-token writes accepted {r.stale_accepted}; expired-lease writes accepted "
            f"{r.expired_accepted}; two holders of one scope at once {r.two_holders}; older "
            f"token accepted after a newer one {r.token_regressions}",
            f"  valid writes refused {r.valid_refused}; wrong refusal reason {r.wrong_reason}; "
            f"accepted/duplicate wrong {r.wrong_verdict}; bad token or expiry issued "
            f"{r.bad_issue}; release mismatches {r.release_mismatch}; final store against "
            f"the model {r.final_mismatch}",
        ]


def replay_command(seed: int, ops: int, backend: str) -> str:
    return (
        f".venv/bin/python reliability/leasesim.py --seed {seed} --seeds 1 --ops {ops} "
        f"--backend {backend} --no-controls"
    )


def campaign(
    label: str,
    backend: str,
    urls: Callable[[int], contextlib.AbstractContextManager[str]],
    seeds: Sequence[int],
    ops: int,
) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for seed in seeds:
        with urls(seed) as url:
            try:
                run = simulate(params_for(seed, ops), url)
            except Exception as exc:
                print(
                    f"  seed {seed} raised {exc!r}\n  replay: {replay_command(seed, ops, backend)}"
                )
                tally.failed_seeds.append(seed)
                continue
        report = check(run.history, run.final)
        tally.add(run, report)
        if report.anomalies():
            print(f"  seed {seed}: {report.anomalies()} anomalies")
            for example in report.examples:
                print(f"    {example}")
            print(f"  replay: {replay_command(seed, ops, backend)}")
    elapsed = time.perf_counter() - started
    print(
        f"{label}: {tally.runs} seeds ({seeds[0]}..{seeds[-1]}), {ops:,} operations each, "
        f"{elapsed:.1f} s"
    )
    for line in tally.lines():
        print(line)
    return tally


@contextlib.contextmanager
def _memory(_seed: int) -> Iterator[str]:
    yield "sqlite:///:memory:"


@contextlib.contextmanager
def _pg_server() -> Iterator[Any]:
    """A throwaway PostgreSQL server (tests/pgcluster.py, fsync off), or None."""
    sys.path.insert(0, str(HERE.parent.parent / "tests"))
    from pgcluster import PgCluster, throwaway_server

    if not PgCluster.from_env() and not PgCluster.available():
        yield None
        return
    with throwaway_server("oncebox-leasesim-pg-") as server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--seeds", type=int, default=40, help="seeds on SQLite (default 40)")
    p.add_argument("--ops", type=int, default=5_000, help="operations per seed (default 5,000)")
    p.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    p.add_argument("--pg-seeds", type=int, default=6, help="seeds on PostgreSQL (default 6)")
    p.add_argument("--pg-ops", type=int, default=2_000, help="operations per PostgreSQL seed")
    p.add_argument("--no-controls", action="store_true", help="skip the negative controls")
    args = p.parse_args(argv)
    started = time.perf_counter()
    failed: list[str] = []
    if args.backend in ("sqlite", "both"):
        seeds = range(args.seed, args.seed + args.seeds)
        tally = campaign("SQLite (:memory:)", "sqlite", _memory, seeds, args.ops)
        failed += [f"sqlite seed {s}" for s in tally.failed_seeds]
    if args.backend in ("postgres", "both"):
        with _pg_server() as server:
            if server is None:
                print("PostgreSQL: no server binaries here; skipped")
                failed.append("postgres not run")
            else:

                @contextlib.contextmanager
                def database(seed: int) -> Iterator[str]:
                    name = f"leasesim_{seed}_{int(time.time() * 1000) % 10**9}"
                    url = server.create_database(name)
                    try:
                        yield url
                    finally:
                        server.drop_database(name)

                count = args.pg_seeds if args.backend == "both" else args.seeds
                ops = args.pg_ops if args.backend == "both" else args.ops
                seeds = range(args.seed, args.seed + count)
                tally = campaign(
                    "PostgreSQL (throwaway server, fsync off, ManualClock)",
                    "postgres",
                    database,
                    seeds,
                    ops,
                )
                failed += [f"postgres seed {s}" for s in tally.failed_seeds]
    if not args.no_controls:
        print(f"negative controls (SQLite, seed {args.seed}, {args.ops:,} operations):")
        found = controls(args.seed, args.ops)
        print(
            f"  checker self-test: {found.doctored} refused stale writes marked accepted in "
            f"a copy of the history; flagged as stale writes accepted: "
            f"{found.doctored_flagged}; {found.doctored_zombies} stale writes after a newer "
            f"token's marked accepted: two-holder/token-order findings "
            f"{found.doctored_two_holders}; {found.doctored_expired} refused expired writes "
            f"marked accepted: flagged {found.doctored_expired_flagged}"
        )
        for name, report in found.broken.items():
            print(
                f"  fence that {name}: stale-token writes accepted {report.stale_accepted}, "
                f"expired writes accepted {report.expired_accepted}, two holders at once "
                f"{report.two_holders}, older token after newer {report.token_regressions} "
                f"({report.in_batches} of these findings on writes sent in batches)"
            )
        print(
            f"  a model trusting device clocks disagrees with the store on "
            f"{found.device_model_disagrees:,} writes; a model ignoring supersession on "
            f"{found.supersession_model_disagrees:,}"
        )
        for failure in found.failures():
            print(f"  NEGATIVE CONTROL FAILED: {failure}")
            failed.append(failure)
    print(f"wall time {time.perf_counter() - started:.1f} s")
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
