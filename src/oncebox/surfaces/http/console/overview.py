"""The overview: the inboxes in the order they need an operator (open conflicts, open
dead letters, silence: :mod:`oncebox.engine.attention`), each with its last delivery,
its triage sites' last deliveries, its counts and a chart over a range chosen in the URL
(``?range=7d``). The inboxes' part is also served alone (``/console/overview.part``),
which ``static/live.js`` fetches every ``?every=`` seconds to replace it in place.
No rule lives here: the figures are gathered as plain values for the templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from oncebox.engine.attention import Attention, ordered
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.surfaces.digits import whole
from oncebox.surfaces.http.console.html import ENV, render
from oncebox.surfaces.views import iso

VERDICTS = ("accepted", "duplicate", "conflict", "rejected")
# A range: (hours shown, hours per bar, bars between labels, what a bar is).
RANGES: dict[str, tuple[int, int, int, str]] = {
    "6h": (6, 1, 1, "hour"),
    "24h": (24, 1, 3, "hour"),
    "7d": (168, 6, 4, "6 hours"),
    "30d": (720, 24, 5, "day"),
}
DEFAULT_RANGE = "24h"
EVERY = 15  # seconds between refreshes, unless the URL says (2 to 600)
SITES = 30  # triage sites shown per inbox, the quietest first

# The chart's geometry, in SVG units: one column per bar.
COLUMN, BAR, TALL = 24, 18, 100


@dataclass(frozen=True)
class Bar:
    verdict: str
    x: int
    y: float
    tall: float


@dataclass(frozen=True)
class Column:
    label: str  # the bar's tooltip: its start and its counts
    bars: list[Bar]


@dataclass(frozen=True)
class Chart:
    """Stacked bars on a scale of 0 to the page's peak (the same for every inbox on
    the page), and the starts of some bars labelled below it (UTC as served)."""

    columns: list[Column]
    labels: list[str]
    width: int
    daily: bool  # labels name days, not hours
    span: str  # "24 hours", "7 days"
    unit: str  # what one bar is
    tall: int = TALL
    bar: int = BAR
    verdicts: tuple[str, ...] = VERDICTS


History = list[tuple[int, dict[str, int]]]


def buckets(history: History, size: int) -> History:
    """Hourly counts summed ``size`` hours to a bar, the newest bar ending now."""
    start = len(history) % size
    out: History = []
    for i in range(start, len(history), size):
        summed: dict[str, int] = {}
        for _, counts in history[i : i + size]:
            for verdict, n in counts.items():
                summed[verdict] = summed.get(verdict, 0) + n
        out.append((history[i][0], summed))
    return out


def chart(history: History, peak: int, chosen: str) -> Chart:
    hours, _, every, unit = RANGES[chosen]
    peak = max(peak, 1)
    columns = []
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
        columns.append(Column(label, bars))
    labels = [iso(start) or "" for start, _ in history[::every]]
    span = f"{hours} hours" if hours <= 24 else f"{hours // 24} days"
    return Chart(columns, labels, COLUMN * len(history), unit != "hour", span, unit)


@dataclass(frozen=True)
class Site:
    name: str
    last: float | None
    ago: str


@dataclass(frozen=True)
class InboxFigures:
    name: str
    stats: dict[str, Any]
    history: Chart
    attention: Attention
    ago: str  # since the last delivery, in words
    silent_after: str
    sites: list[Site] | None  # a triage inbox's sites, the quietest first
    more_sites: int


def ago(now: float, then: float | None) -> str:
    """How long ago, in words a glance reads ("5 min ago")."""
    return "never" if then is None else span(now - then) + " ago"


def span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    big, small, unit, rest = (
        (seconds // 3600, seconds % 3600 // 60, "h", "min")
        if seconds < 86400
        else (seconds // 86400, seconds % 86400 // 3600, "d", "h")
    )
    return f"{big} {unit}" + (f" {small} {rest}" if small else "")


def sites(box: Oncebox, name: str, now: float, shown: int = SITES) -> tuple[list[Site] | None, int]:
    """A triage inbox's sites with their last delivery, the quietest first (the first
    ``shown`` of them), and how many more there are; None for another kind of inbox."""
    if box.inbox(name).row.apply != "triage":
        return None, 0
    found = sorted(box.triage_sites(name), key=lambda s: (s[1] or 0.0, s[0]))
    return [Site(site, at, ago(now, at)) for site, at in found[:shown]], max(0, len(found) - shown)


def figures(box: Oncebox, inboxes: list[str], chosen: str) -> tuple[list[InboxFigures], int]:
    """Every inbox's figures, those that need attention first, and the chart's peak."""
    hours, size, _, _ = RANGES[chosen]
    histories = {name: buckets(box.verdict_history(name, hours), size) for name in inboxes}
    peak = max([sum(c.values()) for h in histories.values() for _, c in h] + [1])
    shown = []
    for watched in ordered(box.attention(name) for name in inboxes):
        name, now = watched.inbox, watched.now
        found, more = sites(box, name, now)
        shown.append(
            InboxFigures(
                name,
                box.stats(name),
                chart(histories[name], peak, chosen),
                watched,
                ago(now, watched.last_delivery),
                span(watched.silent_after),
                found,
                more,
            )
        )
    return shown, peak


@dataclass(frozen=True)
class Asked:
    range: str
    every: int
    problem: str | None = None
    inbox: str = ""  # one inbox asked for (?inbox=), kept by the refreshes

    @property
    def query(self) -> str:
        kept = {"range": self.range, "every": self.every}
        return urlencode({**kept, "inbox": self.inbox} if self.inbox else kept)


def asked(params: Any) -> Asked:
    """The chart's range and the refresh period from the URL; an unknown range is said
    with the known ones (and the default shown)."""
    chosen = params.get("range", DEFAULT_RANGE)
    every = whole(params.get("every", ""), 5)
    seconds = EVERY if every is None else min(600, max(2, every))
    inbox = params.get("inbox", "")[:200]
    if chosen not in RANGES:
        known = ", ".join(RANGES)
        problem = f"unknown range {chosen[:40]!r}; known: {known}"
        return Asked(DEFAULT_RANGE, seconds, problem, inbox)
    return Asked(chosen, seconds, None, inbox)


def _values(box: Oncebox, inboxes: list[str], ask: Asked) -> dict[str, Any]:
    shown, peak = figures(box, inboxes, ask.range)
    now = shown[0].attention.now if shown else None
    return {"inboxes": shown, "peak": peak, "ask": ask, "now": now, "VERDICTS": VERDICTS}


def page(box: Oncebox, who: Session, inboxes: list[str], ask: Asked) -> str:
    values = _values(box, inboxes, ask)
    banner = ask.problem
    return render(
        "overview.html", who, "Overview", ranges=list(RANGES), banner=banner,
        banner_kind="bad", **values,
    )  # fmt: skip


def part(box: Oncebox, inboxes: list[str], ask: Asked) -> str:
    """The inboxes' part alone, as the page has it (for ``static/live.js``)."""
    return ENV.get_template("overview_live.html").render(**_values(box, inboxes, ask))
