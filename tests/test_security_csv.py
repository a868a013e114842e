"""Issue 19, item 4: no value in the triage CSV opens a formula in a spreadsheet.

Sites and needs come from senders. The CSV writer quoted a value whose first character
was ``=``, ``+``, ``-``, ``@``, a tab or a carriage return with a leading ``'``, but a
spreadsheet skips a leading line feed, space or other blank before it reads a formula,
and reads a full-width ``=`` (U+FF1D) as ``=``: ``"\\n=HYPERLINK(...)"``, ``" =1+1"``,
``"\\x1c@SUM(A1)"``, ``"\\x85-2+3"`` and ``"\\uff1d1+1"`` went out as they came. Every value
whose first character that is not blank (after NFKC folding) opens a formula now gets
the leading ``'``.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import BoxFactory
from oncebox import InboxSpec
from oncebox.surfaces.views import csv_text, triage_table

# Full-width (U+FF1D, U+FF0B, U+FF0D, U+FF20) and small (U+FE66, U+FE62, U+FE63, U+FE6B) forms.
FULL_WIDTH = ["\uff1d", "\uff0b", "\uff0d", "\uff20"]
OPENERS = ["=", "+", "-", "@", *FULL_WIDTH, "\ufe66", "\ufe62", "\ufe63", "\ufe6b"]
BLANKS = ["", "\n", " ", "\x1c", "\x1d", "\x1e", "\x1f", "\x0b", "\x0c", "\x85", "\u2028",
          "\u2029", "\xa0", "\u3000", "\u200b", "\ufeff", " \n\x1c\x85 "]  # fmt: skip
FORMULA = 'HYPERLINK("http://evil.example","x")'
SESSIONS = InboxSpec(
    "sessions",
    codec="json",
    apply="triage",
    settings={
        "identity": ["/session"],
        "fields": {"site": "/site", "need": "/need", "headcount": "/count", "pri": "/pri"},
    },
)


def cells(value: str) -> list[str]:
    """The cells a spreadsheet reads back for a one-row CSV holding ``value``."""
    [_, row] = list(csv.reader(io.StringIO(csv_text(["v", "n"], [[value, 1]]))))
    return row


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("blank", BLANKS)
def test_a_formula_after_blanks_or_in_full_width_is_neutralised(blank: str, opener: str) -> None:
    value = f"{blank}{opener}{FORMULA}"
    assert cells(value) == ["'" + value, "1"]


@pytest.mark.parametrize("first", ["\t", "\r", "\t1", "\r\n2"])
def test_a_leading_tab_or_carriage_return_is_neutralised(first: str) -> None:
    assert cells(first) == ["'" + first, "1"]


@pytest.mark.parametrize("value", ["K1", "café", "a=b", "1-2", " K1", "\nK1", "", "'=x"])
def test_other_values_are_left_as_they_are(value: str) -> None:
    assert cells(value) == [value, "1"]


def test_numbers_are_numbers() -> None:
    [_, row] = list(csv.reader(io.StringIO(csv_text(["a", "b"], [[-3, 2.5]]))))
    assert row == ["-3", "2.5"]


@given(st.text(max_size=12))
def test_no_cell_opens_a_formula(value: str) -> None:
    [cell, _] = cells(value)
    if cell.startswith("'"):
        return
    folded = "".join(
        c for c in unicodedata.normalize("NFKC", cell) if not (c.isspace() or not c.isprintable())
    )
    assert folded[:1] not in ("=", "+", "-", "@") and cell[:1] not in ("\t", "\r"), repr(cell)


def test_the_triage_download_of_a_sender_chosen_site(make_box: BoxFactory) -> None:
    """A site with blanks around it never reaches the ledger (triage's field rule refuses
    it at decode, issue 19 item 1); one that opens a formula, plainly or in full width,
    does, and goes out neutralised."""
    box = make_box([SESSIONS])
    blanks = ("\n", " ", "\x1c", "\x85")
    padded = [f"{blank}{opener}{FORMULA}" for blank in blanks for opener in ("=", *FULL_WIDTH)]
    for n, site in enumerate(padded):
        frame = {"session": f"b{n}", "site": site, "need": "@MED", "count": 1, "pri": 50}
        refused = box.ingest("sessions", json.dumps(frame).encode())
        assert (str(refused.verdict), refused.reason) == ("rejected", "bad_field")
    sites = [f"{opener}{FORMULA}" for opener in OPENERS]
    for n, site in enumerate(sites):
        frame = {"session": f"s{n}", "site": site, "need": "@MED", "count": 1, "pri": 50}
        assert str(box.ingest("sessions", json.dumps(frame).encode()).verdict) == "accepted"
    for table in ("totals", "ranking"):
        rows = list(csv.reader(io.StringIO(csv_text(*triage_table(box.triage("sessions"), table)))))
        head, body = rows[0], rows[1:]
        shown = {row[head.index("site")] for row in body}
        assert shown == {"'" + site for site in sites}, table
        assert {row[head.index("need")] for row in body} == {"'@MED"}
