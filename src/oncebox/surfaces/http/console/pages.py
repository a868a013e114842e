"""The console's overview, work keys and log pages: each one or two engine calls, its
figures gathered as plain values and rendered by its template (no rule lives here).
Triage, quarantine and dead letters have modules of their own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oncebox.domain import LogEntry, WorkItem
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import LISTED
from oncebox.surfaces.http.console.html import render
from oncebox.surfaces.views import iso

HOURS = 24
WORK_ROWS = 500  # keys shown in review, and dirty, per inbox
VERDICTS = ("accepted", "duplicate", "conflict", "rejected")
History = list[tuple[int, dict[str, int]]]
Fact = tuple[str, Any, str]  # label, value, how it is shown: "text", "code", "name", "when"

# The chart's geometry, in SVG units: one column per hour.
COLUMN, BAR, TALL, EVERY = 24, 18, 100, 3


@dataclass(frozen=True)
class Bar:
    verdict: str
    x: int
    y: float
    tall: float


@dataclass(frozen=True)
class Hour:
    label: str  # the hour's tooltip: its start and its counts
    bars: list[Bar]


@dataclass(frozen=True)
class Chart:
    """Stacked bars per hour on a scale of 0 to the page's peak (the same for every
    inbox on the page), and the hours labelled below it (every third, in UTC)."""

    hours: list[Hour]
    labels: list[str]
    width: int
    tall: int = TALL
    bar: int = BAR
    verdicts: tuple[str, ...] = VERDICTS


def chart(history: History, peak: int) -> Chart:
    peak = max(peak, 1)
    hours = []
    for i, (start, counts) in enumerate(history):
        label = f"{iso(start)}: " + (
            ", ".join(f"{v} {counts[v]}" for v in VERDICTS if counts.get(v)) or "nothing"
        )
        bars, y = [], float(TALL)
        for verdict in VERDICTS:
            n = counts.get(verdict, 0)
            if n:
                tall = max(1.0, n * TALL / peak)
                y -= tall
                bars.append(Bar(verdict, i * COLUMN + 3, y, tall))
        hours.append(Hour(label, bars))
    labels = [iso(start) or "" for start, _ in history[::EVERY]]
    return Chart(hours, labels, COLUMN * len(history))


@dataclass(frozen=True)
class InboxFigures:
    name: str
    stats: dict[str, Any]
    history: Chart


def overview(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    histories = {name: box.verdict_history(name, HOURS) for name in inboxes}
    peak = max(
        [sum(counts.values()) for history in histories.values() for _, counts in history] + [1]
    )
    shown = [InboxFigures(n, box.stats(n), chart(histories[n], peak)) for n in inboxes]
    return render("overview.html", who, "Overview", inboxes=shown, peak=peak, VERDICTS=VERDICTS)


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


def log(
    box: Oncebox, who: Session, private_key: bytes | None, verified: Verified | None = None
) -> str:
    point = box.checkpoint(private_key)
    facts: list[Fact] = [
        ("origin", point.origin, "code"),
        ("tree size", point.tree_size, "text"),
        ("root", point.root, "code"),
        ("log head", point.log_head, "code"),
        ("signed", f"yes, key {point.key_id}" if point.signature else "no (no key)", "text"),
        ("waiting to be sealed", box.seal_lag(), "text"),
    ]
    entries = None
    if "*" in who.token.inboxes:
        start = max(1, point.tree_size - 24)
        entries = [line(x) for x in reversed(box.log_entries(start, 25))]
    return render("log.html", who, "Log", checkpoint=facts, verified=verified, entries=entries)


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
    covered = (
        "every one"
        if not uncovered
        else f"{len(uncovered)} not covered: " + ", ".join(map(str, uncovered[:20]))
    )
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
