"""An inbox's counts never go down (issue 19, item 9): duplicates and late replays are
counted on the record they repeat, and dropping a tombstone at its horizon must not take
them with it."""

from __future__ import annotations

from conftest import BoxFactory
from oncebox import InboxSpec, ManualClock
from oncebox.formats.ussd_h1 import make_frame

DAY = 86_400.0
SPEC = InboxSpec("ussd", codec="ussd-h1", retention="30d", tombstones="90d")
COUNTS = ("duplicates", "late_replays", "max_lateness_seconds")


def frame(seq: int) -> bytes:
    return make_frame(seq, "Kakuma1", "MED", seq, 86).encode()


def test_counts_survive_their_tombstones(make_box: BoxFactory, clock: ManualClock) -> None:
    box = make_box([SPEC])
    seen: list[dict[str, float]] = []

    def check() -> None:
        stats = box.stats("ussd")
        now = {name: stats[name] for name in COUNTS}
        if seen:
            assert all(now[name] >= seen[-1][name] for name in COUNTS), (seen[-1], now)
        seen.append(now)

    for seq in range(1, 6):
        for _ in range(seq):  # frame seq arrives seq + 1 times: seq duplicates
            box.ingest("ussd", frame(seq), key=f"r-{seq}")
    check()
    clock.advance(31 * DAY)
    box.evict("ussd")  # records become tombstones; their counts stay on them
    check()
    for seq in (1, 2, 3):
        clock.advance(DAY)
        late = box.ingest("ussd", frame(seq), key=f"r-{seq}")
        assert late.late_replay
    check()
    lateness = box.stats("ussd")["max_lateness_seconds"]
    assert lateness > 31 * DAY
    clock.advance(90 * DAY)
    [evicted] = box.evict("ussd")
    assert evicted.tombstones == 5  # every tombstone dropped: no record left to count on
    check()
    stats = box.stats("ussd")
    assert (stats["records"], stats["tombstones"]) == (0, 0)
    assert stats["duplicates"] == 1 + 2 + 3 + 4 + 5 - 5
    assert stats["late_replays"] == 3
    assert stats["max_lateness_seconds"] == lateness
    # What comes after the drop adds to what was carried.
    box.ingest("ussd", frame(9), key="r-9")
    box.ingest("ussd", frame(9), key="r-9")
    assert box.stats("ussd")["duplicates"] == stats["duplicates"] + 1
