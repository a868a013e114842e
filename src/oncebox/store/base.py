"""A store: transactions over one database, and the server clock that decides time.

What a transaction can do is said per user in :mod:`oncebox.store.ports`; a store's
transaction (:class:`Tx`) is all of them at once, and an engine function takes only the
port it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from oncebox.domain import LeaseState, StoredRow
from oncebox.store.finding import Finding
from oncebox.store.letters import Archiving, Retrying, Selecting
from oncebox.store.outbox_port import Outbox
from oncebox.store.ports import (
    Access,
    Chain,
    Clock,
    Deciding,
    Declaring,
    Events,
    Feeding,
    FencePort,
    Figures,
    Listing,
    Operating,
    Params,
    Retaining,
    Sealing,
    StepTx,
)

T = TypeVar("T")


class DecidingAtOnce(Protocol):
    """A decision's reads together: a backend that can (PostgreSQL) asks for them in
    one round trip (:mod:`oncebox.store.pgtx`)."""

    def decision_reads(
        self, inbox_id: int, idents: Sequence[bytes], scopes: Sequence[str] | None
    ) -> tuple[dict[str, LeaseState], float, dict[bytes, StoredRow], list[int] | None]:
        """In this order (no wait may let a stale time pass): the identities held, the
        scopes' leases held (``scopes``: a lease-fenced inbox's), the clock, the stored
        records among ``idents``; and fresh ids for the identities not stored where the
        backend reads them in the same turn (None: the caller reserves what it needs)."""
        ...


class Tx(
    DecidingAtOnce,
    Deciding,
    Sealing,
    Operating,
    Listing,
    Figures,
    Retaining,
    Declaring,
    Access,
    Feeding,
    Finding,
    Retrying,
    Archiving,
    Selecting,
    Outbox,
    StepTx,
    Protocol,
):
    """One open transaction, every port at once. Everything done through it commits or
    rolls back together."""  # fmt: skip

    def relax(self) -> bool:
        """Let this transaction commit without waiting for the disk, because all it wrote
        is counts that a power cut may take back (never a record, an effect, a dead letter,
        a log entry or a lease). Returns whether it will: PostgreSQL can relax a
        transaction at any point before its commit; SQLite fixes a transaction's level
        before it begins, so there only one begun with ``durable=False`` will."""
        ...


class WrongLevel(Exception):
    """A work found its transaction at the wrong durability level before writing
    anything: relaxed where it would write more than counts, or flushed where it writes
    nothing but counts. The transaction rolled back; the work runs again at the other."""


class Store(Protocol):
    """A store: transactions, and the server clock that decides time."""

    url: str
    dialect: str  # sqlite | postgres: the SQL an apply step's statements are written in
    single_writer: bool
    """True when the backend lets one writer in at a time (SQLite): a writer then loses
    no concurrency by appending its own log entries inside its deciding transaction."""
    relaxes_late: bool
    """True when a write transaction can stop waiting for the disk at any point before
    its commit (:meth:`Tx.relax`; PostgreSQL's ``SET LOCAL synchronous_commit``); False
    when the level is fixed before it begins (SQLite's ``PRAGMA synchronous``), so a
    transaction that may commit relaxed must begin as one (``atomic(..., durable=False)``)."""

    def atomic(self, work: Callable[[Tx], T], durable: bool = True) -> T:
        """Run ``work`` in a write transaction, again from the start if the backend or
        the engine reports a retryable conflict (deadlock, serialization failure,
        :class:`oncebox.errors.RetryTransaction`); bounded.

        ``durable=False`` lets the commit return before it is durable (no flush of its
        own). Only for a caller that makes a durable, writing commit right after and
        answers nobody before it: both backends append to one sequential log (SQLite's
        WAL, PostgreSQL's WAL), so that flush covers this commit too. On PostgreSQL only
        on the same server run: if the server restarted in between, the durable commit
        raises :class:`oncebox.errors.StorageUnavailable` instead. Or for a work that
        writes nothing but counts and raises :class:`WrongLevel` before it would write
        anything else (where the level is chosen up front, :attr:`relaxes_late` False).
        """
        ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction; commits on normal exit, rolls back on an exception."""
        ...

    def reading(self) -> AbstractContextManager[Tx]:
        """A read-only snapshot that does not block writers."""
        ...

    def scanning(self, budget: float | None = None) -> AbstractContextManager[Tx]:
        """A read-only snapshot for a listing or a search: on connections no writer
        waits for; past ``budget`` seconds it stops (:class:`~oncebox.errors.ReadTimedOut`)."""
        ...

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[int, str]]) -> None:
        """Apply the numbered migrations of the tables ``owner`` (an apply step) keeps,
        each once per store, in order, in its own transaction."""
        ...

    def schema_version(self) -> int:
        """The store's last migration applied."""
        ...

    def now(self) -> float:
        """The server clock, in seconds since the epoch."""
        ...

    def close(self) -> None: ...


__all__ = [
    "Access",
    "Chain",
    "Clock",
    "Deciding",
    "Declaring",
    "Events",
    "Feeding",
    "FencePort",
    "Figures",
    "Finding",
    "Listing",
    "Operating",
    "Outbox",
    "Params",
    "Retaining",
    "Sealing",
    "StepTx",
    "Store",
    "T",
    "Tx",
    "WrongLevel",
]
