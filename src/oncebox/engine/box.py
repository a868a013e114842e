"""The library's front door: a store plus its declared inboxes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from oncebox.engine import audit, crashpoints, leases, log, retention, tokens
from oncebox.engine.adjudicate import Resolution, resolve
from oncebox.engine.apply import apply_name
from oncebox.engine.checkpoint import Checkpoint
from oncebox.engine.decide import decide_batch
from oncebox.engine.decision import Decision
from oncebox.engine.inboxes import InboxSpec, format_duration
from oncebox.engine.ingest import ActiveInbox, alert, prepare
from oncebox.engine.leases import Lease
from oncebox.engine.reconciler import Reader, Reconciler
from oncebox.errors import ApplyError, ConfigError, InvalidOperation, NotFound, UnknownInbox
from oncebox.formats import Delivery
from oncebox.store.base import (
    DeadLetterRow,
    EvictionRow,
    LeaseRow,
    LedgerRow,
    LogEntry,
    QuarantineRow,
    RecordRow,
    RevisionRow,
    Store,
    T,
    Tx,
    WorkKeyRow,
)


class Oncebox:
    """Exactly-once intake over one store. Safe to share between threads: every call
    runs on the calling thread's own connection."""

    def __init__(
        self, store: Store, inboxes: Iterable[InboxSpec] = (), *, seal: bool = True
    ) -> None:
        self.store = store
        self.seal_inline = seal
        self._inboxes: dict[str, ActiveInbox] = {}
        # Whatever a crash left committed but unsealed gets its log entry first (I4).
        self.recovered_at_open = log.recover(store)
        for spec in inboxes:
            self.declare(spec)

    # -- inboxes -----------------------------------------------------------------------
    def declare(self, spec: InboxSpec) -> None:
        """Declare (or re-declare) an inbox. Its codec can never change once declared:
        identities decided under one codec mean nothing to another."""
        codec, step = spec.check()
        with self.store.transaction() as tx:
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
        self._inboxes[spec.name] = ActiveInbox(row, codec, step)
        self._after_write()

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
        items = [prepare(active.codec, d) for d in deliveries]
        # Where the backend lets one writer in at a time (SQLite), the log entries are
        # appended in the deciding transaction itself: one transaction, one flush.
        # Elsewhere the decision commits without a flush of its own and the seal's
        # durable commit right after covers it: still one flush, and writers never
        # queue for the log head (a seal with nothing to append writes a marker).
        together = self.seal_inline and self.store.single_writer
        decided = self.store.atomic(
            lambda tx: decide_batch(tx, active, items, seal=together),
            durable=together or not self.seal_inline,
        )
        crashpoints.reach(crashpoints.AFTER_COMMIT)
        positions = None
        if self.seal_inline and not together:
            # Step 7: the records this batch accepted get their log entries.
            positions = self._seal(durable_point=True)
        crashpoints.reach(crashpoints.AFTER_SEAL)
        # Only now has everything the decisions wrote committed durably.
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
        it may still succeed), and the rest together again, and so on.
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
                failed = min(max(exc.index, 0), len(rest) - 1)
            if failed:
                outcomes += self.ingest_each(inbox, rest[:failed])
            outcomes += self.ingest_each(inbox, rest[failed : failed + 1])
            rest = rest[failed + 1 :]
        return outcomes

    def seal(self) -> dict[int, int]:
        """Append every queued log event now; returns record id -> log position for the
        records sealed. A live dedicated sealer (``oncebox seal --follow``) is left to it."""
        return self._seal()

    def _seal(self, durable_point: bool = False) -> dict[int, int]:
        sealed = log.seal_now(self.store, durable_point=durable_point)
        return {p.record_id: e.seq for p, e in sealed if p.record_id}

    def _after_write(self) -> None:
        if self.seal_inline:
            self.seal()

    def _write(self, work: Callable[[Tx], T]) -> T:
        """A write transaction and the seal of what it queued, with one flush for both
        (as in :meth:`ingest_batch`): returns only once both are durable."""
        if self.seal_inline and self.store.single_writer:

            def sealed(tx: Tx) -> T:
                result = work(tx)
                log.seal_queued(tx)
                return result

            return self.store.atomic(sealed)
        result = self.store.atomic(work, durable=not self.seal_inline)
        if self.seal_inline:
            self._seal(durable_point=True)
        return result

    # -- leases --------------------------------------------------------------------------
    def lease(self, inbox: str, scope: str, ttl: float) -> Lease:
        """The next fencing token for ``scope``, valid ``ttl`` seconds on the server clock;
        every older token on the scope is fenced from now on."""
        active = self.inbox(inbox)
        if not active.row.fenced:
            raise InvalidOperation(f"inbox {inbox} is not lease-fenced")
        return self._write(
            lambda tx: leases.issue(tx, active.row.id, inbox, scope, ttl, tx.now())
        )

    def release(self, inbox: str, scope: str, token: int) -> None:
        """Give a lease up early; its token is stale from now on."""
        active = self.inbox(inbox)
        self._write(lambda tx: leases.release(tx, active.row.id, inbox, scope, token, tx.now()))

    def leases(self, inbox: str) -> list[LeaseRow]:
        with self.store.reading() as tx:
            return tx.list_leases(self.inbox(inbox).row.id)

    # -- the log -------------------------------------------------------------------------
    def recover(self, grace: float = log.ORPHAN_GRACE) -> int:
        """Seal every committed record the log does not cover; returns how many.

        A queued seal is taken as orphaned once it has waited ``grace`` seconds for its
        writer; pass 0 when no other process can be writing (e.g. after ``seal=False``)."""
        return log.recover(self.store, grace)

    def verify(self, against: Checkpoint | None = None) -> log.Verification:
        return log.verify(self.store, against)

    def checkpoint(self, private_key_pem: bytes | None = None) -> Checkpoint:
        return audit.checkpoint(self.store, private_key_pem)

    def prove(self, record_id: int) -> dict[str, Any]:
        """An inclusion proof for a record's log entry in the current tree."""
        return audit.prove_record(self.store, record_id)

    def prove_consistency(self, old_size: int, new_size: int | None = None) -> dict[str, Any]:
        return audit.prove_consistency(self.store, old_size, new_size)

    def log_entries(self, start: int = 1, limit: int = 1000) -> list[LogEntry]:
        with self.store.reading() as tx:
            return tx.log_entries(start, start + limit)

    # -- operators ---------------------------------------------------------------------
    def quarantined(
        self, inbox: str | None = None, status: str | None = "open", limit: int = 1000
    ) -> list[QuarantineRow]:
        inbox_id = self.inbox(inbox).row.id if inbox else None
        with self.store.reading() as tx:
            return tx.list_quarantine(inbox_id, status, limit)

    def resolve(self, quarantine_id: int, action: str, note: str) -> QuarantineRow:
        """``keep`` the original (closing the row with a note) or ``accept`` the newcomer
        as the record's next revision, its effects moved by the difference."""
        try:
            chosen = Resolution(action)
        except ValueError:
            raise InvalidOperation(f"resolve with keep or accept, not {action!r}") from None

        def decide(tx: Tx) -> QuarantineRow:
            row = tx.get_quarantine(quarantine_id, lock=True)
            if row is None:
                raise NotFound(f"no quarantine row {quarantine_id}")
            return resolve(tx, self._by_id(row.inbox_id), row, chosen, note, tx.now())

        return self._write(decide)

    def dead_letters(self, inbox: str | None = None, limit: int = 1000) -> list[DeadLetterRow]:
        inbox_id = self.inbox(inbox).row.id if inbox else None
        with self.store.reading() as tx:
            return tx.list_dead_letters(inbox_id, limit)

    def record(self, inbox: str, identity: str) -> RecordRow | None:
        ident = hashlib.sha256(identity.encode("utf-8")).digest()
        return self._record_by_digest(self.inbox(inbox).row.id, ident)

    def original(self, row: QuarantineRow) -> RecordRow | None:
        """The record a quarantined newcomer conflicts with, to show them side by side."""
        return self._record_by_digest(row.inbox_id, row.ident)

    def _record_by_digest(self, inbox_id: int, ident: bytes) -> RecordRow | None:
        with self.store.reading() as tx:
            stored = tx.find_records(inbox_id, [ident]).get(ident)
            return tx.get_record(stored.id) if stored is not None else None

    def revisions(self, record_id: int) -> list[RevisionRow]:
        with self.store.reading() as tx:
            return tx.revisions(record_id)

    def evict(self, inbox: str | None = None) -> list[retention.Eviction]:
        """Evict by age on the server clock: no caller's clock decides what is old."""
        targets = [self.inbox(inbox)] if inbox else self.inboxes
        done = [retention.evict(self.store, active) for active in targets]
        self._after_write()
        return done

    def evictions(self, inbox: str | None = None, limit: int = 1000) -> list[EvictionRow]:
        inbox_id = self.inbox(inbox).row.id if inbox else None
        with self.store.reading() as tx:
            return tx.evictions(inbox_id, limit)

    # -- views ---------------------------------------------------------------------------
    def stats(self, inbox: str) -> dict[str, Any]:
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            counts = tx.verdict_counts(active.row.id)
            figures = tx.inbox_figures(active.row.id)
            overrides = tx.retention_overrides(active.row.id)
        verdicts: dict[str, int] = {}
        reasons: dict[str, int] = {}
        for (verdict, reason), n in sorted(counts.items()):
            verdicts[verdict] = verdicts.get(verdict, 0) + n
            if reason:
                reasons[f"{verdict}:{reason}"] = n
        return {
            "inbox": active.name,
            "codec": active.codec.name,
            "apply": active.row.apply,
            "retention": format_duration(active.row.retention_seconds),
            "tombstone_horizon": format_duration(active.row.tombstone_seconds),
            "retention_overrides": [
                {"retention": format_duration(s), "reason": r, "at": a} for s, r, a in overrides
            ],
            "verdicts": verdicts,
            "reasons": reasons,
            **figures,
        }

    def verdict_history(self, inbox: str, hours: int = 24) -> list[tuple[int, dict[str, int]]]:
        """Counts by verdict for each of the last ``hours`` hours on the server clock,
        oldest first, as (hour start in unix seconds, {verdict: count}); quiet hours are
        there with no counts."""
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            current = int(tx.now() // 3600)
            rows = tx.verdict_hours(active.row.id, current - hours + 1)
        first = current - hours + 1
        by_hour: dict[int, dict[str, int]] = {h: {} for h in range(first, current + 1)}
        for hour, verdict, n in rows:
            if hour in by_hour:
                by_hour[hour][verdict] = by_hour[hour].get(verdict, 0) + n
        return [(hour * 3600, counts) for hour, counts in by_hour.items()]

    def triage(self, inbox: str) -> dict[str, Any]:
        """The headcount ledger: totals per site and need, and the priority ranking."""
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            totals = tx.ledger_totals(active.row.id)
            ranking: list[LedgerRow] = tx.ledger_ranking(active.row.id)
        return {
            "headcount": sum(h for _, _, h, _ in totals),
            "cases": sum(c for _, _, _, c in totals),
            "totals": [{"site": s, "need": n, "headcount": h, "cases": c} for s, n, h, c in totals],
            "ranking": [
                {
                    "record_id": r.record_id,
                    "site": r.site,
                    "need": r.need,
                    "headcount": r.headcount,
                    "pri": r.pri,
                }
                for r in ranking
            ],
        }

    def reconciler(self, inbox: str, reader: Reader | None = None, **options: Any) -> Reconciler:
        """A reconciler worker for ``inbox``'s work keys (see :mod:`oncebox.engine.reconciler`)."""
        return Reconciler(self, inbox, reader, **options)

    def work_keys(self, inbox: str) -> list[WorkKeyRow]:
        with self.store.reading() as tx:
            return tx.work_keys(self.inbox(inbox).row.id)

    # -- API tokens ---------------------------------------------------------------------
    def create_token(
        self,
        name: str,
        inboxes: Sequence[str],
        scopes: Sequence[str] = ("write",),
        *,
        hmac: bool = False,
    ) -> tokens.Created:
        """A new API token for ``inboxes`` (declared names, or ``["*"]``) and ``scopes``
        (read, write, operator). The secret is in the result and nowhere else."""
        for name_ in inboxes:
            if name_ != tokens.ALL_INBOXES:
                self.inbox(name_)
        return self._write(lambda tx: tokens.create(tx, name, inboxes, scopes, hmac))

    def list_tokens(self) -> list[tokens.Token]:
        with self.store.reading() as tx:
            return tokens.listing(tx)

    def revoke_token(self, name_or_id: str) -> None:
        """Revoke a live token by name (or id); it fails authentication from now on."""
        self._write(lambda tx: tokens.revoke(tx, str(name_or_id)))

    def authenticate(self, secret: str) -> tokens.Token | None:
        with self.store.reading() as tx:
            return tokens.authenticate(tx, secret)

    # -- health ------------------------------------------------------------------------
    def probe(self) -> None:
        """Raise unless the store is reachable and takes a write (readiness)."""
        self.store.atomic(lambda tx: tx.probe_write(tx.now()))

    def seal_lag(self) -> int:
        """Log events queued by committed writes and not sealed yet."""
        with self.store.reading() as tx:
            return tx.log_pending_count()

    def work_figures(self, inbox: str) -> dict[str, int]:
        active = self.inbox(inbox)
        with self.store.reading() as tx:
            return tx.work_figures(active.row.id, tx.now())

    def get_quarantine(self, quarantine_id: int) -> tuple[str, QuarantineRow] | None:
        """A quarantine row with its inbox's name."""
        with self.store.reading() as tx:
            row = tx.get_quarantine(quarantine_id)
        return (self._by_id(row.inbox_id).name, row) if row else None

    def record_inbox(self, record_id: int) -> str | None:
        """The name of the inbox holding a record, if the record is still there."""
        with self.store.reading() as tx:
            row = tx.get_record(record_id)
        return self._by_id(row.inbox_id).name if row else None

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


def fields_of(row: RecordRow | QuarantineRow) -> dict[str, Any]:
    return json.loads(row.fields) if row.fields else {}
