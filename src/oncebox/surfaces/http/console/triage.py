"""The triage page: a triage inbox's headcount ledger, the way an intake desk acts on it.

Totals per site and need beside what counting every arrival would have given (a
retransmitted session counted twice is 46, not 23: docs/concepts.md#triage-ledger), the
priority ranking, each as a CSV download, and every site with its last delivery, the
quietest first (the overview shows only the first few). No rule lives here.
"""

from __future__ import annotations

from typing import Any

from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.surfaces.http.console.html import render
from oncebox.surfaces.http.console.overview import Site, sites
from oncebox.surfaces.views import triage_table

RANKED = 200  # ranking rows shown on the page; the CSV has them all
SITES = 500  # sites shown with their last delivery


def read(box: Oncebox, inbox: str) -> tuple[dict[str, Any], list[Site], int]:
    """What the page shows: the ledger, the sites (the quietest first) and how many more."""
    ledger = box.triage(inbox)
    found, more = sites(box, inbox, box.attention(inbox).now, SITES)
    return ledger, found or [], more


def page(who: Session, inbox: str, ledger: dict[str, Any], found: list[Site], more: int) -> str:
    """The ledger of ``inbox`` (``ledger`` is what ``Oncebox.triage`` gave) and its sites."""
    figures = [
        ("headcount", ledger["headcount"], "v-accepted"),
        ("counting every arrival", ledger["every_arrival_headcount"], "v-duplicate"),
        ("duplicates suppressed", ledger["suppressed_headcount"], "v-conflict"),
        ("cases", ledger["cases"], ""),
    ]
    _, totals = triage_table(ledger, "totals")
    _, ranking = triage_table(ledger, "ranking")
    return render(
        "triage.html",
        who,
        f"Triage · {inbox}",
        inbox=inbox,
        figures=figures,
        totals=totals,
        ranking=ranking,
        shown=RANKED,
        sites=found,
        more_sites=more,
    )
