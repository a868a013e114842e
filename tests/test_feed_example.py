"""The documented tracking-record example (examples/follow_into_sqlite.py) makes each
feed entry's effect exactly once, though it is killed with SIGKILL while it follows."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import oncebox
from helpers import event_body
from serveproc import serving

pytestmark = pytest.mark.slow  # a runnable example killed with SIGKILL, as processes

EXAMPLE = Path(__file__).parent.parent / "examples" / "follow_into_sqlite.py"


def test_the_tracking_record_example_survives_kill_9(shared_url: str, tmp_path: Path) -> None:
    box = oncebox.open(shared_url)
    try:
        writer = box.create_token("writer", ["listing"], ["write"]).secret
        reader = box.create_token("reader", ["listing"], ["read"]).secret
    finally:
        box.close()
    ledger = tmp_path / "ledger.db"
    env = {**os.environ, "ONCEBOX_TOKEN": reader}
    with serving(shared_url) as server:
        command = [sys.executable, str(EXAMPLE), server.base, "listing", str(ledger)]
        auth = {"Authorization": f"Bearer {writer}"}
        with httpx.Client(base_url=server.base, headers=auth, timeout=30) as http:
            for round_ in range(4):
                follower = subprocess.Popen(command, env=env)
                lines = b"\n".join(event_body(f"n-{round_}-{i}") for i in range(150))
                answer = http.post(
                    "/v1/inboxes/listing/batch",
                    content=lines,
                    headers={"Content-Type": "application/x-ndjson"},
                )
                assert answer.status_code == 200
                time.sleep(0.3 * round_)  # killed at a different point each round
                follower.send_signal(signal.SIGKILL)
                follower.wait()
        caught_up = subprocess.run([*command, "--once"], env=env, timeout=120)
        assert caught_up.returncode == 0
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT record_id, idempotency_key FROM payments").fetchall()
    assert len(rows) == 600  # every accepted record's effect once: none lost, none twice
    assert sorted(r[0] for r in rows) == list(range(1, 601))
    assert len({r[1] for r in rows}) == 600
