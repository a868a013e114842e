"""``triage``: a USSD intake desk's headcount ledger (docs/concepts.md#triage-ledger), a row
per applied frame
and totals per site and need, so that a retransmitted session never counts twice.

An accepted revision replaces its record's row and moves the totals by the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oncebox.domain import LedgerRow
from oncebox.engine.step import Change
from oncebox.formats import Invalid
from oncebox.formats.json_event import bounded_string
from oncebox.store.base import StepTx
from oncebox.store.sqlfile import Query, read_migrations, read_queries

PACKAGE = "oncebox.engine.steps"
COUNT_MAX = 999_999_999  # nine digits, as an H1 frame's counts: any sum fits 64 bits
FIELDS = ("site", "need", "headcount", "pri")
_SQL = {dialect: read_queries(PACKAGE, "sql", dialect, "triage.sql")
        for dialect in ("sqlite", "postgres")}  # fmt: skip


def _q(tx: StepTx, name: str) -> Query:
    return _SQL[tx.dialect][name]


def _field(fields: Mapping[str, Any], name: str) -> Any:
    if name not in fields:
        raise Invalid("missing_field", f"field {name} is missing (the apply step needs it)")
    return fields[name]


def _count(fields: Mapping[str, Any], name: str) -> None:
    value = _field(fields, name)
    if type(value) is not int or not 0 <= value <= COUNT_MAX:
        raise Invalid("bad_field", f"{name} must be a whole number from 0 to {COUNT_MAX:,}")


def ledger_row(record_id: int, fields: Mapping[str, Any]) -> LedgerRow:
    return LedgerRow(
        record_id, fields["site"], fields["need"], int(fields["headcount"]), int(fields["pri"])
    )


class Triage:
    """The ``triage`` step."""

    name = "triage"
    needs_fields = FIELDS

    def check_fields(self, fields: Mapping[str, Any]) -> None:
        """A site and a need (bounded strings), a headcount and a priority (counts)."""
        for name in ("site", "need"):
            bounded_string(_field(fields, name), name)
        _count(fields, "headcount")
        _count(fields, "pri")

    def migrations(self, dialect: str) -> list[tuple[int, str]]:
        return read_migrations(PACKAGE, "sql", dialect, "triage")

    def apply(self, tx: StepTx, changes: Sequence[Change]) -> None:
        firsts = [c for c in changes if c.previous is None]
        if firsts:
            insert(tx, firsts[0].inbox_id, [ledger_row(c.record_id, c.fields) for c in firsts])
        for change in changes:
            if change.previous is not None:
                replace(tx, change.inbox_id, ledger_row(change.record_id, change.fields))


def _lock_totals(tx: StepTx, inbox_id: int) -> None:
    if "lock_totals" in _SQL[tx.dialect]:  # where writers run side by side
        tx.one(_q(tx, "lock_totals"), (inbox_id,))


def insert(tx: StepTx, inbox_id: int, rows: Sequence[LedgerRow]) -> None:
    """New records' rows; the totals move once per site and need."""
    _lock_totals(tx, inbox_id)
    tx.many(
        _q(tx, "ledger_inserts"),
        [(r.record_id, inbox_id, r.site, r.need, r.headcount, r.pri) for r in rows],
    )
    totals: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        moved = totals.setdefault((r.site, r.need), [0, 0])
        moved[0] += r.headcount
        moved[1] += 1
    # Sorted: concurrent batches lock the totals rows in one order.
    tx.many(
        _q(tx, "totals_add"),
        [(inbox_id, site, need, h, n) for (site, need), (h, n) in sorted(totals.items())],
    )


def replace(tx: StepTx, inbox_id: int, row: LedgerRow) -> LedgerRow | None:
    """Replace a record's row, moving the totals by the difference; the old row."""
    _lock_totals(tx, inbox_id)  # before the row: the order insert() locks them in
    found = tx.rows(_q(tx, "ledger_get"), (row.record_id,), LedgerRow)
    if not found:
        insert(tx, inbox_id, [row])
        return None
    old = found[0]
    tx.run(_q(tx, "ledger_update"), (row.site, row.need, row.headcount, row.pri, row.record_id))
    moves = sorted(
        [(old.site, old.need, -old.headcount, -1), (row.site, row.need, row.headcount, 1)]
    )
    tx.many(_q(tx, "totals_add"), [(inbox_id, *move) for move in moves])
    return old


def totals(tx: StepTx, inbox_id: int) -> list[tuple[str, str, int, int]]:
    """(site, need, headcount, cases) per bucket."""
    return [(s, n, int(h), int(c)) for s, n, h, c in tx.all(_q(tx, "ledger_totals"), (inbox_id,))]


def arrivals(tx: StepTx, inbox_id: int) -> list[tuple[str, str, int, int]]:
    """(site, need, headcount, arrivals) per bucket had every arrival been counted: each
    record's headcount as often as it arrived (duplicates included)."""
    rows = tx.all(_q(tx, "ledger_arrivals"), (inbox_id,))
    return [(s, n, int(h), int(c)) for s, n, h, c in rows]


def ranking(tx: StepTx, inbox_id: int) -> list[LedgerRow]:
    return tx.rows(_q(tx, "ledger_ranking"), (inbox_id,), LedgerRow)


def view(tx: StepTx, inbox_id: int) -> dict[str, Any]:
    """The headcount ledger: totals per site and need, and the priority ranking; and
    beside each total what counting every arrival would have given (a retransmitted
    session counted twice is 46, not 23), so that what dedup suppressed is in sight."""
    found = totals(tx, inbox_id)
    ranked = ranking(tx, inbox_id)
    every = {(s, n): (h, a) for s, n, h, a in arrivals(tx, inbox_id)}
    headcount = sum(h for _, _, h, _ in found)
    counted = sum(every.get((s, n), (h, c))[0] for s, n, h, c in found)
    return {
        "headcount": headcount,
        "cases": sum(c for _, _, _, c in found),
        "every_arrival_headcount": counted,
        "suppressed_headcount": counted - headcount,
        "totals": [
            {
                "site": s,
                "need": n,
                "headcount": h,
                "cases": c,
                "every_arrival_headcount": every.get((s, n), (h, c))[0],
                "arrivals": every.get((s, n), (h, c))[1],
            }
            for s, n, h, c in found
        ],
        "ranking": [
            {
                "record_id": r.record_id,
                "site": r.site,
                "need": r.need,
                "headcount": r.headcount,
                "pri": r.pri,
            }
            for r in ranked
        ],
    }


def sites(tx: StepTx, inbox_id: int) -> list[tuple[str, float | None]]:
    """(site, last delivery) per site in the ledger: when a record of that site last
    arrived (None once retention dropped them all), so a desk sees a site gone quiet."""
    rows = tx.all(_q(tx, "ledger_sites"), (inbox_id,))
    return [(str(site), None if at is None else float(at)) for site, at in rows]


TRIAGE = Triage()
