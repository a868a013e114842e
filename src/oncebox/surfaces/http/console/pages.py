"""The console's work keys and log pages: each one or two engine calls, its
figures gathered as plain values and rendered by its template (no rule lives here).
The overview, triage, quarantine and dead letters have modules of their own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from oncebox.domain import LogEntry, WorkItem
from oncebox.engine.box import Oncebox
from oncebox.engine.journal import LOG_STEPS, LogFilter
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import LISTED
from oncebox.errors import UnknownValue
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.console.html import BASE, render

WORK_ROWS = 500  # keys shown in review, and dirty, per inbox
LOG_PAGE = 50  # log entries a page shows
Fact = tuple[str, Any, str]  # label, value, how it is shown: "text", "code", "name", "when"


# -- work keys --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkKeys:
    """One inbox's work keys: in review (which its operators may retry), and dirty."""

    name: str
    summary: str
    may_retry: bool
    review: list[WorkItem] = field(default_factory=list)
    dirty: list[WorkItem] = field(default_factory=list)


def work(box: Oncebox, who: Session, inboxes: list[str], banner: str | None = None) -> str:
    sections = []
    for name in inboxes:
        figures = box.work_figures(name)
        if not figures["keys"] and box.inbox(name).row.apply != "generation":
            continue
        review = box.reconciler(name).review(WORK_ROWS, LISTED)
        dirty = box.work_keys(name, limit=WORK_ROWS, dirty=True, preview=LISTED)
        summary = " · ".join(f"{k.replace('_', ' ')} {v}" for k, v in figures.items())
        may_retry = who.token.allows(Scope.OPERATOR, name)
        unreviewed = [r for r in dirty if not r.in_review]
        sections.append(WorkKeys(name, summary, may_retry, review, unreviewed))
    return render("work.html", who, "Work keys", inboxes=sections, banner=banner)


# -- the log ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogLine:
    """An entry as the log page lists it: who acted (resolve, retry, replay) and its
    state as shortened ``name=value`` pairs, or as text when it is not a JSON object."""

    seq: int
    step: str
    actor: Any
    pairs: list[tuple[str, str]] | None
    text: str
    hash: str


def line(entry: LogEntry) -> LogLine:
    try:
        state = json.loads(entry.state)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        return LogLine(entry.seq, entry.step, None, None, entry.state[:240], entry.hash[:16])
    actor = state.pop("actor", None)
    pairs = [(k, _short(v)) for k, v in state.items() if v is not None]
    return LogLine(entry.seq, entry.step, actor, pairs, "", entry.hash[:16])


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 64 else text[:61] + "…"


@dataclass(frozen=True)
class Verified:
    ok: bool
    facts: list[Fact]


LOG_FILTERS = ("step", "actor", "inbox")


@dataclass(frozen=True)
class LogAsked:
    """The log page's filters as sent (shown back) and its cursor (``before`` or
    ``after``, a seq; neither: the newest page)."""

    fields: dict[str, str]
    before: int | None = None
    after: int | None = None

    def link(self, **cursor: int) -> str:
        kept = {k: v for k, v in self.fields.items() if v}
        kept.update({k: str(v) for k, v in cursor.items()})
        return f"{BASE}/log" + (f"?{urlencode(kept)}" if kept else "")


def log_asked(params: Mapping[str, str]) -> LogAsked:
    fields = {name: params.get(name, "").strip()[:200] for name in LOG_FILTERS}

    def seq(name: str) -> int | None:
        return whole(params.get(name, ""))

    return LogAsked(fields, seq("before"), seq("after"))


@dataclass(frozen=True)
class LogListing:
    lines: list[LogLine]
    said: str
    paging: list[tuple[str | None, str, str]]


def _listing(box: Oncebox, ask: LogAsked) -> LogListing:
    f = ask.fields
    wanted = LogFilter(f["step"] or None, f["actor"] or None, f["inbox"] or None)
    found = box.log_page(wanted, LOG_PAGE, before=ask.before, after=ask.after)
    paging: list[tuple[str | None, str, str]] = []
    if found.newer is not None:
        paging.append((ask.link(), "Newest", ""))
        paging.append((ask.link(after=found.newer), "Newer", ""))
    if found.older is not None:
        paging.append((ask.link(before=found.older), "Older", ""))
    said = f"{len(found.entries)} entr{'ies' if len(found.entries) != 1 else 'y'}, newest first"
    if found.read is not None and any(f.values()):
        said += f"; matching among entries {found.read[0]} to {found.read[1]} of {found.size}"
    elif found.entries:
        said += f": {found.entries[-1].seq} to {found.entries[0].seq} of {found.size}"
    return LogListing([line(x) for x in found.entries], said, paging)


def log(
    box: Oncebox,
    who: Session,
    private_key: bytes | None,
    verified: Verified | None = None,
    ask: LogAsked | None = None,
) -> tuple[str, int]:
    """The page, and its status: 400 when a filter names an unknown step."""
    ask = ask if ask is not None else LogAsked(dict.fromkeys(LOG_FILTERS, ""))
    point = box.checkpoint(private_key)
    facts: list[Fact] = [
        ("origin", point.origin, "code"),
        ("tree size", point.tree_size, "text"),
        ("root", point.root, "code"),
        ("log head", point.log_head, "code"),
        ("signed", f"yes, key {point.key_id}" if point.signature else "no (no key)", "text"),
        ("waiting to be sealed", box.seal_lag(), "text"),
    ]
    listing, problem = None, None
    if "*" in who.token.inboxes:
        try:
            listing = _listing(box, ask)
        except UnknownValue as exc:
            problem = str(exc)
    shown = render(
        "log.html", who, "Log", checkpoint=facts, verified=verified, listing=listing,
        problem=problem, asked=ask.fields, steps=LOG_STEPS,
        inboxes=[a.name for a in box.inboxes],
    )  # fmt: skip
    return shown, 400 if problem else 200


def verification(result: dict[str, Any]) -> Verified:
    """What ``verify`` found, said in words: no Python values, no empty labels."""
    broken = result.get("broken_at")
    uncovered = result.get("uncovered_records") or []
    checkpoint = result.get("checkpoint_ok")
    chain = (
        "intact"
        if broken is None
        else f"broken at entry {broken}: {result.get('broken_why') or 'no reason given'}"
    )
    queued = result.get("queued_records") or []
    covered = (
        "every one"
        if not uncovered
        else f"{len(uncovered)} not covered: " + ", ".join(map(str, uncovered[:20]))
    )
    if queued:
        covered += f"; {len(queued)} with a seal queued, on its way"
    facts: list[Fact] = [
        ("entries replayed", result.get("entries", 0), "text"),
        ("chain head", result.get("head"), "code"),
        ("Merkle root", result.get("root"), "code"),
        ("chain", chain, "text"),
        ("records covered", covered, "text"),
    ]
    if checkpoint is not None:
        why = result.get("checkpoint_why") or ""
        facts.append(("checkpoint", "matches" if checkpoint else f"does not match: {why}", "text"))
    return Verified(bool(result.get("ok")), facts)
