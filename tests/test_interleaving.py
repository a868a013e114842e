"""Property: any interleaving of repeats and reorders decides each identity once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from conftest import INBOXES
from helpers import frame
from oncebox.formats.ussd_h1 import make_frame

IDENTITIES = [f"rec{i}" for i in range(8)]


def text_for(index: int, variant: int) -> str:
    return make_frame(index, "Site", "MED", index + 1 + 10 * variant, 50 + index)


arrivals = st.lists(
    st.tuples(st.integers(0, len(IDENTITIES) - 1), st.integers(0, 2)), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, len(IDENTITIES) - 1), min_size=1, max_size=40),
    batch=st.integers(1, 10),
)
def test_repeats_and_reorders_give_one_record_per_identity(arrivals: list[int], batch: int) -> None:
    with oncebox.open("sqlite:///:memory:", inboxes=INBOXES) as box:
        stream = [frame(IDENTITIES[i], text_for(i, 0)) for i in arrivals]
        for start in range(0, len(stream), batch):
            box.ingest_batch("ussd", stream[start : start + batch])
        distinct = set(arrivals)
        assert box.stats("ussd")["records"] == len(distinct)
        assert box.triage("ussd")["headcount"] == sum(i + 1 for i in distinct)
        assert box.stats("ussd")["duplicates"] == len(arrivals) - len(distinct)


@settings(max_examples=60, deadline=None)
@given(arrivals=arrivals, batch=st.integers(1, 10))
def test_conflicts_never_change_the_first_record(
    arrivals: list[tuple[int, int]], batch: int
) -> None:
    first: dict[int, int] = {}
    newcomers: set[tuple[int, int]] = set()
    for index, variant in arrivals:
        first.setdefault(index, variant)
        if first[index] != variant:
            newcomers.add((index, variant))
    with oncebox.open("sqlite:///:memory:", inboxes=INBOXES) as box:
        stream = [frame(IDENTITIES[i], text_for(i, v)) for i, v in arrivals]
        for start in range(0, len(stream), batch):
            box.ingest_batch("ussd", stream[start : start + batch])
        expected = sum(i + 1 + 10 * v for i, v in first.items())
        assert box.triage("ussd")["headcount"] == expected
        assert box.stats("ussd")["records"] == len(first)
        assert len(box.quarantined("ussd")) == len(newcomers)
