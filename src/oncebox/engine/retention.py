"""Retention: evict by age only, never by count, and record every eviction (I7).

An evicted record becomes a tombstone (identity digest, witness digest, first and last
seen), kept for a second age-only horizon, so a resend that arrives after the window is
still recognised and never applied twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncebox.engine import log
from oncebox.engine.ingest import ActiveInbox
from oncebox.store.base import Evicted, Store, Tx

BATCH = 5_000


@dataclass(frozen=True)
class Eviction:
    inbox: str
    records: int
    tombstones: int


def evict(store: Store, inbox: ActiveInbox, now: float | None = None) -> Eviction:
    """Evict what is older than the inbox's windows, in bounded transactions."""
    row = inbox.row
    records = tombstones = 0
    if row.retention_seconds is not None:
        while True:
            with store.transaction() as tx:
                at = tx.now() if now is None else now
                evicted = tx.evict_records(row.id, at - row.retention_seconds, at, BATCH)
                _log(tx, inbox.name, "record", evicted)
            records += len(evicted)
            if len(evicted) < BATCH:
                break
        if row.tombstone_seconds is not None:
            while True:
                with store.transaction() as tx:
                    at = tx.now() if now is None else now
                    dropped = tx.drop_tombstones(row.id, at - row.tombstone_seconds, at, BATCH)
                    _log(tx, inbox.name, "tombstone", dropped)
                tombstones += len(dropped)
                if len(dropped) < BATCH:
                    break
    return Eviction(inbox.name, records, tombstones)


def _log(tx: Tx, inbox: str, kind: str, evicted: list[Evicted]) -> None:
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
