"""The store interface in SQL, written once for every backend, one module per role."""

from __future__ import annotations

from oncebox.store.sqltx.base import Params, SqlBase
from oncebox.store.sqltx.inboxes import InboxesSql
from oncebox.store.sqltx.leases import LeasesSql, TokensSql
from oncebox.store.sqltx.log import LogSql, SealQueueSql
from oncebox.store.sqltx.records import RecordsSql, RetentionSql
from oncebox.store.sqltx.rejects import RejectsSql
from oncebox.store.sqltx.work import LedgerSql, WorkKeysSql


class SqlTx(
    RecordsSql,
    RejectsSql,
    LeasesSql,
    LogSql,
    SealQueueSql,
    WorkKeysSql,
    LedgerSql,
    RetentionSql,
    TokensSql,
    InboxesSql,
    SqlBase,
):
    """One transaction of a SQL backend, in every role. Subclasses give the primitives
    (:class:`SqlBase`) and what really differs: the clock, locking, a user's own SQL."""


__all__ = ["Params", "SqlBase", "SqlTx"]
