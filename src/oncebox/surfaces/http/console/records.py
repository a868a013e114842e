"""The records pages: an inbox's records found by key, identity, content or time, a page
at a time; and one record with its timeline (arrivals, duplicates, conflicts and their
resolutions, its eviction), its revisions, its newcomers and its log entries.

The filters are a plain GET form, so a found page is a link an operator can share; the
query is :class:`oncebox.surfaces.records.Query`, the one the API and the CLI use. Every
value is shown as a listing cuts it (a content's first bytes, with its length and
SHA-256, all of it a link away), so a page stays small however large the records are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from oncebox.domain import Record, TimelineEntry
from oncebox.engine.box import Oncebox
from oncebox.engine.finding import ORDERS, Lookup, Order, RecordView, digest_of
from oncebox.engine.reads import SEARCH_BYTES, search_term
from oncebox.engine.sessions import Session
from oncebox.engine.views import LISTED
from oncebox.errors import InvalidOperation
from oncebox.surfaces import records
from oncebox.surfaces.http.console import asking
from oncebox.surfaces.http.console.html import BASE, content_text, render
from oncebox.surfaces.http.console.pages import LogLine, line
from oncebox.surfaces.views import iso

PAGE = 50
SHOWN = 400  # characters of a content shown in the table


@dataclass(frozen=True)
class Asked:
    """The filters as the form sent them (shown back), the one inbox and the query they
    make, and what could not be read."""

    fields: dict[str, str]
    inbox: str | None
    query: records.Query
    problems: list[str]


def asked(params: Mapping[str, str], covered: list[str]) -> Asked:
    names = ("inbox", "key", "identity", "search", "since", "until", "order", "after")
    fields = asking.fields_of(params, names)
    problems = []
    try:
        search_term(fields["search"])
    except InvalidOperation as exc:
        problems.append(f"search: {exc}")
    for name in ("key", "identity"):
        try:
            if fields[name]:
                digest_of(fields[name], name)
        except InvalidOperation as exc:
            problems.append(f"{name}: {exc}")
    times = asking.times_of(fields, problems)
    after = asking.after_of(fields)
    order = fields["order"] if fields["order"] in ORDERS else Order.NEWEST.value
    inbox = fields["inbox"] if fields["inbox"] in covered else (covered[0] if covered else None)
    fields["inbox"], fields["order"] = inbox or "", order
    query = records.Query(
        fields["key"] or None, fields["identity"] or None, times["since"], times["until"],
        fields["search"] or None, after, order,
    )  # fmt: skip
    return Asked(fields, inbox, query, problems)


def _link(fields: dict[str, str], **changed: str) -> str:
    kept = {k: v for k, v in {**fields, **changed}.items() if v}
    return f"{BASE}/records" + (f"?{urlencode(kept)}" if kept else "")


@dataclass(frozen=True)
class Row:
    """A record as its row shows it: its content's first characters and size."""

    record: Record
    content: str
    size: str
    href: str


def _row(record: Record) -> Row:
    cut = "content" in record.cut
    text = content_text(record.content, cut)
    more = "…" if len(text) > SHOWN or cut else ""
    size = f"{record.content_length:,}" if record.content_length is not None else "-"
    return Row(record, text[:SHOWN] + more, size, f"{BASE}/records/{record.id}")


@dataclass(frozen=True)
class Listing:
    said: str  # what the page holds, in words
    rows: list[Row]
    paging: list[tuple[str | None, str, str]]  # href (None: a note), text, class
    lookup: Lookup | None  # with a key: everything kept under it


def _listing(box: Oncebox, ask: Asked) -> Listing:
    assert ask.inbox is not None
    q = ask.query
    found = box.records(
        ask.inbox, key=q.key, identity=q.identity, since=q.since, until=q.until,
        search=q.search, after=q.after, order=q.order, limit=PAGE + 1, preview=LISTED,
    )  # fmt: skip
    more, found = len(found) > PAGE, found[:PAGE]
    paging: list[tuple[str | None, str, str]] = []
    if q.after:
        paging.append((_link(ask.fields, after=""), "First page", ""))
    if more:
        paging.append((_link(ask.fields, after=str(found[-1].id)), "Next page", ""))
    said = (
        f"{len(found)} record{'s' if len(found) != 1 else ''} of {ask.inbox}, "
        f"{q.order} first"
        + (f", first seen since {iso(q.since)}" if q.since is not None else "")
        + (f", before {iso(q.until)}" if q.until is not None else "")
    )
    lookup = box.lookup(ask.inbox, q.key) if q.key else None
    return Listing(said, [_row(r) for r in found], paging, lookup)


def page(box: Oncebox, who: Session, covered: list[str], ask: Asked) -> str:
    listing = None if ask.problems or ask.inbox is None else _listing(box, ask)
    return render(
        "records.html",
        who,
        "Records",
        asked=ask.fields,
        covered=covered,
        orders=ORDERS,
        search_bytes=SEARCH_BYTES,
        problems=ask.problems,
        listing=listing,
        times={"since": ask.query.since, "until": ask.query.until},
    )


# -- one record ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """A timeline entry as the page tells it, with where to see more."""

    entry: TimelineEntry
    quarantine: str | None  # the newcomer's anchor on this page
    log: str | None  # the log entry's anchor on this page


def _steps(timeline: list[TimelineEntry], logged: set[int]) -> list[Step]:
    return [
        Step(
            t,
            f"#q-{t.quarantine_id}" if t.quarantine_id is not None else None,
            f"#log-{t.log_position}" if t.log_position in logged else None,
        )
        for t in timeline
    ]


def record_page(who: Session, view: RecordView, **more: object) -> str:
    """A record's page; ``more`` goes to ``record_more.html``, where other parts show
    what they keep about the record (its forwards: :func:`.forwarding.on_record`)."""
    record = view.record
    content = record.content
    cut = content is not None and len(content) > LISTED.content
    text = content_text(content[: LISTED.content] if content is not None else None, cut)
    lines: list[LogLine] = [line(entry) for entry in view.log]
    return render(
        "record.html",
        who,
        f"Record {record.id}",
        view=view,
        record=record,
        key_link=_link({"inbox": view.inbox}, key=record.key) if record.key else None,
        content=text + ("…" if cut else ""),
        cut=cut,
        whole=f"{BASE}/records/{record.id}/content",
        proof=f"{BASE}/records/{record.id}/proof" if record.log_seq is not None else None,
        api_proof=records.proof_of(record),
        steps=_steps(view.timeline, {entry.seq for entry in view.log}),
        log=lines,
        **more,
    )
