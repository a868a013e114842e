"""ingest_each: one failing apply step costs its own delivery only (the one place this
rule lives; the HTTP group commit and the Redis consumer call it)."""

from __future__ import annotations

from typing import Any

from conftest import BoxFactory
from oncebox import ApplyError, Delivery, InboxSpec
from oncebox.engine.step import Change
from oncebox.formats.ussd_h1 import make_frame


def refuse_site_bad(tx: Any, change: Change) -> None:
    """A user's own step that fails on one site."""
    if change.fields["site"] == "BAD":
        raise ValueError("this site is not served")


def test_the_others_are_decided_and_the_failing_one_gets_its_error(make_box: BoxFactory) -> None:
    box = make_box((InboxSpec("ussd", codec="ussd-h1", apply=refuse_site_bad),))
    sites = ["K1", "K2", "BAD", "K3", "BAD", "K4"]
    deliveries = [
        Delivery(make_frame(i + 1, site, "MED", 2, 50).encode(), key=f"r-{i + 1}")
        for i, site in enumerate(sites)
    ]
    outcomes = box.ingest_each("ussd", deliveries)
    assert [type(o).__name__ for o in outcomes] == [
        "Decision", "Decision", "ApplyError", "Decision", "ApplyError", "Decision"
    ]  # fmt: skip
    assert all(
        str(o.verdict) == "accepted" and o.may_ack
        for o in outcomes
        if not isinstance(o, ApplyError)
    )
    stored = box.stats("ussd")["records"]
    assert stored == 4
    for i, site in enumerate(sites):
        assert (box.record("ussd", f"r-{i + 1}") is None) == (site == "BAD")
    # Again: the four are duplicates now, the two still fail, nothing is stored twice.
    again = box.ingest_each("ussd", deliveries)
    verdicts = [str(o.verdict) if not isinstance(o, ApplyError) else "error" for o in again]
    assert verdicts == ["duplicate", "duplicate", "error", "duplicate", "error", "duplicate"]
    assert box.stats("ussd")["records"] == 4 and box.verify().ok
