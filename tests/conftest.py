"""Shared fixtures: every behavioural test runs against each store backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import oncebox
from oncebox import InboxSpec, ManualClock, Oncebox

INBOXES = (
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    InboxSpec("listing", codec="json-event", apply="generation"),
    InboxSpec("feed", codec="feed"),
)
SESSION = [
    ("rec1", "H1|1|Kakuma1|MED|3|86|#89"),
    ("rec2", "H1|2|Kakuma2|SHE|8|71|#09"),
    ("rec3", "H1|3|Kakuma1|WAT|12|69|#1a"),
]

BoxFactory = Callable[..., Oncebox]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture(params=["sqlite-memory", "sqlite-file"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite-memory":
        return "sqlite:///:memory:"
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def make_box(store_url: str, clock: ManualClock) -> Iterator[BoxFactory]:
    """Open the parameterized store (again, for a reopen) with the given inboxes."""
    opened: list[Oncebox] = []

    def make(inboxes: Sequence[InboxSpec] = INBOXES) -> Oncebox:
        box = oncebox.open(store_url, inboxes=inboxes, clock=clock)
        opened.append(box)
        return box

    yield make
    for box in opened:
        box.close()


@pytest.fixture
def box(make_box: BoxFactory) -> Oncebox:
    return make_box()
