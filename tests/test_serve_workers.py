"""``oncebox serve --workers 2`` as a real process: both workers answer, concurrent
redeliveries of the same deliveries to both leave exactly one record per identity (and
its headcount counted once), on SQLite and PostgreSQL; and the supervisor leaves no
worker behind, whether it is stopped or killed."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import oncebox
from oncebox.formats.ussd_h1 import make_frame
from serveproc import Served, create_token, get, serving

pytestmark = pytest.mark.slow  # oncebox serve worker processes, some killed

IDENTITIES = 60
COPIES = 4


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _workers_of(pid: int) -> set[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {int(child) for child in children}


def _all_listening(served: Served, workers: set[int]) -> None:
    """Until each worker has answered: one that has not listened yet gets no connection."""
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while seen != workers:
        assert time.monotonic() < deadline, f"only workers {seen} of {workers} answered"
        seen.add(int(get(f"{served.base}/healthz")[1]["oncebox-worker"]))


def test_two_workers_decide_each_identity_once(shared_url: str) -> None:
    secret = create_token(shared_url)
    frames = [
        (f"r{i}-{i + 1}", make_frame(i + 1, f"Site{i % 7}", "MED", i % 5 + 1, 50).encode())
        for i in range(IDENTITIES)
    ]
    # The copies of one identity side by side: 16 clients send them at the same moment,
    # each request on a connection of its own, so they reach both workers at once.
    sends = [item for item in frames for _ in range(COPIES)]
    with serving(shared_url, "--workers", "2") as served:
        url = f"{served.base}/v1/inboxes/ussd/deliveries"
        workers = _workers_of(served.proc.pid)
        assert len(workers) == 2
        _all_listening(served, workers)

        def send(item: tuple[str, bytes]) -> tuple[str, int, str, str]:
            key, body = item
            request = urllib.request.Request(
                url,
                data=body,
                headers={"Authorization": f"Bearer {secret}", "Oncebox-Key": key},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
                return key, response.status, answer["verdict"], response.headers["Oncebox-Worker"]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(send, sends))

    assert {int(pid) for _, _, _, pid in answers} == workers  # both answered
    accepted = Counter(key for key, _, verdict, _ in answers if verdict == "accepted")
    assert accepted == Counter({key: 1 for key, _ in frames})  # one record per identity
    assert {verdict for _, _, verdict, _ in answers} == {"accepted", "duplicate"}
    assert len({pid for _, _, verdict, pid in answers if verdict == "accepted"}) == 2
    with oncebox.open(shared_url) as box:
        assert box.stats("ussd")["records"] == IDENTITIES
        assert box.triage("ussd")["headcount"] == sum(i % 5 + 1 for i in range(IDENTITIES))


def test_workers_stop_with_the_supervisor(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    # Stopped: SIGTERM ends every worker, and the supervisor exits 0.
    with serving(url, "--workers", "2") as served:
        workers = _workers_of(served.proc.pid)
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=30) == 0
    assert len(workers) == 2 and not any(_alive(pid) for pid in workers)

    # Killed: kill -9 of the supervisor leaves no orphan serving on.
    with serving(url, "--workers", "2") as served:
        workers = _workers_of(served.proc.pid)
        os.kill(served.proc.pid, signal.SIGKILL)
        served.proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its supervisor"
            time.sleep(0.1)
        try:
            get(f"{served.base}/healthz")
            answered = True
        except OSError:
            answered = False
        assert not answered


def test_a_failing_worker_stops_the_others(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    with serving(url, "--workers", "2") as served:
        first, second = sorted(_workers_of(served.proc.pid))
        os.kill(first, signal.SIGKILL)
        assert served.proc.wait(timeout=30) == 2  # reported as an error
        deadline = time.monotonic() + 15
        while _alive(second):
            assert time.monotonic() < deadline, "the other worker was not stopped"
            time.sleep(0.1)
