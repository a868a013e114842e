"""Retention: evict by age only, never by count, and record every eviction (I7).

An evicted record becomes a tombstone (identity digest, witness digest, first and last
seen), kept for a second age-only horizon, so a resend that arrives after the window is
still recognised and never applied twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oncebox.domain import Evicted
from oncebox.engine import log
from oncebox.engine.ingest import ActiveInbox
from oncebox.store.base import Retaining

BATCH = 5_000


@dataclass(frozen=True)
class EvictionPass:
    """What one pass of retention over an inbox evicted: records turned tombstones, and
    tombstones dropped past their horizon."""

    inbox: str
    records: int
    tombstones: int


Write = Callable[[Callable[[Retaining], list[Evicted]]], list[Evicted]]


def evict(write: Write, inbox: ActiveInbox) -> EvictionPass:
    """Evict what is older than the inbox's windows, in bounded transactions, each
    written with its log entries (``write``: :meth:`oncebox.Oncebox.write`)."""
    row = inbox.row
    records = tombstones = 0
    if row.retention_seconds is not None:
        window = row.retention_seconds
        records = _in_batches(
            write,
            inbox.name,
            "record",
            lambda tx, at: tx.evict_records(row.id, at - window, at, BATCH),
        )
        if row.tombstone_seconds is not None:
            horizon = row.tombstone_seconds
            tombstones = _in_batches(
                write,
                inbox.name,
                "tombstone",
                lambda tx, at: tx.drop_tombstones(row.id, at - horizon, at, BATCH),
            )
    return EvictionPass(inbox.name, records, tombstones)


def _in_batches(
    write: Write, inbox: str, kind: str, step: Callable[[Retaining, float], list[Evicted]]
) -> int:
    """Run ``step`` in its own transactions until a batch comes back short."""
    total = 0
    while True:

        def batch(tx: Retaining) -> list[Evicted]:
            evicted = step(tx, tx.now())
            _log(tx, inbox, kind, evicted)
            return evicted

        done = write(batch)
        total += len(done)
        if len(done) < BATCH:
            return total


def _log(tx: Retaining, inbox: str, kind: str, evicted: list[Evicted]) -> None:
    for item in evicted:
        log.event(
            tx,
            "evict",
            {
                "inbox": inbox,
                "kind": kind,
                "record": item.record_id,
                "identity_digest": item.ident.hex(),
                "witness": item.witness.hex(),
                "first_seen": item.first_seen,
            },
        )
