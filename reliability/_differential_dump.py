"""What reliability/_differential_play.py writes: results and tables as plain JSON.

Everything a side returns or stores becomes a JSON value here, in an order that does not
depend on how it was produced: the parent compares the two sides' dumps as they are.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

# The only columns not compared: when PostgreSQL applied each migration, by its own clock
# (the migrations run in SQL before any clock of ours is consulted), so they differ on
# every run of the same code. SQLite's are deterministic and compared.
NOT_COMPARED = {
    ("postgres", "schema_version", "applied_at"),
    ("postgres", "step_schema", "applied_at"),
}


def plain(value: Any) -> Any:
    """A JSON value for anything the library returns (decisions, pages, rows)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value else "nan"
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) <= 512:
            return {"hex": raw.hex()}
        return {"len": len(raw), "sha256": hashlib.sha256(raw).hexdigest(), "head": raw[:64].hex()}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, datetime.datetime | datetime.date | decimal.Decimal):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "_asdict"):
        return plain(value._asdict())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(v) for v in value), key=json.dumps)
    if hasattr(value, "to_dict"):
        return plain(value.to_dict())
    return f"<{type(value).__name__}>"


def outcome(work: Callable[[], Any], keep: list[Any] | None = None) -> Any:
    """What a call returned or raised; ``keep`` also gets what it returned, if not None."""
    try:
        got = work()
        if keep is not None and got is not None:
            keep.append(got)
        return {"ok": plain(got)}
    except Exception as exc:  # every error is part of what is compared
        return {"error": type(exc).__name__, "message": str(exc)}


class Logged(logging.Handler):
    """The library's log lines (a conflict's warning) are output too: kept per step."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")

    def around(self, result: Any) -> Any:
        lines, self.lines = self.lines, []
        return {"out": result, "logged": lines} if lines else result


def tables(box: Any, backend: str) -> dict[str, Any]:
    """Every table's columns and rows, the rows sorted by their values."""
    with box.store.reading() as tx:
        if backend == "sqlite":
            names = [
                r[0]
                for r in tx.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
        else:
            names = [
                r[0]
                for r in tx.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                    "current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
                )
            ]
        dump: dict[str, Any] = {}
        for name in names:
            if backend == "sqlite":
                columns = [r[1] for r in tx.execute(f'PRAGMA table_info("{name}")')]
            else:
                columns = [
                    r[0]
                    for r in tx.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                        "current_schema() AND table_name = %s ORDER BY ordinal_position",
                        (name,),
                    )
                ]
            skipped = [i for i, c in enumerate(columns) if (backend, name, c) in NOT_COMPARED]
            rows = [plain(list(row)) for row in tx.execute(f'SELECT * FROM "{name}"')]
            for row in rows:
                for i in skipped:
                    row[i] = "<not compared>"
            rows.sort(key=_row_order)
            dump[name] = {"columns": columns, "rows": rows}
    return dump


def _row_order(row: list[Any]) -> tuple[bool, int, str]:
    """By the first column where it is a number (the id, mostly), then by every value."""
    first = row[0] if row else None
    number = first if isinstance(first, int) and not isinstance(first, bool) else None
    return (number is None, number or 0, json.dumps(row, sort_keys=True))


def fix_eviction_order(box: Any) -> bool:
    """PostgreSQL hands an eviction pass's rows back (``UPDATE`` / ``DELETE ...
    RETURNING``) in no fixed order where records were first seen at the same instant,
    and the engine logs them in that order: a run-to-run difference, seen on the old
    code as on the new. The player sorts exactly those two
    statements' rows by (first seen, record id), the order SQLite gives, before the
    engine sees them, on both sides alike. False if the store has no ``_rows`` to wrap."""
    with box.store.reading() as tx:
        cls = type(tx)
    rows = getattr(cls, "_rows", None)
    if rows is None or getattr(rows, "sorted_evictions", False):
        return rows is not None

    def ordered(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        found = rows(self, name, *args, **kwargs)
        if name in ("evict_records", "drop_tombstones"):
            found = sorted(found, key=lambda row: (row.first_seen, row.record_id))
        return found

    ordered.sorted_evictions = True  # type: ignore[attr-defined]
    cls._rows = ordered
    return True


def figures(dump: dict[str, Any]) -> tuple[int, int, int]:
    """(histories, deliveries, steps) one side played."""
    histories = dump["histories"]
    return (
        len(histories),
        sum(h["deliveries"] for h in histories),
        sum(len(h["steps"]) for h in histories),
    )


def outcomes(dump: dict[str, Any]) -> Counter[str]:
    """How often each verdict came back and errors were raised: what the histories did."""
    seen: Counter[str] = Counter()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "verdict" in value and "may_ack" in value:
                seen[value["verdict"]] += 1
            elif "error" in value and "message" in value:
                seen["errors raised"] += 1
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for history in dump["histories"]:
        walk(history["steps"])
    return seen
