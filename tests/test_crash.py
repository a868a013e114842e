"""Hard exits and SIGKILL: what was acked survives, nothing is applied twice (I1, I2, I5)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import oncebox
from conftest import INBOXES
from helpers import frame
from oncebox.formats.ussd_h1 import make_frame

pytestmark = pytest.mark.slow  # real crashes: child processes exit hard or are killed

CHILD = textwrap.dedent("""
    import json, os, sys
    import oncebox
    from oncebox import Delivery, InboxSpec
    from oncebox.formats.ussd_h1 import make_frame

    url, count, exit_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    box = oncebox.open(url, inboxes=[InboxSpec("ussd", codec="ussd-h1", apply="triage")])
    for i in range(count):
        text = make_frame(i, "Site", "MED", i % 9 + 1, 50)
        decision = box.ingest("ussd", Delivery(text.encode(), key=f"rec{i}"))
        if i == exit_after:
            os._exit(0)  # right after the commit returned: no close, no ack sent
        sys.stdout.write(json.dumps(decision.to_dict()) + "\\n")
        sys.stdout.flush()
""")


def child(tmp_path: Path, url: str, count: int, exit_after: int) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), url, str(count), str(exit_after)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_hard_exit_right_after_commit_loses_nothing(tmp_path: Path, shared_url: str) -> None:
    url = shared_url
    proc = child(tmp_path, url, count=50, exit_after=20)
    out, _ = proc.communicate(timeout=60)
    acked = [json.loads(line) for line in out.splitlines()]
    assert len(acked) == 20 and all(d["may_ack"] for d in acked)
    with oncebox.open(url, inboxes=INBOXES) as box:
        for decision in acked:
            record = box.record("ussd", decision["identity"])
            assert record is not None and record.witness.hex() == decision["witness"]
        # The 21st committed but its ack was lost: it is there, and a retry is a duplicate.
        assert box.record("ussd", "rec20") is not None
        for i in range(21):
            text = make_frame(i, "Site", "MED", i % 9 + 1, 50)
            assert str(box.ingest("ussd", frame(f"rec{i}", text)).verdict) == "duplicate"
        assert box.stats("ussd")["records"] == 21
        assert box.triage("ussd")["headcount"] == sum(i % 9 + 1 for i in range(21))


def test_sigkill_mid_stream_keeps_every_ack_and_applies_each_once(
    tmp_path: Path, shared_url: str
) -> None:
    url = shared_url
    proc = child(tmp_path, url, count=100_000, exit_after=-1)
    assert proc.stdout is not None
    acked = []
    deadline = time.monotonic() + 60
    while len(acked) < 150 and time.monotonic() < deadline:
        acked.append(json.loads(proc.stdout.readline()))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(acked) == 150
    with oncebox.open(url, inboxes=INBOXES) as box:
        stats = box.stats("ussd")
        assert stats["records"] >= len(acked)
        for decision in acked:
            assert box.record("ussd", decision["identity"]) is not None
        stored = stats["records"]
        # Apply-once: the ledger holds exactly the stored records' effects.
        assert box.triage("ussd")["cases"] == stored
        assert box.triage("ussd")["headcount"] == sum(i % 9 + 1 for i in range(stored))
