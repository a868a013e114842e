"""Probes of the ingest rules issue 19 found broken by independent models (items 8-10).

Each probe runs through the library on a fresh SQLite file and prints one line:

- **fence first**: deliveries to the lease-fenced ``feed`` inbox, invalid (empty, or
  over the bound) and valid, sent with no token, a stale token, a forged one and an
  expired lease: how many stored anything (a record or a dead letter) or were ackable.
- **counts never fall**: records with duplicates and late replays, then every
  tombstone dropped at its horizon: the inbox's duplicate, late-replay and lateness
  figures before and after the drop.
- **unstorable text**: batches of ten, each with one delivery whose key or a fact holds a
  lone surrogate or a NUL: how many batches raised instead of deciding, and how many of
  the other deliveries were decided.

Run it against another checkout's code (the negative control) with
``PYTHONPATH=/path/to/checkout/src``:

    .venv/bin/python reliability/ingest_probes.py
    PYTHONPATH=/tmp/before/src .venv/bin/python reliability/ingest_probes.py
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.formats.ussd_h1 import make_frame

DAY = 86_400.0
INBOXES = [
    InboxSpec("ussd", codec="ussd-h1", apply="triage", retention="30d", tombstones="90d"),
    InboxSpec("feed", codec="feed"),
]


def fresh(clock: ManualClock) -> oncebox.Oncebox:
    folder = Path(tempfile.mkdtemp(prefix="oncebox-probe-"))
    return oncebox.open(f"sqlite:///{folder / 'probe.db'}", inboxes=INBOXES, clock=clock)


def fence_first(rounds: int = 100) -> None:
    clock = ManualClock()
    box = fresh(clock)
    sent = stored = ackable = 0
    bodies = [b"", b"x" * (1_048_576 + 1), b"row"]
    for n in range(rounds):
        scope = f"S{n}"
        old = box.lease("feed", scope, 60).token
        current = box.lease("feed", scope, 60).token
        for body, token in itertools.product(bodies, [None, old, current + 10**6]):
            decision = box.ingest("feed", Delivery(body + str(n).encode() if body == b"row"
                                                   else body, snapshot_id=scope,
                                                   lease_token=token))  # fmt: skip
            sent += 1
            ackable += decision.may_ack
        clock.advance(61)
        for body in bodies:
            decision = box.ingest("feed", Delivery(body, snapshot_id=scope, lease_token=current))
            sent += 1
            ackable += decision.may_ack
    stats = box.stats("feed")
    stored = stats["records"] + stats["dead_letters"]
    print(
        f"fence first: {sent} deliveries without the current lease "
        f"(no, stale, forged token; expired lease): stored {stored} "
        f"({stats['dead_letters']} dead letters), ackable {ackable}"
    )
    box.close()


def counts_never_fall(records: int = 1000) -> None:
    clock = ManualClock()
    box = fresh(clock)
    for seq in range(1, records + 1):
        frame = make_frame(seq, "Kakuma1", "MED", 1, 1).encode()
        for _ in range(1 + seq % 3):
            box.ingest("ussd", Delivery(frame, key=f"r-{seq}"))
    clock.advance(31 * DAY)
    box.evict("ussd")
    for seq in range(1, records + 1, 2):
        clock.advance(1)
        frame = make_frame(seq, "Kakuma1", "MED", 1, 1).encode()
        box.ingest("ussd", Delivery(frame, key=f"r-{seq}"))
    names = ("duplicates", "late_replays", "max_lateness_seconds")
    before = {name: box.stats("ussd")[name] for name in names}
    clock.advance(91 * DAY)
    [evicted] = box.evict("ussd")
    after = {name: box.stats("ussd")[name] for name in names}
    print(
        f"counts never fall: {records} records, {evicted.tombstones} tombstones dropped; "
        f"before the drop {before}, after {after}"
    )
    box.close()


def unstorable_text(batches: int = 200) -> None:
    box = fresh(ManualClock())
    raised = decided = 0
    odd = [{"key": "bad\udfff"}, {"key": "bad\x00"}, {"key": "ok", "device_time": "t\udc80"},
           {"key": "ok", "delivery_id": "d\x00"}]  # fmt: skip
    for n in range(batches):
        batch = [
            Delivery(make_frame(i, "K", "MED", 1, 1).encode(), key=f"b{n}-{i}")
            for i in range(1, 10)
        ]
        facts = odd[n % len(odd)]
        key = facts["key"] if facts["key"] != "ok" else f"b{n}-10"
        batch.insert(n % 10, Delivery(make_frame(10, "K", "MED", 1, 1).encode(), **{
            **facts, "key": key}))  # fmt: skip
        try:
            decisions = box.ingest_batch("ussd", batch)
        except Exception:
            raised += 1
            continue
        decided += sum(1 for i, _ in enumerate(decisions) if i != n % 10)
    print(
        f"unstorable text: {batches} batches of 10 with one unstorable key or fact: "
        f"raised {raised}, other deliveries decided {decided} of {batches * 9}"
    )
    box.close()


if __name__ == "__main__":
    fence_first()
    counts_never_fall()
    unstorable_text()
