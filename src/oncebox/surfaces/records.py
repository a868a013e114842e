"""Records as every surface finds them: a listing a page at a time, one record with its
timeline, and a delivery key's lookup, each as the same JSON (the CLI prints it, the API
sends it, the console renders from the same engine calls).

A listing's rows are bounded as every listing's are (:mod:`oncebox.surfaces.listing`):
each content cut to its first 1,024 bytes with its length and SHA-256, the whole record
one request away (``oncebox record ID``, ``GET /v1/records/{id}``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from oncebox.domain import Record
from oncebox.engine.box import Oncebox
from oncebox.engine.finding import Lookup, Order, RecordView
from oncebox.engine.views import LISTED
from oncebox.surfaces.listing import PAGE, Rows
from oncebox.surfaces.paging import pages_after, row_id
from oncebox.surfaces.views import as_json

PROOF = "/v1/log/proofs/records/{record_id}"  # where a record's inclusion proof is


@dataclass(frozen=True)
class Query:
    """Which records, in which order: each unset filter lets any through (``since <= t <
    until``, first seen, server-clock seconds; ``search``: text the content holds;
    ``after``: the last id of the page before)."""

    key: str | None = None
    identity: str | None = None
    since: float | None = None
    until: float | None = None
    search: str | None = None
    after: int = 0
    order: str = Order.NEWEST.value


def row(record: Record, inbox: str) -> dict[str, Any]:
    """A record as a listing shows it."""
    return as_json(record, inbox=inbox, duplicates=record.seen_count - 1)


def pages(box: Oncebox, inbox: str, query: Query, limit: int) -> Iterator[Rows]:
    """Up to ``limit`` of the inbox's records that ``query`` selects, as JSON, a page at
    a time (each page read on its own, a search too, each in its own budget)."""
    box.inbox(inbox)  # an unknown inbox fails here, before any page

    def read(after: int, size: int) -> list[Record]:
        return box.records(
            inbox, key=query.key, identity=query.identity, since=query.since,
            until=query.until, search=query.search, after=after, order=query.order,
            limit=size, preview=LISTED,
        )  # fmt: skip

    for found in pages_after(read, limit, query.after, PAGE, row_id):
        yield [row(record, inbox) for record in found]


def proof_of(record: Record) -> str | None:
    """Where the record's inclusion proof is, once it is sealed."""
    return PROOF.format(record_id=record.id) if record.log_seq is not None else None


def view_json(view: RecordView) -> dict[str, Any]:
    """A record whole, with all that happened to it."""
    record = view.record
    return {
        "inbox": view.inbox,
        "record": as_json(record),
        "duplicates": record.seen_count - 1,
        "revisions": [as_json(r) for r in view.revisions],
        "quarantine": [as_json(q) for q in view.quarantine],
        "more_quarantine": view.more_quarantine,
        "log": [as_json(e) for e in view.log],
        "timeline": [as_json(t) for t in view.timeline],
        "proof": proof_of(record),
    }


def lookup_json(found: Lookup) -> dict[str, Any]:
    """Everything kept under a delivery key, in time order."""
    return {
        "inbox": found.inbox,
        "key": found.key,
        "arrived": found.arrived,
        "records": [row(r, found.inbox) for r in found.records],
        "quarantine": [as_json(q) for q in found.quarantine],
        "dead_letters": [as_json(d, inbox=found.inbox) for d in found.dead_letters],
        "timeline": [as_json(t) for t in found.timeline],
        "more": found.more,
    }
