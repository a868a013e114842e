"""The triage page: a triage inbox's headcount ledger, the way an intake desk acts on it.

Totals per site and need beside what counting every arrival would have given (seed 003:
a retransmitted session counted twice is 46, not 23), the priority ranking, and each as
a CSV download. One engine call (``triage``); no rule lives here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.views import triage_table

RANKED = 200  # ranking rows shown on the page; the CSV has them all


def _figure(label: str, value: object, cls: str = "") -> str:
    return f'<div class="count {cls}"><span>{h.e(label)}</span><b>{h.e(value)}</b></div>'


def _cells(values: list[Any], codes: int) -> list[str]:
    """Cells of values; the first ``codes`` (site, need) as codes."""
    return [h.code(v) if i < codes else h.e(v) for i, v in enumerate(values)]


def _suppressed(n: int) -> str:
    return f"<b>{h.e(n)}</b>" if n else '<span class="muted">0</span>'


def page(inbox: str, ledger: dict[str, Any]) -> str:
    """The ledger of ``inbox`` (``ledger`` is what ``Oncebox.triage`` gave)."""
    csv = f"{BASE}/triage/{quote(inbox)}.csv"
    figures = (
        _figure("headcount", ledger["headcount"], "v-accepted")
        + _figure("counting every arrival", ledger["every_arrival_headcount"], "v-duplicate")
        + _figure("duplicates suppressed", ledger["suppressed_headcount"], "v-conflict")
        + _figure("cases", ledger["cases"])
    )
    _, totals = triage_table(ledger, "totals")
    head = ["site", "need", "headcount", "cases", "counting every arrival", "arrivals"]
    total_rows = [[*_cells(row[:6], 2), _suppressed(row[6])] for row in totals]
    totals_html = (
        h.table([*head, "suppressed"], total_rows, "totals")
        if total_rows
        else '<p class="empty">Nothing counted yet.</p>'
    )
    _, ranking = triage_table(ledger, "ranking")
    rank_rows = [[*_cells(row[:2], 0), *_cells(row[2:], 2)] for row in ranking[:RANKED]]
    more = (
        f'<p class="muted">The first {RANKED} of {len(ranking)}; the CSV has them all.</p>'
        if len(ranking) > RANKED
        else ""
    )
    ranking_html = (
        h.table(["rank", "pri", "site", "need", "headcount", "record"], rank_rows, "ranking")
        if rank_rows
        else '<p class="empty">No records ranked yet.</p>'
    )
    return (
        f'<section class="card" id="ledger"><div class="counts">{figures}</div>'
        '<p class="muted">Each record counts once, however often it arrived; beside it, what '
        "counting every arrival (retransmissions too) would have given.</p></section>"
        f'<section class="card" id="totals"><h2>Per site and need</h2>{totals_html}'
        f'<p><a class="download" href="{csv}">Download per site and need (CSV)</a></p></section>'
        f'<section class="card" id="ranking"><h2>Priority ranking</h2>{ranking_html}{more}'
        f'<p><a class="download" href="{csv}?table=ranking">Download the ranking (CSV)</a></p>'
        "</section>"
    )


def choose(inboxes: list[str]) -> str:
    """The page for more than one triage inbox: which one."""
    if not inboxes:
        return '<p class="empty">None of your inboxes keeps a triage ledger.</p>'
    links = "".join(f"<li>{h.link(f'{BASE}/triage/{quote(n)}', n)}</li>" for n in inboxes)
    return f'<section class="card"><p>Triage inboxes:</p><ul>{links}</ul></section>'
