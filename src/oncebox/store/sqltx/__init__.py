"""The store interface in SQL, written once for every backend, one module per role."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from oncebox.domain import Fenced, LeaseState, StoredRow
from oncebox.store.sqlfile import Query
from oncebox.store.sqltx.base import Params, SqlBase, Statement
from oncebox.store.sqltx.feed import FeedSql
from oncebox.store.sqltx.finding import FindingSql
from oncebox.store.sqltx.forwarding import ForwardingSql
from oncebox.store.sqltx.inboxes import InboxesSql
from oncebox.store.sqltx.leases import FencesSql, TokensSql
from oncebox.store.sqltx.letters import LettersSql
from oncebox.store.sqltx.log import LogSql, SealQueueSql
from oncebox.store.sqltx.records import RecordsSql, RetentionSql
from oncebox.store.sqltx.rejects import RejectsSql

R = TypeVar("R")


class SqlTx(
    RecordsSql,
    RejectsSql,
    LettersSql,
    FencesSql,
    FeedSql,
    FindingSql,
    ForwardingSql,
    LogSql,
    SealQueueSql,
    RetentionSql,
    TokensSql,
    InboxesSql,
    SqlBase,
):
    """One transaction of a SQL backend, in every role. Subclasses give the primitives
    (:class:`SqlBase`) and what really differs: the clock, locking, a user's own SQL.

    What an apply step gets (:class:`~oncebox.store.ports.StepTx`) is these primitives
    over the step's own statements."""

    dialect: str

    def now(self) -> float:
        raise NotImplementedError

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        raise NotImplementedError

    def decision_reads(
        self, inbox_id: int, idents: Sequence[bytes], scopes: Sequence[str] | None
    ) -> tuple[dict[str, LeaseState], float, dict[bytes, StoredRow], list[int] | None]:
        """One read after another (see :class:`~oncebox.store.base.DecidingAtOnce`)."""
        self.lock_identities(inbox_id, idents)
        names = sorted(set(scopes)) if scopes else []
        leases = self.held(Fenced.SCOPE, inbox_id, names) if names else {}
        now = self.now()
        return leases, now, self.find_records(inbox_id, idents), None

    def seal_reads(
        self, kind: str, owner: int, name: str
    ) -> tuple[LeaseState | None, bool, tuple[int, str] | None]:
        """One read after another: the lease held first, as a seal holds it."""
        lease = self.held(kind, owner, [name], exclusive=True).get(name)
        head = self.log_head()
        return lease, self.last_pending_id() != 0, (head.seq, head.hash) if head else None

    def run(self, query: Query, params: Params = ()) -> int:
        return self._run(query, params)

    def one(self, query: Query, params: Params = ()) -> Any:
        return self._one(query, params)

    def all(self, query: Query, params: Params = ()) -> list[Any]:
        return self._all(query, params)

    def rows(self, query: Query, params: Params, cls: type[R]) -> list[R]:
        return self._rows(query, params, cls)

    def many(self, query: Query, rows: Sequence[Sequence[Any]]) -> int:
        return self._many(query, rows)


__all__ = ["Params", "SqlBase", "SqlTx", "Statement"]
