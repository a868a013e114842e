"""The write budget (DESIGN.md): what one delivery costs the SQLite store, counted.

WAL pages, fsyncs, statements and commits per single accepted delivery, per duplicate
and per batch of 1,000, through the APSW VFS of bench/walcount.py (bench/budget.py
prints the same figures). The bounds are half of what the two-transaction core wrote
before this one (14.6, 17.0 and 17.5 pages for a keyed, json-event and H1 delivery) and
one transaction with one flush for everything a delivery decides.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Appended, not put first: bench/http.py would shadow the standard library's http
# for every module this worker imports after this one (http.server, http.client).
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))
import budget

# Half of the pages the two-transaction core wrote per single accepted delivery.
HALF_OF_BEFORE = {"keyed": 14.6 / 2, "json-event": 17.0 / 2, "ussd-h1": 17.5 / 2}


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, float]]]:
    where = tmp_path_factory.mktemp("budget")
    return {codec: budget.measure(codec, 1000, 60, where) for codec in budget.CODECS}


@pytest.mark.parametrize("codec", list(budget.CODECS))
def test_a_single_delivery_is_one_transaction_one_flush_and_half_the_pages(
    figures: dict[str, dict[str, dict[str, float]]], codec: str
) -> None:
    accepted = figures[codec]["single accepted"]
    assert accepted["transactions"] == 1.0
    # One flush each; a WAL checkpoint now and then adds its own.
    assert accepted["syncs"] <= 1.1
    assert accepted["pages"] <= HALF_OF_BEFORE[codec]
    # BEGIN, the record read with the id a new one takes, the seal's reads (lease, queue,
    # head: one statement), the log entry, the record, the verdict counter, COMMIT, and
    # the apply step's statements (one for json-event's work key, two for H1's ledger);
    # a Merkle node every 16 entries. 11.1 to 13.1 before the seal's reads were merged
    # and its tree's right edge kept between appends.
    assert accepted["statements"] <= {"keyed": 7.2, "json-event": 8.2, "ussd-h1": 9.2}[codec]


@pytest.mark.parametrize("codec", list(budget.CODECS))
def test_a_duplicate_touches_its_record_and_a_counter_only(
    figures: dict[str, dict[str, dict[str, float]]], codec: str
) -> None:
    duplicate = figures[codec]["single duplicate"]
    # Counts need no flush (issue 24): only a WAL checkpoint now and then syncs.
    assert duplicate["transactions"] == 1.0 and duplicate["syncs"] <= 0.05
    assert duplicate["pages"] <= 2.0
    assert duplicate["statements"] <= 6


@pytest.mark.parametrize("codec", list(budget.CODECS))
def test_a_batch_of_1000_is_one_transaction_with_a_few_statements_a_delivery(
    figures: dict[str, dict[str, dict[str, float]]], codec: str
) -> None:
    new, again = figures[codec]["batch of 1,000 new"], figures[codec]["batch of 1,000 duplicates"]
    assert new["transactions"] == again["transactions"] == 1.0
    # The record, the apply step's row and the duplicate count run per row; everything
    # else once per batch.
    assert new["statements"] <= 3 * 1000 + 200
    assert again["statements"] <= 1000 + 10
