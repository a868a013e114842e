"""One SQLite transaction over an APSW connection: the store interface's primitives
(:class:`~oncebox.store.sqltx.SqlBase`) and what SQLite does differently. The store that
opens, commits and rolls these back is :mod:`oncebox.store.sqlite`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import apsw

from oncebox.domain import Fenced, LeaseState, Stored, StoredRow
from oncebox.store.sqlfile import load_queries
from oncebox.store.sqltx import Params, SqlTx, Statement
from oncebox.store.sqltx.base import shape

Q = load_queries("sqlite")
R = TypeVar("R")
# (store statement, type) -> how its rows are built, once its columns were matched
_MADE: dict[tuple[str, type], Callable[[Sequence[Any]], Any]] = {}


def _bare(sql: str) -> str:
    """``sql`` without its comment lines, blank lines and indentation: APSW's statement
    cache hashes the whole text, a byte at a time (some 10 instructions a byte), on every
    run, and an ``executemany`` runs it again for each row. Line breaks stay, so a comment
    at a line's end still ends there; the store's SQL has no string spanning lines
    (tests/test_sqlite_io.py compares each statement's program with its full text's)."""
    lines = (line.strip() for line in sql.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--"))


_TEXT = {name: _bare(query.sql) for name, query in Q.items()}


def _sql(statement: Statement) -> str:
    """A statement's SQL: the store's own by name, or an apply step's :class:`Query`."""
    return _TEXT[statement] if isinstance(statement, str) else statement.sql


class SQLiteTx(SqlTx):
    """The store interface over one APSW connection inside one transaction."""

    dialect = "sqlite"

    def __init__(
        self,
        conn: apsw.Connection,
        clock: Callable[[], float],
        relaxed: bool = False,
        cursor: apsw.Cursor | None = None,
    ) -> None:
        self._conn = conn
        self._clock = clock
        self._relaxed = relaxed
        # The connection's own cursor, for statements read to their end: making and
        # dropping a cursor per statement costs more than a duplicate's lookup. A
        # statement read only in part (_one, _described) gets a cursor of its own, which
        # resets it when dropped, so that no statement is left open after its call.
        self._cursor = conn.cursor() if cursor is None else cursor
        # The sealer's lease last read, with its columns: a lease is immutable, and the
        # row seldom changes, so the same columns are answered with the same object.
        self._lease_read: tuple[tuple[Any, ...], LeaseState] | None = None

    def now(self) -> float:
        return float(self._clock())

    def relax(self) -> bool:
        """Only one begun relaxed (``durable=False``): the level cannot change inside."""
        return self._relaxed

    def _described(self, name: Statement, params: Params = ()) -> tuple[Sequence[str], list[Any]]:
        cursor = self._conn.execute(_sql(name), params)
        try:
            columns = [column[0] for column in cursor.description]
        except apsw.ExecutionCompleteError:  # no rows at all
            return (), []
        return columns, cursor.fetchall()

    def _one(self, name: Statement, params: Params = ()) -> Any:
        for row in self._conn.execute(_sql(name), params):
            return tuple(row)
        return None

    def _all(self, name: Statement, params: Params = ()) -> list[Any]:
        return [tuple(row) for row in self._cursor.execute(_sql(name), params)]

    def _run(self, name: Statement, params: Params = ()) -> int:
        self._conn.execute(_sql(name), params)
        return int(self._conn.changes())

    def _many(self, name: Statement, rows: Sequence[Sequence[Any]]) -> int:
        if not rows:
            return 0
        conn = self._conn
        before = conn.total_changes()
        sql = _TEXT[name] if isinstance(name, str) else name.sql  # _sql, without its call
        # Read to the end: a statement that returns rows runs only as far as they are read.
        # One row of parameters (a single delivery's) runs as one execute, for less.
        if len(rows) == 1:
            for _ in self._cursor.execute(sql, rows[0]):
                pass
        else:
            for _ in self._cursor.executemany(sql, rows):
                pass
        return int(conn.total_changes() - before)

    def _many_rows(self, name: Statement, rows: Sequence[Sequence[Any]]) -> list[Any]:
        if not rows:
            return []
        # A statement that returns rows runs only as far as its rows are read.
        return [tuple(row) for row in self._conn.executemany(_sql(name), rows)]

    def _rows(self, name: Statement, params: Params, cls: type[R]) -> list[R]:
        """Built as the columns matched ``cls`` the first time: a store statement's
        columns are fixed by its text, so they are not asked of the cursor again. No
        columns are asked where no row came (no exception raised and caught for it)."""
        if isinstance(name, str) and (made := _MADE.get((name, cls))) is not None:
            return [made(row) for row in self._cursor.execute(_TEXT[name], params)]
        cursor = self._cursor.execute(_sql(name), params)
        for first in cursor:  # the columns are known while the statement runs
            make = shape(name, cls, [column[0] for column in cursor.description])
            if isinstance(name, str):
                _MADE[(name, cls)] = make
            return [make(first), *(make(row) for row in cursor)]
        return []

    def decision_reads(
        self, inbox_id: int, idents: Sequence[bytes], scopes: Sequence[str] | None
    ) -> tuple[dict[str, LeaseState], float, dict[bytes, StoredRow], list[int] | None]:
        """:class:`SqlTx`'s reads, one after another, less the identity lock that
        BEGIN IMMEDIATE already holds (:meth:`lock_identities` does nothing here)."""
        if scopes is None and len(idents) == 1:  # a single delivery of an unfenced inbox
            # Its row as SQLite gives it, a plain tuple in Stored's order (the statements'
            # columns are its fields: tests/test_single_round_six.py), read to its end.
            ident, found = idents[0], None
            if self._relaxed:  # begun for a likely duplicate: its record alone
                for row in self._cursor.execute(_TEXT["find_record"], (inbox_id, ident)):
                    found = row  # one row at most: an identity is unique in its inbox
                return {}, float(self._clock()), {} if found is None else {ident: found}, None
            # Begun for a likely new record: with the id it takes (reserve_record_ids(1)).
            for row in self._cursor.execute(_TEXT["find_record_or_next_id"], (inbox_id, ident)):
                found = row  # one row: the record, else the id
            assert found is not None
            if found[1] is None:
                return {}, float(self._clock()), {}, [found[0]]
            return {}, float(self._clock()), {ident: found}, None
        return self._reads(inbox_id, idents, scopes)

    def _reads(
        self, inbox_id: int, idents: Sequence[bytes], scopes: Sequence[str] | None
    ) -> tuple[dict[str, LeaseState], float, dict[bytes, StoredRow], list[int] | None]:
        names = sorted(set(scopes)) if scopes else []
        leases = self.held(Fenced.SCOPE, inbox_id, names) if names else {}
        return leases, float(self._clock()), self.find_records(inbox_id, idents), None

    def find_records(self, inbox_id: int, idents: Sequence[bytes]) -> dict[bytes, StoredRow]:
        """A batch's rows as SQLite gives them, plain tuples in Stored's order (the
        statement's columns are its fields: tests/test_cpu_round_five.py)."""
        if not idents:
            return {}
        if len(idents) == 1:
            found: Iterable[Any] = self._rows("find_record", (inbox_id, idents[0]), Stored)
        else:  # bound as one array, which SQLite reads without calling back into Python
            wanted = (inbox_id, apsw.carray(tuple(idents)))
            found = self._cursor.execute(_TEXT["find_records"], wanted)
        return {row[1]: row for row in found}  # keyed by ident (a blob is read as bytes)

    def reserve_record_ids(self, n: int) -> list[int]:
        """The ``n`` ids after the highest there is or was: the first read in one row
        (``reserve_record_id``), the others counted on from it here, not made one row
        each by the batch statement's recursive count and sort (several times the cost;
        compared with it in tests/test_cpu_round_four.py and test_single_statements)."""
        first = int(self._all("reserve_record_id")[0][0])
        return list(range(first, first + n))

    def held(
        self, kind: str, owner: int, names: Sequence[str], exclusive: bool = False
    ) -> dict[str, LeaseState]:
        """One name (the sealer's, a single delivery's scope) looked up by itself; BEGIN
        IMMEDIATE holds the write lock already, so ``exclusive`` changes nothing here."""
        if len(names) != 1:
            return super().held(kind, owner, names, exclusive)
        found = self._rows("held_lease", (kind, owner, names[0]), LeaseState)
        return {row.name: row for row in found}

    def seal_reads(
        self, kind: str, owner: int, name: str
    ) -> tuple[LeaseState | None, bool, tuple[int, str] | None]:
        """:class:`SqlTx`'s three reads in one statement, one row (none without a lease:
        then one after another)."""
        found = None
        for row in self._cursor.execute(_TEXT["seal_reads"], (kind, owner, name)):
            found = row
        if found is None:
            return super().seal_reads(kind, owner, name)
        columns, read = found[:8], self._lease_read
        if read is None or read[0] != columns:  # a frozen dataclass costs a seal's reads
            read = self._lease_read = (columns, LeaseState(*columns))
        return read[1], bool(found[8]), None if found[9] is None else (found[9], found[10])

    def count_duplicates(self, repeats: Mapping[int, int], now: float) -> int:
        """A batch's counts with one statement for each number of repeats (nearly always
        one: each record repeated once), its records' ids bound as one array; a single
        delivery's one row run as it is. One writer at a time: no lock order to keep."""
        if len(repeats) == 1:
            ((record_id, n),) = repeats.items()
            self._cursor.execute(_TEXT["count_duplicates"], (record_id, n, now))
            return int(self._conn.changes())
        counts = set(repeats.values())
        if len(counts) == 1:
            groups: Mapping[int, Iterable[int]] = {counts.pop(): repeats}
        else:
            grouped: dict[int, list[int]] = {}
            for record_id, n in repeats.items():
                grouped.setdefault(n, []).append(record_id)
            groups = grouped
        conn, execute, changed = self._conn, self._cursor.execute, 0
        for n, ids in groups.items():
            execute(_TEXT["count_duplicates_at_once"], (apsw.carray(array("q", ids)), n, now))
            changed += conn.changes()
        return changed

    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        if len(counts) != 1:
            super().count_verdicts(inbox_id, hour, counts)
            return
        (((verdict, reason), n),) = counts.items()  # a single delivery's one count
        self._cursor.execute(_TEXT["count_verdict"], (inbox_id, hour, verdict, reason, n))

    def lock_identities(
        self, inbox_id: int, idents: Sequence[bytes], exclusive: bool = False
    ) -> None:
        """BEGIN IMMEDIATE already serializes writers: nothing more to lock."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._conn.execute(sql, params)]

    def script(self, sql: str) -> None:
        """Every statement of ``sql``: APSW runs the next statement only once the rows
        of one that returns some are read, so they are read (and dropped) to the end."""
        for _ in self._conn.execute(sql):
            pass
