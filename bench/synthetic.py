"""Synthetic deliveries shared by the benchmarks, so every script measures the same input."""

from __future__ import annotations

import json
import time

import oncebox
from oncebox.formats.ussd_h1 import make_frame

WORK_KEYS = 3_000
MARKETPLACES = ("A1PA6795UKMFR9", "A13V1IB3VIYZZH", "APJ6JRA9NG5V4")
STATUSES = ("BUYABLE", "DISCOVERABLE", "INACTIVE")
TYPES = ("listing_status_changed", "listing_issues_changed")
NEEDS = ("MED", "FOO", "WAT", "SHL", "NFI")
SITES = 60
FRAMES_PER_RECORD = 4
EPOCH = 1_772_280_000  # 2026-02-28


def json_body(i: int) -> bytes:
    """A small listing event: distinct notification_id, one of WORK_KEYS work keys."""
    k = (i * 2_654_435_761) % WORK_KEYS
    event = {
        "schema_version": 1,
        "source": "sp-api",
        "subscription": "sub-eu-1",
        "notification_id": f"n-{i:010d}",
        "seller_id": f"SELLER{k % 97:02d}",
        "sku": f"SKU-{k:05d}",
        "marketplace_id": MARKETPLACES[k % len(MARKETPLACES)],
        "notification_type": TYPES[i % 2],
        "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + i % 86_400)),
        "payload": {"status": STATUSES[i % 3], "issues": [] if i % 5 else [{"code": "E18"}],
                    "price": i % 1_000},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def frame_delivery(i: int) -> oncebox.Delivery:
    """An H1 frame with the distinct frame id ``rec<N>-<seq>``."""
    record, seq = divmod(i, FRAMES_PER_RECORD)
    seq += 1
    text = make_frame(seq, f"K{(i * 7) % SITES:02d}", NEEDS[i % len(NEEDS)], 1 + i % 40, i % 100)
    return oncebox.Delivery(body=text.encode(), key=f"rec{record}-{seq}")
