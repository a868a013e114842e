"""``oncebox demo``: the founding scenarios replayed on a fresh store with a fixed clock.

The output is deterministic: the same JSON on every machine and every run.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import oncebox
from oncebox.engine.clock import ManualClock
from oncebox.engine.inboxes import InboxSpec
from oncebox.formats import Delivery
from oncebox.formats.ussd_h1 import make_frame

START = 1_793_600_000.0  # 2026-11-02T08:53:20Z, a fixed server clock
SESSION = [
    ("rec1", "H1|1|Kakuma1|MED|3|86|#89"),
    ("rec2", "H1|2|Kakuma2|SHE|8|71|#09"),
    ("rec3", "H1|3|Kakuma1|WAT|12|69|#1a"),
]
INBOXES = [
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    InboxSpec("ussd_partial", codec="ussd-h1", apply="triage"),
    InboxSpec("listing", codec="json-event", apply="generation"),
]


def _event(
    notification_id: str,
    *,
    sku: str = "SKU-1",
    marketplace: str = "ATVPDKIKX0DER",
    event_time: str = "2026-11-01T10:00:00Z",
    status: str = "ACTIVE",
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "source": "listings-feed",
        "subscription": "sub-main",
        "notification_id": notification_id,
        "seller_id": "SELLER-A",
        "sku": sku,
        "marketplace_id": marketplace,
        "notification_type": "listing_status_changed",
        "event_time": event_time,
        "payload": {"status": status, "issues": []},
    }


def _ussd(box: oncebox.Oncebox, clock: ManualClock) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    without_dedup = 0

    def send(step: str, inbox: str, frame_id: str, frame: str) -> None:
        nonlocal without_dedup
        clock.advance(60)
        decision = box.ingest(inbox, Delivery(frame.encode(), key=frame_id))
        steps.append(
            {
                "step": step,
                "frame_id": frame_id,
                "verdict": str(decision.verdict),
                "reason": decision.reason,
                "may_ack": decision.may_ack,
            }
        )
        if inbox == "ussd" and decision.verdict in ("accepted", "duplicate"):
            without_dedup += int(frame.split("|")[4])

    for frame_id, frame in SESSION:
        send("first session", "ussd", frame_id, frame)
    for frame_id, frame in SESSION:
        send("full retransmit after a session drop", "ussd", frame_id, frame)
    send("partial session: only frame 2 arrived", "ussd_partial", *SESSION[1])
    for frame_id, frame in SESSION:
        send("partial session: full retransmit", "ussd_partial", frame_id, frame)
    send(
        "same frame id, different headcount", "ussd", "rec1", make_frame(1, "Kakuma1", "MED", 9, 86)
    )
    send("corrupted trailer", "ussd", "rec9", SESSION[0][1][:-2] + "00")
    send("truncated frame", "ussd", "rec9", "H1|9|Kakuma1|MED|3")
    triage = box.triage("ussd")
    stats = box.stats("ussd")
    return {
        "verdicts": steps,
        "headcount": triage["headcount"],
        "headcount_without_dedup": without_dedup,
        "partial_session_headcount": box.triage("ussd_partial")["headcount"],
        "ranking": [f"{r['need']} {r['headcount']} (pri {r['pri']})" for r in triage["ranking"]],
        "records": stats["records"],
        "duplicates": stats["duplicates"],
        "quarantine_open": stats["quarantine_open"],
        "dead_letters": stats["dead_letters"],
        "rec9_has_dedup_state": box.record("ussd", "rec9") is not None,
    }


def _listing(path: Path, clock: ManualClock) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    primary_generations: list[int] = []

    def send(box: oncebox.Oncebox, step: str, body: str) -> None:
        clock.advance(60)
        decision = box.ingest("listing", body)
        steps.append(
            {
                "step": step,
                "verdict": str(decision.verdict),
                "reason": decision.reason,
                "may_ack": decision.may_ack,
            }
        )
        keys = {
            (k.seller_id, k.sku, k.marketplace_id): k.generation for k in box.work_keys("listing")
        }
        primary_generations.append(keys.get(("SELLER-A", "SKU-1", "ATVPDKIKX0DER"), 0))

    first = _event("n-1")
    box = oncebox.open(f"sqlite:///{path}", inboxes=INBOXES, clock=clock)
    send(box, "first delivery", json.dumps(first))
    box.close()  # the process restarts; the queue redelivers what it never saw acked
    box = oncebox.open(f"sqlite:///{path}", inboxes=INBOXES, clock=clock)
    send(box, "redelivery after restart", json.dumps(first))
    send(
        box,
        "redelivery, members reordered",
        json.dumps(dict(reversed(list(first.items()))), indent=1),
    )
    send(
        box,
        "an older event for the same key",
        json.dumps(_event("n-2", event_time="2026-11-01T09:00:00Z", status="INACTIVE")),
    )
    send(
        box,
        "a newer event for the same key",
        json.dumps(_event("n-3", event_time="2026-11-01T11:00:00Z")),
    )
    send(box, "same identity, different payload", json.dumps(_event("n-1", status="SUPPRESSED")))
    send(box, "another marketplace", json.dumps(_event("n-4", marketplace="A1F83G8C2ARO7P")))
    send(box, "another sku", json.dumps(_event("n-5", sku="SKU-2")))
    send(box, "schema_version true", json.dumps({**_event("n-6"), "schema_version": True}))
    stats = box.stats("listing")
    keys = [
        {
            "seller_id": k.seller_id,
            "sku": k.sku,
            "marketplace_id": k.marketplace_id,
            "generation": k.generation,
            "dirty": k.generation > k.applied_generation,
        }
        for k in box.work_keys("listing")
    ]
    box.close()
    return {
        "verdicts": steps,
        "records": stats["records"],
        "duplicates": stats["duplicates"],
        "quarantine_open": stats["quarantine_open"],
        "dead_letters": stats["dead_letters"],
        "primary_key_generations": primary_generations,
        "work_keys": keys,
    }


def run_demo() -> dict[str, Any]:
    clock = ManualClock(START)
    with tempfile.TemporaryDirectory(prefix="oncebox-demo-") as folder:
        path = Path(folder) / "demo.db"
        with oncebox.open(f"sqlite:///{path}", inboxes=INBOXES, clock=clock) as box:
            ussd = _ussd(box, clock)
        listing = _listing(path, clock)
    return {"ussd": ussd, "listing": listing}


def summary(result: dict[str, Any]) -> str:
    """The demo's result as a few lines a person reads."""
    ussd, listing = result["ussd"], result["listing"]
    lines = ["USSD session (seed 003)"]
    for step in ussd["verdicts"]:
        reason = f" ({step['reason']})" if step["reason"] else ""
        lines.append(f"  {step['step']:<40} {step['frame_id']:<5} {step['verdict']}{reason}")
    lines += [
        f"  headcount {ussd['headcount']} (without dedup it would be "
        f"{ussd['headcount_without_dedup']}); partial session headcount "
        f"{ussd['partial_session_headcount']}",
        f"  ranking: {', '.join(ussd['ranking'])}",
        f"  quarantine open {ussd['quarantine_open']}, dead letters {ussd['dead_letters']}",
        "",
        "Listing notifications (seed 002)",
    ]
    for step, generation in zip(
        listing["verdicts"], listing["primary_key_generations"], strict=True
    ):
        reason = f" ({step['reason']})" if step["reason"] else ""
        lines.append(
            f"  {step['step']:<40} {step['verdict']}{reason}  [primary key generation {generation}]"
        )
    lines.append(
        f"  records {listing['records']}, quarantine open {listing['quarantine_open']}, "
        f"dead letters {listing['dead_letters']}, work keys "
        f"{len(listing['work_keys'])}"
    )
    return "\n".join(lines)
