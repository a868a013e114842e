"""``oncebox serve`` as a real process: it starts, answers through the product's stack,
runs with its heap settled (GC frozen after startup), and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import event_body
from oncebox.surfaces.http import server

ONCEBOX = [sys.executable, "-m", "oncebox"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(url: str, body: bytes | None = None, secret: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


@pytest.mark.slow
def test_settle_heap_freezes_startup_objects_and_raises_thresholds() -> None:
    # In a child, so that this test process keeps its own GC settings.
    code = (
        "import gc; from oncebox.surfaces.http import server; server.settle_heap(); "
        "print(gc.get_freeze_count(), *gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    frozen, *thresholds = (int(x) for x in out.stdout.split())
    assert frozen > 10_000  # the interpreter and oncebox's imports, at least
    assert tuple(thresholds) == server.GC_THRESHOLDS


@pytest.mark.slow
def test_oncebox_serve_decides_deliveries_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    env = {**os.environ, "ONCEBOX_DB": db}
    made = subprocess.run(
        [*ONCEBOX, "token", "create", "e2e", "--inbox", "listing", "--scope", "write"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    secret = json.loads(made.stdout)["secret"]
    port = _free_port()
    proc = subprocess.Popen(
        [*ONCEBOX, "serve", "--port", str(port), "--log-format", "json"],
        env=env,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert _request(f"{base}/healthz")[0] == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "oncebox serve did not start"
                assert proc.poll() is None, "oncebox serve exited"
                time.sleep(0.1)
        url = f"{base}/v1/inboxes/listing/deliveries"
        status, answer = _request(url, event_body("n-1"), secret)
        assert status == 201 and answer["verdict"] == "accepted" and answer["may_ack"]
        status, answer = _request(url, event_body("n-1"), secret)
        assert status == 200 and answer["verdict"] == "duplicate"
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode in (0, -signal.SIGTERM)
    # The access log: one JSON line per request, with what happened, never the token.
    logged = [json.loads(x) for x in stderr.decode().splitlines() if x.startswith("{")]
    decided = [x for x in logged if x["path"] == "/v1/inboxes/listing/deliveries"]
    assert [(x["method"], x["status"], x["inbox"], x["verdict"]) for x in decided] == [
        ("POST", 201, "listing", "accepted"),
        ("POST", 200, "listing", "duplicate"),
    ]
    assert all(x["latency_ms"] >= 0 for x in logged) and secret not in stderr.decode()
