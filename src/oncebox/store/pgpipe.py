"""The primitives of a PostgreSQL transaction over psycopg, in or out of pipeline mode.

In a pipeline (:meth:`PostgresStore.atomic`) a statement is sent at once and its answer
not waited for: what reads an answer (a row, a row count) collects every answer sent
before it in one round trip, and the ``COMMIT`` collects the rest. Outside one, each
statement waits for its own. A columnar write marked foldable is held instead, and
goes with the writes beside it as one statement when the next statement goes
(:mod:`oncebox.store.pgfold`). What travels together is :mod:`oncebox.store.pgtx`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from oncebox.errors import RetryTransaction, StorageError
from oncebox.store import pgfold
from oncebox.store.pgarrays import columns
from oncebox.store.pgscalars import compact
from oncebox.store.sqlfile import Query, load_queries
from oncebox.store.sqltx import Params, SqlTx, Statement
from oncebox.store.sqltx.base import shape

Q = load_queries("postgres")
# Reads whose answers come in binary: many rows of ints, bytes and floats (a seal's
# read of the log's last block and kept nodes, a batch's fresh ids), each of which
# psycopg loads in C from binary, where from text an int is parsed from its digits
# (PyLong_FromString) and a bytea unescaped from hex. The same Python values
# (tests/test_pg_scalars.py).
_BINARY = frozenset({"decision_reads", "decision_lookup", "seal_reads_held", "seal_reads_after"})


def _query(statement: Statement) -> Query:
    """A statement: the store's own by name, or an apply step's :class:`Query`."""
    return Q[statement] if isinstance(statement, str) else statement


def _sql(statement: Statement) -> str:
    return _query(statement).sql


def _name(statement: Statement) -> str:
    return statement if isinstance(statement, str) else statement.name


def _columnar(statement: Statement) -> bool:
    """Whether it takes a whole batch as column arrays (see queries.sql)."""
    return _query(statement).columnar


def _first(cursor: psycopg.Cursor[Any]) -> float:
    row = cursor.fetchone()
    assert row is not None
    return float(row[0])


IDLE, INERROR = TransactionStatus.IDLE, TransactionStatus.INERROR
ENDED = (
    "the apply step's SQL ended the transaction (a COMMIT or ROLLBACK of its own): a step "
    "runs inside the store's transaction and must not end it"
)


class PipelinedTx(SqlTx):
    """One transaction's primitives over one connection, pipelined where ``pipeline``."""

    dialect = "postgres"

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        clock: Callable[[], float] | None,
        pipeline: psycopg.Pipeline | None = None,
    ) -> None:
        self._conn = conn
        self._clock = clock
        self._pipe = pipeline
        # Counts that must hold before the commit: (cursor, rows wanted, why not), and
        # per folded statement (pgfold), (its part, rows wanted, why not) for each part.
        self._expected: list[tuple[psycopg.Cursor[Any], int, str]] = []
        self._expected_parts: list[tuple[psycopg.Cursor[Any], list[tuple[int, int, str]]]] = []
        self._held: list[pgfold.Held] = []  # writes sent together with the next statement
        self._leave: Callable[[], None] | None = None  # ends the pipeline, where one runs
        # Whether SQL of a user's own ran: it may have SET something for the whole
        # session, which the store undoes once the transaction ends (RESET ALL).
        self.users_sql = False
        self.ended = False  # SQL of a user's own ended the transaction (see execute)
        self._guarded = False  # the step guard is set (queries.sql: step_guard_table)
        self.guards = True  # whether to set it: not in a read (READ ONLY makes no table)

    def _settle(self) -> None:
        """Send what was held back to go with the next statement (see PostgresTx)."""
        self._send_held()

    def _hold(
        self, name: Statement, rows: Sequence[Sequence[Any]], expected: int | None = None,
        why: str = "",
    ) -> None:  # fmt: skip
        """A columnar write nobody reads back: in a pipeline, where it is foldable, held
        to go together with the writes beside it (pgfold); otherwise sent now. Where
        ``expected``, it must change that many rows before the commit."""
        params = self._columns(name, rows)
        if self._pipe is not None and _query(name).foldable:
            self._held.append(pgfold.Held(_sql(name), params, expected, why))
            return
        cursor = self._send(name, params)
        if expected is not None:
            self.expect(cursor, expected, why)

    def _send_after_held(
        self, name: Statement, after: Statement, params: Sequence[Any]
    ) -> tuple[psycopg.Cursor[Any], list[pgfold.Held]]:
        """``name``, or, where writes are held, ``after`` (the same query over their
        counts, made to run after them) with the last statement of them folded before it.
        Its rows then begin with each folded write's count and their sum: the caller
        checks what they expect (the writes it returns)."""
        held, self._held = self._held, []
        self._settle()  # anything else held back, sent first
        last = pgfold.groups(held)[-1] if held else []
        if not last or any(pgfold.target(write.sql) is None for write in last):
            self._held = held
            return self._send(name, params), []
        self._held = held[: len(held) - len(last)]
        self._send_held()
        sql = pgfold.folded(tuple(write.sql for write in last), _sql(after))
        folded = [*(p for w in last for p in w.params), *params]
        return self._execute(sql, folded, binary=_name(after) in _BINARY), last

    def _send_held(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        for group in pgfold.groups(held):
            if len(group) == 1:  # as it is: nothing to fold it with
                write = group[0]
                cursor = self._execute(write.sql, write.params)
                if write.expected is not None:
                    self.expect(cursor, write.expected, write.why)
                continue
            sql = pgfold.folded(tuple(write.sql for write in group))
            cursor = self._execute(sql, [p for write in group for p in write.params])
            wanted = [(i, w.expected, w.why) for i, w in enumerate(group) if w.expected is not None]
            if wanted:
                self._expected_parts.append((cursor, wanted))

    def _send(self, name: Statement, params: Params = ()) -> psycopg.Cursor[Any]:
        """Send a statement; in a pipeline its answer is not waited for."""
        self._settle()
        return self._execute(_sql(name), params, binary=_name(name) in _BINARY)

    def _execute(self, sql: str, params: Params, binary: bool = False) -> psycopg.Cursor[Any]:
        """Send ``sql``: its columns of one element as scalars (pgscalars.compact)."""
        return self._conn.execute(*compact(sql, params), binary=binary)

    @staticmethod
    def _columns(name: Statement, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """A columnar statement's parameters: one array per column, of its type."""
        return columns(_sql(name), rows)

    def _send_many(self, name: Statement, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        if _columnar(name):
            self._hold(name, rows)
            return
        self._settle()
        # Not closed here: in a pipeline its answers are still on their way.
        self._conn.cursor().executemany(_sql(name), rows)

    def _ready(self, cursor: psycopg.Cursor[Any]) -> psycopg.Cursor[Any]:
        """``cursor`` with its answer, collected first where a pipeline still holds it."""
        if self._pipe is not None and cursor.pgresult is None:
            self._pipe.sync()
        return cursor

    def _answered(self, cursor: psycopg.Cursor[Any]) -> int:
        """A sent statement's row count."""
        return self._ready(cursor).rowcount

    def _described(self, name: Statement, params: Params = ()) -> tuple[Sequence[str], list[Any]]:
        cursor = self._ready(self._send(name, params))
        if cursor.description is None:
            return (), []
        return [column.name for column in cursor.description], cursor.fetchall()

    def _one(self, name: Statement, params: Params = ()) -> Any:
        return self._send(name, params).fetchone()

    def _all(self, name: Statement, params: Params = ()) -> list[Any]:
        return self._send(name, params).fetchall()

    def _run(self, name: Statement, params: Params = ()) -> int:
        return self._answered(self._send(name, params))

    def _many(self, name: Statement, rows: Sequence[Sequence[Any]]) -> int:
        if not rows:
            return 0
        if _query(name).each:  # its count is known: nothing to wait for
            self._send_many(name, rows)
            return len(rows)
        if _columnar(name):
            return max(self._answered(self._send(name, self._columns(name, rows))), 0)
        self._settle()
        with self._conn.cursor() as cur:
            cur.executemany(_sql(name), rows)
            if self._pipe is not None:  # every row's answer, not only the first's
                self._pipe.sync()
            return max(cur.rowcount, 0)

    def _many_rows(self, name: Statement, rows: Sequence[Sequence[Any]]) -> list[Any]:
        if not rows:
            return []
        if _columnar(name):
            # One statement for the batch: one array per column.
            cur = self._ready(self._send(name, self._columns(name, rows)))
            return cur.fetchall() if cur.description else []
        found_rows: list[Any] = []
        self._settle()
        with self._conn.cursor() as cur:
            cur.executemany(_sql(name), rows, returning=True)
            while True:
                if cur.description:
                    found_rows += cur.fetchall()
                if not cur.nextset():
                    return found_rows

    def expect(self, cursor: psycopg.Cursor[Any], rows: int, why: str) -> None:
        """Before the commit, ``cursor`` must have changed ``rows`` rows; otherwise the
        transaction is decided again (:class:`RetryTransaction`)."""
        self._expected.append((cursor, rows, why))

    def before_commit(self) -> None:
        """Check what must hold before the commit (one turn, only where something must)."""
        # The guard is lifted unless the transaction failed (its COMMIT is answered
        # ROLLBACK: nothing to lift); none to lift means a ROLLBACK AND CHAIN threw the
        # work before it away. Ended: a step that caught ENDED and carried on.
        if self.ended or (
            self._guarded
            and self._conn.info.transaction_status != INERROR
            and self._answered(self._send("step_guard_lift")) != 1
        ):
            self.ended = True
            raise StorageError(ENDED)
        self._settle()
        for cursor, rows, why in self._expected:
            if self._answered(cursor) != rows:
                raise RetryTransaction(why)
        for cursor, wanted in self._expected_parts:
            counts = self._ready(cursor).fetchone()
            for part, rows, why in wanted:
                if counts is None or counts[part] != rows:
                    raise RetryTransaction(why)

    def _shaped(self, cursor: psycopg.Cursor[Any], name: str, cls: type[Any]) -> list[Any]:
        rows = cursor.fetchall()
        if not rows or cursor.description is None:
            return []
        make = shape(name, cls, [column.name for column in cursor.description])
        return [make(row) for row in rows]

    # -- a user's own SQL --------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._settle()
        self.users_sql = True
        if self.guards and not self._guarded:  # a COMMIT of its own fails (step_guard_table)
            self._send("step_guard_table")
            self._send("step_guard_set")
            self._guarded = True
        if not params:
            self._apart(sql)
        try:
            cur = self._ready(self._conn.execute(sql, params))
        finally:
            # A ROLLBACK of its own, or a COMMIT (refused by the guard, which rolls it all
            # back): what follows would run, and commit, statement by statement (the
            # connection is in autocommit), and the store's COMMIT would be answered as
            # done. SQLite's commit hook refuses it; here it fails the step, and the
            # transaction's own commit fails too if the step carried on (before_commit).
            self.ended = self.ended or self._conn.info.transaction_status == IDLE
        if self.ended:
            raise StorageError(ENDED)
        return [tuple(row) for row in cur.fetchall()] if cur.description else []

    def script(self, sql: str) -> None:
        self._settle()
        self.users_sql = True
        self._apart(sql)
        self._conn.execute(sql)  # no parameters: psycopg leaves a literal % alone

    def _apart(self, sql: str) -> None:
        """SQL that may hold several statements runs outside the pipeline (which takes
        one at a time): the rest of this transaction then waits for each answer."""
        if self._pipe is not None and ";" in sql.strip().rstrip(";") and self._leave:
            self._leave()
            self._pipe = None
