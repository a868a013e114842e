"""The store's schema: made whole for a new store, brought up to date for one that exists.

A new store is made from ``sql/<backend>/schema.sql`` in one transaction, every migration
recorded as applied in it: one file says what the tables are, not a replay of every
change since the first. A store that exists applies the migrations it lacks, in order,
each in a transaction of its own. Migrations are numbered alike on every backend: the
same number is the same change, and a change one backend does not need is a file there
that says why and does nothing.

The built-in apply steps, and a user's own, keep their tables' migrations apart from
the store's and have them applied here too, recorded per step (``step_schema``), when an
inbox that uses the step is declared.

Every transaction here is a backend's write transaction that keeps other migrators out
(SQLite's ``BEGIN IMMEDIATE``, an advisory lock on PostgreSQL), so stores opened by
several processes at once migrate once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from oncebox.errors import SchemaBehind, StorageError
from oncebox.store.sqlfile import Query, load_migrations, load_queries, load_schema

# Before both backends numbered their migrations alike, each counted its own: a store
# made then recorded its backend's numbers, translated here once, in one transaction,
# each new row keeping the number it had (schema_version.renumbered_from). A shared
# number the backend does not need goes with the change after it; PostgreSQL's first
# migration was SQLite's first five.
RENUMBERED: dict[str, dict[int, tuple[int, ...]]] = {
    "sqlite": {
        1: (1,), 2: (2,), 3: (3,), 4: (4,), 5: (5,), 6: (6,), 7: (7,), 8: (8, 9), 9: (10,),
        10: (11,), 11: (12,), 12: (13,), 13: (14, 15), 14: (16,),
    },
    "postgres": {
        1: (1, 2, 3, 4, 5), 2: (6,), 3: (7,), 4: (8,), 5: (9,), 6: (10,), 7: (11,), 8: (12,),
        9: (13,), 10: (14,), 11: (15,), 12: (16,),
    },
}  # fmt: skip


class Migrating(Protocol):
    """A write transaction as the migrator uses it."""

    def all(self, query: Query, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one of the store's statements."""
        ...

    def run(self, query: Query, params: Sequence[Any] = ()) -> int:
        """Run one of the store's statements."""
        ...

    def script(self, sql: str) -> None:
        """Run a migration or the schema as written, every statement of it."""
        ...


Begin = Callable[[], AbstractContextManager[Migrating]]


def migrate(begin: Begin, backend: str, now: Callable[[], float]) -> None:
    """Make a new store's schema, or bring an existing store's up to date."""
    q = load_queries(backend)
    migrations = load_migrations(backend)
    with begin() as tx:
        columns = {str(column) for (column,) in tx.all(q["schema_version_columns"])}
        if not columns:
            tx.run(q["create_schema_version"])
            tx.script(load_schema(backend))
            stamp = now()
            for version, _ in migrations:
                tx.run(q["record_migration"], (version, stamp, None))
            return
        refuse_foreign(tx, q, columns, "this database")
        if "renumbered_from" not in columns:
            renumber(tx, backend)
        applied = {int(version) for version, _ in tx.all(q["migrations_applied"])}
        refuse_newer(applied, migrations)
    _apply(begin, migrations, applied, q["migrations_applied"], q["record_migration"], (), now)


def check_current(read: Begin, backend: str, where: str) -> None:
    """For a store opened only to read: that its schema is the one this version makes,
    changing nothing. Raises :class:`SchemaBehind` naming the migrations it lacks (and
    what upgrades it), or StorageError for a database that holds no store at all (or
    another application's schema_version) or one a newer oncebox migrated."""
    q = load_queries(backend)
    known = [version for version, _ in load_migrations(backend)]
    with read() as tx:
        columns = {str(column) for (column,) in tx.all(q["schema_version_columns"])}
        if columns:
            refuse_foreign(tx, q, columns, where)
        applied = (
            {int(version) for version, _ in tx.all(q["migrations_applied"])} if columns else set()
        )
    if not columns:
        raise StorageError(
            f"{where} is not an oncebox store (no schema): a command that only reads never "
            "makes one (check --db, $ONCEBOX_DB or the config's store)"
        )
    if "renumbered_from" in columns:
        refuse_newer(applied, load_migrations(backend))
    else:  # what migrating would lack once it has translated the old numbers
        applied = {new for old in applied for new in RENUMBERED[backend].get(old, ())}
    missing = tuple(v for v in known if v not in applied)
    if "renumbered_from" not in columns:  # numbered as before both backends shared one
        lacks = "its migrations are numbered the old way"
    elif len(missing) == 1:
        lacks = f"migration {missing[0]:03d}"
    elif missing:
        lacks = f"migrations {missing[0]:03d} to {missing[-1]:03d}"
    else:
        return
    raise SchemaBehind(
        f"{where} needs an upgrade ({lacks}), and a command that only reads never changes "
        "the store: run `oncebox migrate` (or any command that writes) first",
        missing,
    )


def refuse_foreign(tx: Migrating, q: dict[str, Query], columns: set[str], where: str) -> None:
    """Another application's table named schema_version (a --db that names the wrong
    database) is refused before anything is read from it as migration numbers, or
    written: it is not an old oncebox store to renumber and migrate. Ours, empty, is a
    store that has applied nothing yet (migration 1 makes the inboxes and records itself
    in one transaction)."""
    ours = {"version", "applied_at"} <= columns
    if not ours or not (tx.all(q["inboxes_columns"]) or not tx.all(q["migrations_applied"])):
        raise StorageError(
            f"{where} is not an oncebox store: its schema_version table is another's "
            "(check --db, $ONCEBOX_DB or the config's store)"
        )


def refuse_newer(
    applied: set[int], migrations: Sequence[tuple[int, str]], what: str = "this store"
) -> None:
    """A store a newer oncebox migrated is refused, before anything is written: this
    version's statements would meet a schema they were not written for (a unique key
    gone, a table made again) at whatever write or read came to it first."""
    newer = sorted(applied - {version for version, _ in migrations})
    if newer:
        raise StorageError(
            f"{what} was migrated by a newer oncebox (migrations {newer}, which this "
            "version does not know): open it with that version or a later one"
        )


def renumber(tx: Migrating, backend: str) -> None:
    """Translate the migration numbers a store recorded before both backends shared one
    numbering into the shared ones, keeping each old number beside its new ones."""
    q = load_queries(backend)
    table = RENUMBERED[backend]
    recorded = [(int(version), float(at)) for version, at in tx.all(q["migrations_applied"])]
    unknown = sorted({version for version, _ in recorded} - table.keys())
    if unknown:
        raise StorageError(f"this store records migrations this version does not know: {unknown}")
    tx.run(q["add_renumbered_from"])
    tx.run(q["forget_migrations"])
    for old, applied_at in recorded:
        for new in table[old]:
            tx.run(q["record_migration"], (new, applied_at, old))


def migrate_step(
    begin: Begin,
    backend: str,
    step: str,
    migrations: Sequence[tuple[int, str]],
    now: Callable[[], float],
) -> None:
    """Apply the migrations of the tables ``step`` owns that this store lacks."""
    if not migrations:
        return
    q = load_queries(backend)
    with begin() as tx:
        applied = {int(version) for (version,) in tx.all(q["step_migrations_applied"], (step,))}
        refuse_newer(applied, migrations, f"this store's {step} tables")
    _apply(
        begin, migrations, applied, q["step_migrations_applied"], q["record_step_migration"],
        (step,), now,
    )  # fmt: skip


def _apply(
    begin: Begin,
    migrations: Sequence[tuple[int, str]],
    applied: set[int],
    done: Query,
    record: Query,
    owner: tuple[str, ...],
    now: Callable[[], float],
) -> None:
    """Each migration not yet ``applied``, in order, in a transaction of its own that
    looks again (another process may have applied it meanwhile) and records it."""
    for version, sql in migrations:
        if version in applied:
            continue
        with begin() as tx:
            if version in {int(row[0]) for row in tx.all(done, owner)}:
                continue
            tx.script(sql)
            if owner:
                tx.run(record, (*owner, version, now()))
            else:
                tx.run(record, (version, now(), None))
