"""``oncebox demo``: the founding scenarios replayed on a fresh store with a fixed clock.

The output is deterministic: the same JSON on every machine and every run.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import oncebox
from oncebox.engine.clock import ManualClock
from oncebox.engine.inboxes import InboxSpec
from oncebox.engine.reconciler import Backoff, Outcome, ReadResult, WorkKey
from oncebox.formats import Delivery
from oncebox.formats.ussd_h1 import make_frame

START = 1_793_600_000.0  # 2026-11-02T08:53:20Z, a fixed server clock
SESSION = [
    ("rec1", "H1|1|Kakuma1|MED|3|86|#89"),
    ("rec2", "H1|2|Kakuma2|SHE|8|71|#09"),
    ("rec3", "H1|3|Kakuma1|WAT|12|69|#1a"),
]
FEED_INBOXES = [InboxSpec("feed", codec="feed")]
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


HARD_EXIT = """
import os, sys
import oncebox
from oncebox import InboxSpec, ManualClock
box = oncebox.open(sys.argv[1], clock=ManualClock(float(sys.argv[3])),
                   inboxes=[InboxSpec("listing", codec="json-event", apply="generation")])
box.ingest("listing", sys.argv[2].encode())
os._exit(0)
"""
PRIMARY = ("SELLER-A", "SKU-1", "ATVPDKIKX0DER")


def _listing(path: Path, clock: ManualClock) -> dict[str, Any]:
    """Seed 002's whole trace: ingest, a hard exit, and a generation-fenced reconciler."""
    url = f"sqlite:///{path}"
    steps: list[dict[str, Any]] = []
    primary_generations: list[int] = []
    first = json.dumps(_event("n-1"))
    # A real process commits the first notification and dies before any ack.
    subprocess.run([sys.executable, "-c", HARD_EXIT, url, first, str(clock.now)], check=True)
    box = oncebox.open(url, inboxes=INBOXES, clock=clock)

    def note(step: str, outcome: str, reason: str | None = None) -> None:
        keys = {k.key: k.generation for k in box.work_keys("listing")}
        steps.append({"step": step, "outcome": outcome, "reason": reason})
        primary_generations.append(keys.get(PRIMARY, 0))

    def send(step: str, body: str) -> None:
        clock.advance(60)
        decision = box.ingest("listing", body)
        note(step, str(decision.verdict), decision.reason)

    def failing(key: WorkKey) -> ReadResult:
        raise TimeoutError("the listing API timed out")

    def wrong_key(key: WorkKey) -> ReadResult:
        return ReadResult((key[0], "SKU-9", key[2]), {"status": "ACTIVE"})

    def good(key: WorkKey) -> ReadResult:
        return ReadResult(
            key, {"status": "ACTIVE", "sku": key.sku, "marketplace_id": key.marketplace_id}
        )

    note("hard exit right after the commit", "committed")
    send("redelivery after restart", first)
    send(
        "an older event for the same key",
        json.dumps(_event("n-2", event_time="2026-11-01T09:00:00Z", status="INACTIVE")),
    )
    # A claim outlasting the read (a notification arrives a minute into it).
    worker = box.reconciler("listing", backoff=Backoff(rng=lambda: 0.0), claim_ttl=300)
    ticket = worker.begin_refresh(PRIMARY)
    assert ticket is not None
    send(
        "a notification arrives during the read",
        json.dumps(_event("n-3", event_time="2026-11-01T11:00:00Z")),
    )
    completion = worker.complete(ticket, ReadResult(PRIMARY, {"status": "INACTIVE"}))
    note(f"the generation-{ticket.generation} completion", str(completion))
    for step, reader in (
        ("a failed read", failing),
        ("a result for the wrong key", wrong_key),
        ("a good read", good),
    ):
        clock.advance(3600)  # past any backoff
        worker.reader = reader
        note(step, str(worker.refresh_once()))
    send("same identity, different payload", json.dumps(_event("n-1", status="SUPPRESSED")))
    send("another marketplace", json.dumps(_event("n-4", marketplace="A1F83G8C2ARO7P")))
    send("another sku", json.dumps(_event("n-5", sku="SKU-2")))
    send("schema_version true", json.dumps({**_event("n-6"), "schema_version": True}))
    worker.reader = good
    while (outcome := worker.refresh_once()) is not Outcome.IDLE:
        note("refresh an independent key", str(outcome))
    stats = box.stats("listing")
    keys = [
        {
            "seller_id": k.seller_id,
            "sku": k.sku,
            "marketplace_id": k.marketplace_id,
            "generation": k.generation,
            "applied_generation": k.applied_generation,
            "dirty": k.dirty,
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
        "clean_keys": sum(not k["dirty"] for k in keys),
    }


def _feed(path: Path) -> dict[str, Any]:
    """Seed 000 in its order. The crash between commit and seal is the real state a
    crash leaves (a process that committed and stopped before sealing); the crash
    before the insert and the lost ack leave nothing to do but retry."""
    clock = ManualClock(1000.0)
    url = f"sqlite:///{path}"
    box = oncebox.open(url, inboxes=FEED_INBOXES, clock=clock)
    steps: list[dict[str, Any]] = []

    def send(
        case: str,
        scope: str,
        token: int,
        payload: str,
        device: float,
        into: oncebox.Oncebox | None = None,
    ) -> None:
        delivery = Delivery(
            payload.encode(), snapshot_id=scope, lease_token=token, device_time=str(device)
        )
        decision = (into or box).ingest("feed", delivery)
        steps.append(
            {
                "case": case,
                "snapshot": scope,
                "payload": payload,
                "verdict": str(decision.verdict),
                "reason": decision.reason,
                "may_ack": decision.may_ack,
            }
        )

    t1 = box.lease("feed", "S1", 60).token
    clock.now = 1180.0
    send("1a expired lease, device clock 120 s behind", "S1", t1, "feed-row-A", 940.0)
    t2 = box.lease("feed", "S2", 60).token
    clock.now = 1200.0
    send("1b valid lease, device clock 300 s ahead", "S2", t2, "feed-row-A", 1500.0)
    t3 = box.lease("feed", "S3", 60).token
    send("1c superseded token", "S3", t2, "feed-row-B", 1200.0)
    with oncebox.open(url, inboxes=FEED_INBOXES, clock=clock, seal=False) as stopped:
        send(
            "2a committed, then the process stopped before sealing",
            "S3",
            t3,
            "feed-row-B",
            1200.0,
            into=stopped,
        )
    recovered = box.recover()
    send("2a retry after recovery", "S3", t3, "feed-row-B", 1200.0)
    send("2b retry after a crash before the insert", "S3", t3, "feed-row-C", 1200.0)
    t4 = box.lease("feed", "S4", 60).token
    send("3 same payload under a new snapshot", "S4", t4, "feed-row-A", 1200.0)
    send("3 new payload under the new snapshot", "S4", t4, "feed-row-D", 1200.0)
    send("2c delivered and sealed, ack lost", "S4", t4, "feed-row-E", 1200.0)
    send("2c retry", "S4", t4, "feed-row-E", 1200.0)
    report = box.verify()
    replay = box.verify()
    rows = box.stats("feed")["records"]
    box.close()
    return {
        "verdicts": steps,
        "recovered": recovered,
        "rows": rows,
        "checkpoints": report.entries,
        "chain_verified": report.ok and replay.head == report.head,
        "head": report.head,
    }


def run_demo() -> dict[str, Any]:
    clock = ManualClock(START)
    with tempfile.TemporaryDirectory(prefix="oncebox-demo-") as folder:
        path = Path(folder) / "demo.db"
        with oncebox.open(f"sqlite:///{path}", inboxes=INBOXES, clock=clock) as box:
            ussd = _ussd(box, clock)
        listing = _listing(path, clock)
        feed = _feed(Path(folder) / "feed.db")
    return {"ussd": ussd, "listing": listing, "feed": feed}


def summary(result: dict[str, Any]) -> str:
    """The demo's result as a few lines a person reads."""
    ussd, listing = result["ussd"], result["listing"]
    lines = ["USSD session (a retransmitted session, a corrupted frame)"]
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
        "Listing notifications (a hard exit, a reconciler fenced by generation)",
    ]
    for step, generation in zip(
        listing["verdicts"], listing["primary_key_generations"], strict=True
    ):
        reason = f" ({step['reason']})" if step["reason"] else ""
        lines.append(
            f"  {step['step']:<40} {step['outcome']}{reason}  [primary key gen {generation}]"
        )
    lines.append(
        f"  records {listing['records']}, quarantine open {listing['quarantine_open']}, "
        f"dead letters {listing['dead_letters']}, clean keys {listing['clean_keys']} of "
        f"{len(listing['work_keys'])}"
    )
    feed = result["feed"]
    lines += ["", "Lease-fenced feed (leases, fencing tokens, the checkpoint log)"]
    for step in feed["verdicts"]:
        reason = f" ({step['reason']})" if step["reason"] else ""
        lines.append(f"  {step['case']:<55} {step['verdict']}{reason}")
    lines.append(
        f"  rows {feed['rows']}, log entries {feed['checkpoints']}, recovered "
        f"{feed['recovered']}, chain verified {feed['chain_verified']}"
    )
    lines.append(f"  head {feed['head']}")
    return "\n".join(lines)


def load_demo_traffic(box: oncebox.Oncebox) -> str:
    """A little traffic for ``oncebox serve --demo`` (a USSD session with a retransmission
    and a conflict; re-running it only adds duplicates), and a fresh demo token.

    The demo's conflict is made on purpose, so its warning is held back here: at start-up
    it would read as if something had broken. The console shows it as any conflict."""
    engine_log = logging.getLogger("oncebox")
    level = engine_log.level
    engine_log.setLevel(logging.ERROR)
    try:
        _demo_session(box)
    finally:
        engine_log.setLevel(level)
    if any(t.name == "demo" and t.revoked_at is None for t in box.list_tokens()):
        box.revoke_token("demo")
    return box.create_token("demo", ["*"], ["read", "write", "operator", "admin"]).secret


def _demo_session(box: oncebox.Oncebox) -> None:
    if "ussd" in {a.name for a in box.inboxes}:
        frames = [
            Delivery(frame.encode(), key=f"{rec}-{i}") for i, (rec, frame) in enumerate(SESSION, 1)
        ]
        box.ingest_batch("ussd", frames + frames[:1])
        box.ingest("ussd", Delivery(make_frame(1, "Kakuma1", "MED", 9, 86).encode(), key="rec1-1"))
