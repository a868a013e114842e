"""The triage page: a triage inbox's headcount ledger, the way an intake desk acts on it.

Totals per site and need beside what counting every arrival would have given (a
retransmitted session counted twice is 46, not 23: docs/concepts.md#triage-ledger), the
priority ranking, and each as a CSV download. One engine call (``triage``); no rule lives here.
"""

from __future__ import annotations

from typing import Any

from oncebox.engine.sessions import Session
from oncebox.surfaces.http.console.html import render
from oncebox.surfaces.views import triage_table

RANKED = 200  # ranking rows shown on the page; the CSV has them all


def page(who: Session, inbox: str, ledger: dict[str, Any]) -> str:
    """The ledger of ``inbox`` (``ledger`` is what ``Oncebox.triage`` gave)."""
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
    )
