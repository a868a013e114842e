"""Reconcilers in real processes: four workers, events during reads, a worker killed
mid-read, a hard exit after commit, and the command-line reader."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import oncebox
from clirun import oncebox_in
from helpers import event_body
from oncebox import InboxSpec

pytestmark = pytest.mark.slow  # worker processes, one killed mid-read

LISTING = [InboxSpec("listing", codec="json-event", apply="generation")]
WORKER = textwrap.dedent("""
    import os, sys, time
    import oncebox
    from oncebox import InboxSpec
    from oncebox.engine.reconciler import Backoff, Outcome, ReadResult
    from oncebox.engine.steps import generation as work

    url, stop_file, name, slow_first = sys.argv[1:5]
    box = oncebox.open(url, inboxes=[InboxSpec("listing", codec="json-event",
                                                apply="generation")])
    inbox_id = box.inbox("listing").row.id
    slow = [slow_first == "1"]

    def reader(key):
        with box.store.reading() as tx:
            generation = work.get(tx, inbox_id, tuple(key)).generation
        if slow[0]:
            slow[0] = False
            print("reading", flush=True)
            time.sleep(120)  # killed here, holding its claim
        time.sleep(0.005)
        return ReadResult(key, {"read_at_generation": generation, "worker": name})

    recon = box.reconciler("listing", reader, worker=name, claim_ttl=1.0,
                           backoff=Backoff(base=0.05, cap=0.2))
    while True:
        if recon.refresh_once() is Outcome.IDLE:
            if os.path.exists(stop_file):
                break
            time.sleep(0.02)
""")


def start_worker(tmp_path: Path, url: str, name: str, slow: bool) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return subprocess.Popen(
        [sys.executable, str(script), url, str(tmp_path / "stop"), name, "1" if slow else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_four_workers_with_events_during_reads_and_one_killed_mid_read(
    tmp_path: Path, shared_url: str
) -> None:
    url = shared_url
    feeder = oncebox.open(url, inboxes=LISTING)
    skus = [f"SKU-{i}" for i in range(12)]
    for n, sku in enumerate(skus):
        feeder.ingest("listing", event_body(f"seed-{n}", sku=sku))
    victim = start_worker(tmp_path, url, "victim", slow=True)
    assert victim.stdout is not None and victim.stdout.readline().strip() == "reading"
    workers = [start_worker(tmp_path, url, f"w{n}", slow=False) for n in range(3)]
    os.kill(victim.pid, signal.SIGKILL)  # mid-read, holding a claim
    victim.wait(timeout=30)
    rng = random.Random(7)
    for n in range(300):  # events keep arriving while the workers read
        feeder.ingest("listing", event_body(f"live-{n}", sku=rng.choice(skus)))
        if n % 20 == 0:
            time.sleep(0.02)
    deadline = time.monotonic() + 90
    while any(k.dirty for k in feeder.work_keys("listing")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (tmp_path / "stop").write_text("")
    for proc in workers:
        assert proc.wait(timeout=60) == 0
    keys = feeder.work_keys("listing")
    assert len(keys) == 12
    for key in keys:
        assert not key.dirty, f"{key.sku} is still dirty"
        assert key.applied_generation == key.generation == key.document_generation
        document = json.loads(key.document or "{}")
        # No completion landed for a generation other than the one it was read for.
        assert document["read_at_generation"] == key.document_generation
        assert document["worker"] != "victim"
    completes = [
        json.loads(e.state) for e in feeder.log_entries(1, 100_000) if e.step == "complete"
    ]
    for entry in completes:
        assert entry["worker"] != "victim"
    assert feeder.verify().ok
    feeder.close()


HARD_EXIT = textwrap.dedent("""
    import os, sys
    import oncebox
    from oncebox import InboxSpec
    box = oncebox.open(sys.argv[1], inboxes=[InboxSpec("listing", codec="json-event",
                                                       apply="generation")])
    box.ingest("listing", sys.argv[2].encode())
    os._exit(0)  # committed; the queue never sees an ack
""")


def test_hard_exit_after_commit_leaves_the_work_recoverable(shared_url: str) -> None:
    url = shared_url
    body = event_body("n-1").decode()
    subprocess.run([sys.executable, "-c", HARD_EXIT, url, body], check=True, timeout=60)
    with oncebox.open(url, inboxes=LISTING) as box:
        [key] = box.work_keys("listing")
        assert key.dirty and key.generation == 1
        assert str(box.ingest("listing", body.encode()).verdict) == "duplicate"
        assert box.work_keys("listing")[0].generation == 1

        def reader(k: object) -> oncebox.engine.reconciler.ReadResult:
            return oncebox.engine.reconciler.ReadResult(k, {"status": "ACTIVE"})  # type: ignore[arg-type]

        assert str(box.reconciler("listing", reader).refresh_once()) == "applied"
        assert not box.work_keys("listing")[0].dirty


def cli(tmp_path: Path, *args: str, stdin: bytes = b"", code: int = 0, real: bool = False) -> bytes:
    """The test's first command (and a ``real`` one) a process, the rest in this one."""
    oncebox = oncebox_in(tmp_path, "--db", f"sqlite:///{tmp_path / 'cli.db'}")
    result = oncebox(*args, stdin=stdin, text=False, real=real)
    assert result.returncode == code, result.stderr.decode()
    return result.stdout


def test_reconcile_through_a_command_reader(tmp_path: Path) -> None:
    (tmp_path / "fetch.py").write_text(
        textwrap.dedent("""
        import json, sys
        key = json.load(sys.stdin)
        if key["sku"] == "SKU-BAD":
            print("listing not found", file=sys.stderr)
            sys.exit(3)
        print(json.dumps({"status": "ACTIVE", "sku": key["sku"]}))
    """)
    )
    events = b"\n".join(event_body(f"n-{i}", sku=f"SKU-{i % 3}") for i in range(9))
    cli(tmp_path, "ingest", "listing", stdin=events + b"\n" + event_body("n-bad", sku="SKU-BAD"))
    reader = f"{sys.executable} fetch.py"
    summary = json.loads(
        cli(
            tmp_path,
            "reconcile",
            "--reader",
            reader,
            "--once",
            "--workers",
            "2",
            "--max-failures",
            "1",
            real=True,  # its workers are forked processes: never forked from the test's
        )
    )
    assert summary["applied"] == 3 and summary["failed"] == 1
    assert summary["dirty"] == 1 and summary["in_review"] == 1
    keys = json.loads(cli(tmp_path, "work", "list"))
    clean = [k for k in keys if not k["dirty"]]
    assert {k["document"]["sku"] for k in clean} == {"SKU-0", "SKU-1", "SKU-2"}
    [waiting] = json.loads(cli(tmp_path, "work", "review"))
    assert waiting["key"]["sku"] == "SKU-BAD" and "exited 3" in waiting["last_error"]
    assert "listing not found" in waiting["last_error"]
    cli(tmp_path, "work", "retry", "SELLER-A", "SKU-BAD", "ATVPDKIKX0DER")
    assert json.loads(cli(tmp_path, "work", "review")) == []
    assert json.loads(cli(tmp_path, "work", "list", "--dirty"))[0]["failures"] == 0


def test_reconcile_refuses_a_claim_no_longer_than_a_read_may_take(tmp_path: Path) -> None:
    """``--claim-ttl`` and ``--timeout`` were both 30 s by default: a read that took its
    whole timeout and then succeeded outlasted its claim by the time it completed, and was
    refused and counted a failure (in review after five such reads). The default claim is
    now twice the read's timeout, and a claim no longer than the timeout is refused."""
    from oncebox.surfaces.cli.work import reconcile

    defaults = {p.name: p.default for p in reconcile.params}
    assert defaults["claim_ttl"] >= 2 * defaults["timeout"]
    cli(tmp_path, "ingest", "listing", stdin=event_body("n-1"))
    for ttl, timeout in [("30", "30"), ("10", "30"), ("20", None)]:
        more = ["--timeout", timeout] if timeout else []
        args = ["reconcile", "--reader", "true", "--once", "--claim-ttl", ttl, *more]
        oncebox = oncebox_in(tmp_path, "--db", f"sqlite:///{tmp_path / 'cli.db'}")
        refused = oncebox(*args, text=True)
        assert refused.returncode == 2 and "--claim-ttl" in refused.stderr, refused.stderr
    assert json.loads(cli(tmp_path, "work", "list"))[0]["failures"] == 0  # nothing was read
