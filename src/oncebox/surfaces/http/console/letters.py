"""The dead letters page: filtered by inbox, reason, time and content, a page at a
time, each downloadable as an ``oncebox ingest`` line and replayable after a fix.

The filters are a plain GET form, so a filtered page is a link an operator can share;
the query is :class:`oncebox.surfaces.letters.Query`, the same the API and the CLI use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from oncebox.domain import DeadLetter, LetterStatus
from oncebox.engine.box import Oncebox
from oncebox.engine.reads import SEARCH_BYTES, search_term
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.errors import InvalidOperation, UnknownValue
from oncebox.surfaces import letters
from oncebox.surfaces.http.console import asking
from oncebox.surfaces.http.console.html import BASE, ENV, content_text, render
from oncebox.surfaces.views import iso

PAGE = 50
HEAD_SHOWN = 600  # characters of a kept head shown in the table
FILTERS = ("inbox", "reason", "status", "since", "until", "search", "order", "after")
BULK = ("replay", "archive")
ORDERS = ("newest", "oldest")  # newest first by default


@dataclass(frozen=True)
class Asked:
    """The filters as the form sent them (shown back), the query they make, the inboxes
    chosen, and what could not be read."""

    fields: dict[str, str]
    query: letters.Query
    inboxes: list[str]
    problems: list[str]
    times: dict[str, float | None] = field(default_factory=dict)  # since, until as read


def asked(params: Mapping[str, str], covered: list[str]) -> Asked:
    fields = asking.fields_of(params, FILTERS)
    problems = []
    try:
        search_term(fields["search"])
    except InvalidOperation as exc:
        problems.append(f"search: {exc}")
    times = asking.times_of(fields, problems)
    if fields["order"] and fields["order"] not in ORDERS:
        problems.append(f"unknown order {fields['order'][:40]!r}; known: {', '.join(ORDERS)}")
    after = asking.after_of(fields)
    inboxes = [fields["inbox"]] if fields["inbox"] in covered else covered
    query = letters.Query(
        fields["reason"] or None,
        times["since"],
        times["until"],
        fields["search"] or None,
        after,
        fields["status"] or None,
        fields["order"] != "oldest",
    )
    return Asked(fields, query, inboxes, problems, times)


def filtered(fields: Mapping[str, str], **changed: str) -> str:
    """The dead letters page with these filters (a form's hidden copy of them), so that
    what an operator did leads back to what they were looking at."""
    kept = {k: fields.get(k, "")[:1024] for k in FILTERS if k != "after"}
    return _link(kept, **changed)


def _link(fields: dict[str, str], **changed: str) -> str:
    kept = {k: v for k, v in {**fields, **changed}.items() if v}
    return f"{BASE}/dead-letters" + (f"?{urlencode(kept)}" if kept else "")


@dataclass(frozen=True)
class Row:
    """A dead letter as its row shows it: its size, its head's first characters (and
    where all of it is, when the listing cut it), and whether it can be replayed here."""

    inbox: str
    letter: DeadLetter
    size: str
    head: str
    whole: str | None
    cannot: str | None  # why it cannot be replayed at all
    may_replay: bool
    fenced: bool  # its inbox is lease-fenced: a replay takes a lease token
    editable: str = ""  # its head as text to correct, when all of it is shown


def _row(inbox: str, letter: DeadLetter, who: Session, fenced: bool) -> Row:
    text = content_text(letter.head, "head" in letter.cut)
    cut = "…" if len(text) > HEAD_SHOWN or "head" in letter.cut else ""
    whole = f"{BASE}/dead-letters/{letter.id}/head" if "head" in letter.cut else None
    may = who.token.allows(Scope.OPERATOR, inbox)
    why = letters.unreplayable(letter)
    editable = text if not cut and why is None else ""
    shown = text[:HEAD_SHOWN] + cut
    return Row(inbox, letter, _size(letter), shown, whole, why, may, fenced, editable)


def _size(letter: DeadLetter) -> str:
    kept = letter.kept if letter.kept is not None else len(letter.head)
    if letter.length == kept:
        return f"{letter.length:,}"
    return f"{letter.length:,} (kept {kept:,})"


@dataclass(frozen=True)
class Listing:
    said: str  # what the page holds, in words
    rows: list[Row]
    paging: list[tuple[str | None, str, str]]  # href (None: a note), text, class


def _listing(box: Oncebox, who: Session, ask: Asked) -> Listing:
    found = letters.page(box, ask.inboxes, ask.query, PAGE + 1)
    more, found = len(found) > PAGE, found[:PAGE]
    fenced = {n: box.inbox(n).row.fenced for n in ask.inboxes}
    rows = [_row(name, letter, who, fenced[name]) for name, letter in found]
    paging: list[tuple[str | None, str, str]] = []
    if ask.query.after:
        paging.append((_link(ask.fields, after=""), "First page", ""))
    if more:
        paging.append((_link(ask.fields, after=str(found[-1][1].id)), "Next page", ""))
    if len(ask.inboxes) == 1:
        lines = {**ask.fields, "inbox": ask.inboxes[0], "after": ""}
        query = urlencode({k: v for k, v in lines.items() if v})
        download = "Download NDJSON (oncebox ingest lines)"
        paging.append((f"{BASE}/dead-letters.ndjson?{query}", download, "download"))
    else:
        paging.append((None, "Choose one inbox to download its lines.", "muted"))
    first = "newest first" if ask.query.newest else "oldest first"
    other = "oldest" if ask.query.newest else "newest"
    paging.insert(0, (_link(ask.fields, order=other, after=""), f"{other.capitalize()} first", ""))
    said = (
        f"{len(found)} dead letter{'s' if len(found) != 1 else ''}, {first}"
        + (f", ids {found[0][1].id} to {found[-1][1].id}" if found else "")
        + (f", received since {iso(ask.query.since)}" if ask.query.since else "")
    )
    return Listing(said, rows, paging)


@dataclass(frozen=True)
class Counts:
    """The chosen inboxes' dead letters: totals by status, and by reason (each a link
    to the page filtered by it), the most open first."""

    total: int
    by_status: list[tuple[str, int, str]]  # status, how many, link
    by_reason: list[tuple[str, int, int, str]]  # reason, open, all, link


def counts(box: Oncebox, ask: Asked) -> Counts:
    statuses: dict[str, int] = {s.value: 0 for s in LetterStatus}
    reasons: dict[str, list[int]] = {}
    for name in ask.inboxes:
        for (status, reason), n in box.dead_letter_counts(name).items():
            statuses[status] = statuses.get(status, 0) + n
            seen = reasons.setdefault(reason, [0, 0])
            seen[0] += n if status == "open" else 0
            seen[1] += n
    by_reason = [
        (reason, opened, every, filtered(ask.fields, reason=reason))
        for reason, (opened, every) in sorted(reasons.items(), key=lambda r: (-r[1][0], r[0]))
    ]
    by_status = [(st, n, filtered(ask.fields, status=st)) for st, n in statuses.items()]
    return Counts(sum(statuses.values()), by_status, by_reason)


def counts_part(box: Oncebox, ask: Asked) -> str:
    """The counts alone, as the page has them (for ``static/live.js``)."""
    return ENV.get_template("letter_counts.html").render(
        counts=counts(box, ask), asked=ask.fields, asked_query=_query(ask)
    )


def _query(ask: Asked) -> str:
    return urlencode({k: v for k, v in ask.fields.items() if v and k != "after"})


@dataclass(frozen=True)
class Preview:
    """What a bulk action with the page's filters would act on, before it runs."""

    action: str
    inbox: str
    count: int
    ids: list[int]


def _preview(box: Oncebox, who: Session, ask: Asked, action: str) -> Preview | None:
    if action not in BULK or len(ask.inboxes) != 1:
        return None
    if not who.token.allows(Scope.OPERATOR, ask.inboxes[0]):
        return None
    chosen = letters.checked(box, ask.inboxes, replace(ask.query, after=0))
    count, first = box.letters_matching(ask.inboxes, chosen)
    return Preview(action, ask.inboxes[0], count, [row.id for _, row in first])


def page(
    box: Oncebox,
    who: Session,
    covered: list[str],
    ask: Asked,
    banner: str | None = None,
    kind: str = "ok",
    bulk: str = "",
) -> str:
    reasons = sorted(
        {k.split(":", 1)[1] for n in ask.inboxes for k in box.stats(n)["reasons"] if ":" in k}
    )
    problems, listing, preview = list(ask.problems), None, None
    if not problems:
        try:  # an unknown reason or status is said, with the known ones, never a blank page
            listing = _listing(box, who, ask)
            preview = _preview(box, who, ask, bulk)
        except UnknownValue as exc:
            problems.append(str(exc))
    return render(
        "dead_letters.html",
        who,
        "Dead letters",
        banner=banner,
        asked=ask.fields,
        covered=covered,
        reasons=reasons,
        search_bytes=SEARCH_BYTES,
        problems=problems,
        listing=listing,
        preview=preview,
        banner_kind=kind,
        asked_query=_query(ask),
        counts=counts(box, ask),
        times=ask.times,
        statuses=[s.value for s in LetterStatus],
        operator=any(who.token.allows(Scope.OPERATOR, n) for n in ask.inboxes),
    )
