"""The Forwarding pages: each destination of the session's inboxes with its state and
backlog; a destination's forwards filtered by status and time; one forward with every
attempt; and, on a record's page, the record's forwards.

What the pages show is gathered here as plain values (the engine's standings, forwards
and attempts, see :mod:`oncebox.engine.forwarding`); the routes and the forms that pause,
resume and send again are :mod:`.outbound`. The filters are a plain GET form, so a
filtered page is a link to share, and every form carries them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from oncebox.domain.forwarding import Attempt, Forward, ForwardFilter, ForwardStatus
from oncebox.engine.box import Oncebox
from oncebox.engine.forwarding import Standing
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.errors import NotFound
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.console import asking
from oncebox.surfaces.http.console.html import BASE, content_text, render
from oncebox.surfaces.views import iso

PAGE = 50
FILTERS = ("status", "since", "until", "after")
STATUSES = tuple(s.value for s in ForwardStatus)
RETRIABLE = (ForwardStatus.DEAD.value, ForwardStatus.FAILED.value)
COUNT_MOST = 10_000  # forwards a bulk retry's preview counts, at most
ON_RECORD = 20  # a record's forwards shown on its page, at most
ANSWER_SHOWN = 160  # characters of a last answer shown on a record's page


def home(name: str) -> str:
    return f"{BASE}/forwarding/{quote(name, safe='')}/deliveries"


def _age(seconds: float) -> str:
    """A wait in words: ``42s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def may_act(who: Session, inbox: str) -> bool:
    """Whether the session may pause, resume and send again on the inbox's
    destinations (an operator token covering it; a read-only session may not)."""
    return who.token.allows(Scope.OPERATOR, inbox)


def standing(box: Oncebox, who: Session, name: str) -> Standing | None:
    """The destination if its inbox is one the session covers (None otherwise, as for an
    absent one: another inbox's destinations are not the session's business)."""
    try:
        [found] = box.forwarding(name)
    except NotFound:
        return None
    return found if who.token.covers(found.destination.inbox) else None


# -- the Forwarding page ------------------------------------------------------------------------
@dataclass(frozen=True)
class DestinationRow:
    """A destination as its row shows it."""

    standing: Standing
    href: str
    oldest: str  # the oldest pending forward's wait, in words ("-": none waits)
    rate: str  # delivered among the last day's attempts
    outcomes: list[tuple[str, int]]  # every attempt ever made, by outcome
    may_act: bool


def _destination_row(box: Oncebox, who: Session, found: Standing) -> DestinationRow:
    rate = found.success_rate
    dest = found.destination
    return DestinationRow(
        found,
        home(dest.name),
        _age(found.oldest_seconds) if found.backlog else "-",
        f"{rate:.0%}" if rate is not None else "-",
        sorted(box.attempt_counts(dest.name).items()),
        may_act(who, dest.inbox),
    )


def overview(box: Oncebox, who: Session, covered: list[str], banner: str | None = None) -> str:
    rows = [
        _destination_row(box, who, s) for s in box.forwarding() if s.destination.inbox in covered
    ]
    return render("forwarding.html", who, "Forwarding", rows=rows, banner=banner)


def overview_banner(box: Oncebox, who: Session, params: Mapping[str, str]) -> str | None:
    """What the pause or resume before did, read back from the store."""
    for action in ("paused", "resumed"):
        name = params.get(action, "")
        found = standing(box, who, name) if name else None
        if found is None:
            continue
        state = found.state
        if state.paused_at is not None:
            return f"{name} is paused (by {state.paused_by or '-'} at {iso(state.paused_at)})."
        return f"{name} is sending again: {found.backlog} forward(s) waiting."
    return None


# -- a destination's deliveries ------------------------------------------------------------------
@dataclass(frozen=True)
class Asked:
    """The filters as the form sent them (shown back), the filter they make (None when
    one could not be read), and what could not be read."""

    fields: dict[str, str]
    chosen: ForwardFilter | None
    after: int
    problems: list[str]


def asked(destination: str, params: Mapping[str, str]) -> Asked:
    fields = asking.fields_of(params, FILTERS)
    problems = []
    if fields["status"] and fields["status"] not in STATUSES:
        problems.append(f"status: {fields['status'][:64]!r} is none of {', '.join(STATUSES)}")
    times = asking.times_of(fields, problems)
    after = asking.after_of(fields)
    if problems:
        return Asked(fields, None, after, problems)
    status = ForwardStatus(fields["status"]) if fields["status"] else None
    return Asked(fields, ForwardFilter(destination, status, times["since"], times["until"]),
                 after, [])  # fmt: skip


def filtered(destination: str, fields: Mapping[str, str], **changed: str) -> str:
    """The deliveries page with these filters (``after`` dropped unless changed)."""
    kept = {k: fields.get(k, "")[:1024] for k in FILTERS if k != "after"}
    shown = {k: v for k, v in {**kept, **changed}.items() if v}
    return home(destination) + (f"?{urlencode(shown)}" if shown else "")


@dataclass(frozen=True)
class Preview:
    """How many forwards a bulk retry with the page's filters would send again."""

    count: int
    more: bool  # there are more than :data:`COUNT_MOST`
    ids: list[int]  # the first few


def count(box: Oncebox, chosen: ForwardFilter) -> Preview:
    """The forwards ``chosen`` selects, counted a page at a time up to :data:`COUNT_MOST`
    (each a small row: no content is read)."""
    total, after, first = 0, 0, list[int]()
    while total < COUNT_MOST:
        rows = box.forwards(chosen, after, 1000)
        if not rows:
            break
        first = first or [r.id for r in rows[:10]]
        total, after = total + len(rows), rows[-1].id
        if len(rows) < 1000:
            return Preview(total, False, first)
    return Preview(total, total >= COUNT_MOST, first)


def deliveries(
    box: Oncebox,
    who: Session,
    found: Standing,
    ask: Asked,
    banner: str | None = None,
    bulk: bool = False,
) -> str:
    name = found.destination.name
    rows: list[Forward] = []
    paging: list[tuple[str | None, str, str]] = []
    preview = None
    status = ask.fields["status"]
    acts = may_act(who, found.destination.inbox)
    if ask.chosen is not None:
        rows = box.forwards(ask.chosen, ask.after, PAGE + 1)
        more, rows = len(rows) > PAGE, rows[:PAGE]
        if ask.after:
            paging.append((filtered(name, ask.fields), "First page", ""))
        if more:
            paging.append((filtered(name, ask.fields, after=str(rows[-1].id)), "Next page", ""))
        if bulk and acts and status in RETRIABLE:
            preview = count(box, ask.chosen)
    kept = {k: v for k, v in ask.fields.items() if v and k != "after"}
    return render(
        "forwarding_deliveries.html",
        who,
        f"Forwarding: {name}",
        found=found,
        here=home(name),
        asked=ask.fields,
        times={
            "since": getattr(ask.chosen, "since", None),
            "until": getattr(ask.chosen, "until", None),
        },
        kept=kept,
        problems=ask.problems,
        rows=rows,
        paging=paging,
        statuses=STATUSES,
        retriable=RETRIABLE,
        may_act=acts,
        bulk_link=filtered(name, ask.fields, bulk="retry") if status in RETRIABLE else None,
        preview=preview,
        banner=banner,
    )


def deliveries_banner(box: Oncebox, who: Session, params: Mapping[str, str]) -> str | None:
    """What the retry before did: one forward's state read back from the store, or the
    count a bulk retry answered."""
    one = whole(params.get("retried", ""))
    if one is not None:
        forward = shown_forward(box, who, one)
        if forward is not None:
            f = forward[0]
            return f"Forward #{f.id} sent again: {f.status}, next attempt {iso(f.next_at)}."
    done = params.get("retried_all", "")
    if whole(done) is not None:
        return f"{done} forward(s) sent again, due now on a fresh schedule."
    return None


# -- one forward ----------------------------------------------------------------------------------
def shown_forward(
    box: Oncebox, who: Session, forward_id: int
) -> tuple[Forward, list[Attempt]] | None:
    """The forward and its attempts, if its destination is one the session covers."""
    if not 1 <= forward_id < 2**63:
        return None
    try:
        forward, attempts = box.forward(forward_id)
    except NotFound:
        return None
    if not standing(box, who, forward.destination) or not box.destination_owns(forward):
        return None  # another inbox's, or its destination's first inbox's (moved since)
    return forward, attempts


@dataclass(frozen=True)
class Tried:
    """An attempt as the forward's page shows it: its answer as escaped text."""

    attempt: Attempt
    answer: str


def forward_page(
    box: Oncebox, who: Session, forward: Forward, attempts: list[Attempt], back: str
) -> str:
    found = standing(box, who, forward.destination)
    assert found is not None
    tried = [Tried(a, content_text(a.answer, True) if a.answer else "") for a in attempts]
    return render(
        "forwarding_forward.html",
        who,
        f"Forwarding: forward {forward.id}",
        forward=forward,
        found=found,
        tried=tried,
        may_act=may_act(who, found.destination.inbox) and forward.status.value in RETRIABLE,
        back=back,
        record=f"{BASE}/records/{forward.record_id}",
        destination=home(forward.destination),
    )


# -- on a record's page ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OnRecord:
    """One of a record's forwards as its page shows it."""

    forward: Forward
    href: str
    destination: str
    answer: str  # the last attempt's answer, its first characters


def on_record(box: Oncebox, record_id: int) -> dict[str, object]:
    """What ``record_more.html`` shows: the record's forwards, at most :data:`ON_RECORD`."""
    found = box.forwards_of(record_id)
    shown = []
    for forward, attempts in found[:ON_RECORD]:
        last = attempts[-1].answer if attempts else None
        text = content_text(last, True) if last else ""
        answer = text[:ANSWER_SHOWN] + ("…" if len(text) > ANSWER_SHOWN else "")
        href = f"{BASE}/forwarding/deliveries/{forward.id}"
        shown.append(OnRecord(forward, href, home(forward.destination), answer))
    return {"forwards": shown, "more_forwards": len(found) > ON_RECORD}
