"""The library's front door: a store plus its declared inboxes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from oncebox.domain import Decision, Inbox, Quarantined, Resolution
from oncebox.engine import leases, log, retention, sealing, tokens
from oncebox.engine.adjudicate import Resolving, resolve
from oncebox.engine.apply import BUILT_IN, apply_name
from oncebox.engine.counting import only_counts
from oncebox.engine.decide import decide_items
from oncebox.engine.decided import Decided, Repeated
from oncebox.engine.decision import unapplied
from oncebox.engine.durability import commit_sealed
from oncebox.engine.finding import Finding
from oncebox.engine.following import Following
from oncebox.engine.forwarding import Forwarding
from oncebox.engine.inboxes import InboxSpec
from oncebox.engine.ingest import ActiveInbox, alert, logger, prepare_all
from oncebox.engine.leases import Lease
from oncebox.engine.operators import Operators
from oncebox.engine.reads import Reads
from oncebox.engine.reconciler import Reader, Reconciler
from oncebox.engine.step import migrations_of
from oncebox.engine.token_times import LastUsed
from oncebox.errors import (
    ApplyError,
    ConfigError,
    InvalidOperation,
    NotFound,
    StorageError,
    UnknownInbox,
)
from oncebox.formats import Delivery
from oncebox.logtext import escaped
from oncebox.store.base import Declaring, Store, T, Tx


class Oncebox(Reads, Following, Finding, Operators, Forwarding):
    """Exactly-once intake over one store. Safe to share between threads: every call
    runs on the calling thread's own connection. What it shows is in :class:`Reads`."""

    def __init__(
        self,
        store: Store,
        inboxes: Iterable[InboxSpec] = (),
        *,
        seal: bool = True,
        read_only: bool = False,
    ) -> None:
        self.store = store
        self.seal_inline = seal
        self._inboxes: dict[str, ActiveInbox] = {}
        self._news = threading.Condition()  # told when this process sealed something
        self._listeners: list[Callable[[], None]] = []
        self._light: dict[str, bool] = {}  # inbox -> whether its last batch was only counts
        self._last_used = LastUsed()  # when tokens were last used: kept to the minute
        self._read_only = read_only
        if read_only:
            self.recovered_at_open = 0
            self._attach(inboxes)
            return
        # The built-in steps' tables are in every store, used or not: a user's step may
        # build on them, as stores made before the steps owned them always had them.
        for built_in in BUILT_IN.values():
            store.ensure_schema(built_in.name, migrations_of(built_in, store.dialect))
        # Whatever a crash left committed but unsealed gets its log entry first (I4).
        self.recovered_at_open = sealing.recover(store)
        for spec in inboxes:
            self.declare(spec)

    # -- inboxes -----------------------------------------------------------------------
    def _attach(self, specs: Iterable[InboxSpec]) -> None:
        """For reading only: the inboxes the store has, as ``specs`` configure them (or
        as the store names their codec and step), declaring none and writing nothing.
        One whose codec or step this process cannot load is left out."""
        wanted = {spec.name: spec for spec in specs}
        for spec in wanted.values():
            # Declared or not, a configuration that could not be declared is refused:
            # reading under it would hide the mistake until the first write.
            spec.check()
        with self.store.reading() as tx:
            rows = tx.inboxes()
        for row in rows:
            spec = wanted.get(row.name) or InboxSpec(row.name, codec=row.codec, apply=row.apply)
            try:
                codec, step = spec.check()
            except ConfigError:
                if row.name in wanted:
                    raise
                continue
            if codec.name != row.codec and row.name in wanted:
                # As declaring would: a configuration that reads the inbox otherwise.
                raise ConfigError(
                    f"inbox {row.name} already holds {row.codec} deliveries; "
                    f"it cannot switch to {codec.name}"
                )
            if codec.name == row.codec:
                destinations = spec.destinations() if row.name in wanted else ()
                self._inboxes[row.name] = ActiveInbox(row, codec, step, destinations)

    def declare(self, spec: InboxSpec) -> None:
        """Declare (or re-declare) an inbox. Its codec can never change once declared:
        identities decided under one codec mean nothing to another."""
        codec, step = spec.check()
        destinations = spec.destinations()
        self._check_destinations(spec.name, destinations)
        # The tables the step keeps, before anything can use them.
        self.store.ensure_schema(step.name, migrations_of(step, self.store.dialect))

        def record(tx: Declaring) -> Inbox:
            now = tx.now()
            known = {row.name: row for row in tx.inboxes()}
            old = known.get(spec.name)
            if old is not None and old.codec != codec.name:
                raise ConfigError(
                    f"inbox {spec.name} already holds {old.codec} deliveries; "
                    f"it cannot switch to {codec.name}"
                )
            if old is not None and old.fenced != spec.is_fenced(codec):
                # Every process must fence an inbox alike, or one would admit what
                # another refuses.
                raise ConfigError(
                    f"inbox {spec.name} is {'' if old.fenced else 'not '}lease-fenced in this "
                    f"store; it cannot change"
                )
            row = tx.declare_inbox(
                spec.name,
                codec.name,
                apply_name(spec.apply),
                spec.retention_seconds,
                spec.tombstone_seconds,
                spec.is_fenced(codec),
            )
            overrides = tx.retention_overrides(row.id)
            below_floor = spec.retention_override is not None and row.retention_seconds
            if below_floor and (
                not overrides
                or overrides[-1][:2] != (row.retention_seconds, spec.retention_override)
            ):
                assert row.retention_seconds is not None and spec.retention_override
                tx.record_retention_override(
                    row.id, row.retention_seconds, spec.retention_override, now
                )
                log.event(
                    tx,
                    "retention_override",
                    {
                        "inbox": spec.name,
                        "retention_seconds": row.retention_seconds,
                        "reason": spec.retention_override,
                    },
                )
            return row

        row = self.write(record)
        self._inboxes[spec.name] = ActiveInbox(row, codec, step, destinations)

    def inbox(self, name: str) -> ActiveInbox:
        try:
            return self._inboxes[name]
        except KeyError:
            known = ", ".join(sorted(self._inboxes)) or "none"
            raise UnknownInbox(f"no inbox named {name!r} (declared: {known})") from None

    @property
    def inboxes(self) -> list[ActiveInbox]:
        return [self._inboxes[name] for name in sorted(self._inboxes)]

    # -- ingest ------------------------------------------------------------------------
    def ingest(self, inbox: str, delivery: Delivery | bytes | str, **facts: Any) -> Decision:
        """Decide one delivery. Returns only after the decision committed."""
        return self.ingest_batch(inbox, [_delivery(delivery, facts)])[0]

    def ingest_batch(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Decision]:
        """Decide many deliveries in one transaction, one decision each, in order.

        The decisions are those deciding them one by one would give, duplicates inside
        the batch included. The batch is atomic: if an apply step fails, nothing in it
        is stored and :class:`oncebox.errors.ApplyError` names the failing index
        (:meth:`ingest_each` decides the others anyway).
        """
        active = self.inbox(inbox)
        codec, check = active.codec, active.check
        items = prepare_all(codec, deliveries, check)
        # A batch of nothing but duplicates commits without waiting for the disk; where
        # the store must know before it begins (SQLite), the inbox's last batch guesses.
        decide = partial(decide_items, active, items)  # a partial: cheaper than a closure
        light = (decide, only_counts, self._light.get(inbox, True))
        decided: Decided | Repeated
        decided, positions = commit_sealed(
            self.store,
            None,
            self.seal_inline,
            watched=True,
            light=light,
            alone=len(items) == 1,
        )
        counts = self._light[inbox] = decided.only_counts
        # Only now has everything the decisions wrote committed durably (counts aside).
        if not counts:  # counts alone appended nothing to the log: no news
            self._sealed()
        decisions = decided.decisions(positions)
        alert(decisions)
        return decisions

    def ingest_each(
        self, inbox: str, deliveries: Sequence[Delivery]
    ) -> list[Decision | ApplyError]:
        """:meth:`ingest_batch`, except that a delivery whose apply step fails gets its
        :class:`ApplyError` and the others are decided anyway: what a transport that
        answers each delivery on its own (HTTP group commit, a queue consumer) needs.

        The batch runs as one transaction; if an apply step fails in it, the deliveries
        before the failing one are decided again together, the failing one alone (where
        it may still succeed), and the rest together again, and so on. Where the step
        could not say which delivery failed (a built-in step takes the batch at once),
        each half is decided again on its own, so a bad delivery among n costs about
        log n transactions, and it alone gets the error.
        """
        outcomes: list[Decision | ApplyError] = []
        rest = list(deliveries)
        while rest:
            try:
                outcomes += self.ingest_batch(inbox, rest)
                return outcomes
            except ApplyError as exc:
                if len(rest) == 1:
                    outcomes.append(exc)
                    return outcomes
                if exc.index is None:
                    half = len(rest) // 2
                    return (
                        outcomes
                        + self.ingest_each(inbox, rest[:half])
                        + self.ingest_each(inbox, rest[half:])
                    )
                failed = min(max(exc.index, 0), len(rest) - 1)
            if failed:
                outcomes += self.ingest_each(inbox, rest[:failed])
            outcomes += self.ingest_each(inbox, rest[failed : failed + 1])
            rest = rest[failed + 1 :]
        return outcomes

    def ingest_all(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Decision]:
        """:meth:`ingest_each` with an apply step's failure answered as that delivery's
        decision: ``rejected``, reason ``apply_failed``, ``may_ack`` false (nothing of
        it was stored, so its sender must resend it). What a batch answer shows."""
        outcomes = self.ingest_each(inbox, deliveries)
        for outcome in outcomes:
            if isinstance(outcome, ApplyError):
                logger.error("%s", escaped(str(outcome)))
        return [unapplied(o) if isinstance(o, ApplyError) else o for o in outcomes]

    def seal(self) -> dict[int, int]:
        """Append every queued log event now; returns record id -> log position of each
        record it sealed (its first, as stored; not a later revision's entry). A live
        dedicated sealer (``oncebox seal --follow``) is left to it."""
        return self._seal()

    def _seal(self, durable_point: bool = False) -> dict[int, int]:
        return sealing.positions(sealing.seal_now(self.store, durable_point=durable_point))

    def write(self, work: Callable[[Tx], T]) -> T:
        """A write transaction and the log events it queued, durable together with one
        flush (:func:`~oncebox.engine.durability.commit_sealed`); returns only once both
        are."""

        def sealed(tx: Tx, together: bool) -> T:
            result = work(tx)
            if together:
                sealing.seal_queued(tx)
            return result

        return self.write_sealed(sealed)[0]

    def write_sealed(self, work: Callable[[Tx, bool], T]) -> tuple[T, dict[int, int] | None]:
        """:meth:`write` of a ``work(tx, together)`` that seals its own events where
        ``together`` asks (as a decision does), and the log positions of the records
        sealed after the commit (None where none were)."""
        result = commit_sealed(self.store, work, self.seal_inline)
        self._sealed()
        return result

    # -- leases --------------------------------------------------------------------------
    def lease(self, inbox: str, scope: str, ttl: float) -> Lease:
        """The next fencing token for ``scope``, valid ``ttl`` seconds on the server clock;
        every older token on the scope is fenced from now on."""
        active = self.inbox(inbox)
        if not active.row.fenced:
            raise InvalidOperation(f"inbox {inbox} is not lease-fenced")
        return self.write(lambda tx: leases.issue(tx, active.row.id, inbox, scope, ttl, tx.now()))

    def release(self, inbox: str, scope: str, token: int) -> None:
        """Give a lease up early; its token is stale from now on."""
        active = self.inbox(inbox)
        self.write(lambda tx: leases.release(tx, active.row.id, inbox, scope, token, tx.now()))

    # -- the log -------------------------------------------------------------------------
    def recover(self, grace: float = sealing.ORPHAN_GRACE) -> int:
        """Seal every committed record the log does not cover; returns how many.

        A queued seal is taken as orphaned once it has waited ``grace`` seconds for its
        writer; pass 0 when no other process can be writing (e.g. after ``seal=False``)."""
        return sealing.recover(self.store, grace)

    # -- operators ---------------------------------------------------------------------
    def resolve(
        self, quarantine_id: int, action: str, note: str, actor: str | None = None
    ) -> Quarantined:
        """``keep`` the original (closing the row with a note) or ``accept`` the newcomer
        as the record's next revision, its effects moved by the difference. ``actor``
        (who resolved: an API token's name) is kept on the row and in the log."""
        try:
            chosen = Resolution(action)
        except ValueError:
            raise InvalidOperation(f"resolve with keep or accept, not {action!r}") from None

        def decide(tx: Resolving) -> Quarantined:
            row = tx.get_quarantine(quarantine_id, lock=True)
            if row is None:
                raise NotFound(f"no quarantine row {quarantine_id}")
            closed = resolve(tx, self._by_id(row.inbox_id), row, chosen, note, tx.now(), actor)
            return closed

        return self.write(decide)

    def evict(self, inbox: str | None = None) -> list[retention.EvictionPass]:
        """Evict by age on the server clock: no caller's clock decides what is old."""
        targets = [self.inbox(inbox)] if inbox else self.inboxes
        return [retention.evict(self.write, active) for active in targets]

    def reconciler(self, inbox: str, reader: Reader | None = None, **options: Any) -> Reconciler:
        """A reconciler worker for ``inbox``'s work keys (see :mod:`oncebox.engine.reconciler`)."""
        return Reconciler(self, inbox, reader, **options)

    # -- API tokens ---------------------------------------------------------------------
    def create_token(
        self,
        name: str,
        inboxes: Sequence[str],
        scopes: Sequence[str] = ("write",),
        *,
        hmac: bool = False,
        expires: str | None = None,
        actor: str | None = None,
    ) -> tokens.Created:
        """A new API token for ``inboxes`` (declared names, or ``["*"]``) and ``scopes``
        (read, write, operator, admin), expiring ``expires`` (``"30d"`` from now, or an
        ISO 8601 time; None: never). The secret is in the result and nowhere else."""
        for name_ in inboxes:
            if name_ != tokens.ALL_INBOXES:
                self.inbox(name_)
        return self.write(lambda tx: tokens.create(tx, name, inboxes, scopes, hmac, expires, actor))

    def revoke_token(self, name_or_id: str, actor: str | None = None) -> None:
        """Revoke a live token by name (or id); it fails authentication from now on."""
        self.write(lambda tx: tokens.revoke(tx, str(name_or_id), actor))

    def authenticate(self, secret: str) -> tokens.Token | None:
        """The live token whose secret this is, or None; raises
        :class:`~oncebox.engine.token_times.TokenExpired` for an expired one. A use is
        kept as the token's last use, written at most once a minute per token."""
        with self.store.reading() as tx:
            token, now = tokens.authenticate(tx, secret), tx.now()
        if token is None or self._read_only:
            return token
        if self._last_used.due(token.id, token.last_used_at, now):
            cutoff = now - self._last_used.every
            try:
                self.store.atomic(lambda tx: tx.touch_token(token.id, now, cutoff))
            except StorageError as exc:  # a use is not refused for its bookkeeping
                logger.warning("token %s: last use not kept: %s", token.id, exc)
        return token

    # -- health ------------------------------------------------------------------------
    def probe(self) -> None:
        """Raise unless the store is reachable and takes a write (readiness)."""
        self.store.atomic(lambda tx: tx.probe_write(tx.now()))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Oncebox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _by_id(self, inbox_id: int) -> ActiveInbox:
        for active in self._inboxes.values():
            if active.row.id == inbox_id:
                return active
        raise UnknownInbox(f"inbox id {inbox_id} is not declared in this process")


def _delivery(delivery: Delivery | bytes | str, facts: dict[str, Any]) -> Delivery:
    if isinstance(delivery, Delivery):
        return replace(delivery, **facts) if facts else delivery
    body = delivery.encode("utf-8") if isinstance(delivery, str) else delivery
    return Delivery(body=body, **facts)
