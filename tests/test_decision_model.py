"""The decision path against an independent model: plain dicts and lists, no store.

The model knows the rules as DESIGN.md states them (first write wins; the same content
again is a duplicate, other content under the same identity a conflict kept once per
newcomer; invalid input is a dead letter that leaves no dedup state; each accepted record
applies its headcount once and is sealed once) and nothing of how the engine batches,
reads or writes. Streams of USSD frames, split into batches at random, must give the
model's verdicts, ledger and log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

import oncebox
from oncebox import Delivery, InboxSpec
from oncebox.formats.ussd_h1 import make_frame

SITES = ("K1", "K2")
NEEDS = ("MED", "WAT")


@dataclass
class Model:
    records: dict[str, bytes] = field(default_factory=dict)  # key -> frame
    kept: dict[tuple[str, bytes], int] = field(default_factory=dict)  # newcomer -> times
    headcount: dict[tuple[str, str], int] = field(default_factory=dict)
    cases: dict[tuple[str, str], int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    letters: int = 0

    def decide(self, key: str, frame: bytes, valid: bool) -> tuple[str, bool]:
        """(verdict, first quarantine) for one delivery, updating the model."""
        if not valid:
            self.letters += 1
            return "rejected", False
        stored = self.records.get(key)
        if stored is None:
            self.records[key] = frame
            _, _, site, need, headcount, _, _ = frame.decode().split("|")
            self.headcount[(site, need)] = self.headcount.get((site, need), 0) + int(headcount)
            self.cases[(site, need)] = self.cases.get((site, need), 0) + 1
            self.log.append("accept")
            return "accepted", False
        if stored == frame:
            return "duplicate", False
        first = (key, frame) not in self.kept
        self.kept[(key, frame)] = self.kept.get((key, frame), 0) + 1
        if first:
            self.log.append("quarantine")
        return "conflict", first


# A delivery: (frame id number, variant of its content). Few of each, so duplicates and
# conflicts come often; a third of the positions may carry a broken trailer instead.
deliveries = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2)), min_size=1, max_size=40)
invalid_mask = st.lists(st.booleans(), min_size=40, max_size=40)
cuts = st.lists(st.integers(1, 8), min_size=1, max_size=40)


def _frame(n: int, variant: int) -> bytes:
    site, need = SITES[(n + variant) % 2], NEEDS[n % 2]
    return make_frame(n, site, need, n + 3 * variant, 50).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries, invalid_mask, cuts)
def test_batches_decide_as_the_model_does(
    stream: list[tuple[int, int]], invalid: list[bool], sizes: list[int]
) -> None:
    model = Model()
    inboxes = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    with oncebox.open("sqlite:///:memory:", inboxes=inboxes) as box:
        items = []
        for i, (n, variant) in enumerate(stream):
            frame = _frame(n, variant)
            bad = invalid[i] and i % 3 == 0
            body = frame[:-2] + b"zz" if bad else frame  # a broken trailer
            items.append((f"rec-{n}", body, not bad))
        got: list[tuple[str, bool]] = []
        start, cut = 0, 0
        while start < len(items):
            size = sizes[cut % len(sizes)]
            cut += 1
            batch = items[start : start + size]
            start += size
            decisions = box.ingest_batch(
                "ussd", [Delivery(body, key=key) for key, body, _ in batch]
            )
            got += [(str(d.verdict), d.first_quarantine) for d in decisions]
            assert all(d.may_ack for d in decisions)
        want = [model.decide(key, body, valid) for key, body, valid in items]
        assert got == want
        triage = box.triage("ussd")
        totals = {(t["site"], t["need"]): (t["headcount"], t["cases"]) for t in triage["totals"]}
        assert totals == {k: (model.headcount[k], model.cases[k]) for k in model.headcount}
        assert [e.step for e in box.log_entries()] == model.log
        open_rows = box.quarantined("ussd", status=None)
        assert {(r.identity, r.content): r.seen_count for r in open_rows} == model.kept
        assert len(box.dead_letters("ussd")) == model.letters
        assert box.verify().ok
