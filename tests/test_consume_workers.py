"""``oncebox consume --workers 2`` against a real redis-server: two consumers of the group
(named CONSUMER-1 and CONSUMER-2) share the stream, every entry is acked, and each
identity is applied once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import oncebox
from oncebox.formats.ussd_h1 import make_frame
from redisserver import MISSING, RedisServer

pytestmark = pytest.mark.slow  # consumer processes and a redis-server process

FRAMES = 120


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.fail(MISSING)
    workdir = Path(tempfile.mkdtemp(prefix="oncebox-redis-", dir="/tmp"))
    server = RedisServer.start(workdir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _consume(db: str, url: str, stream: str, *args: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "oncebox", "--db", db, "consume", url]
    command += ["--stream", stream, "--group", "G", "--inbox", "ussd", "--consumer", "w", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _consumers(client: redis.Redis, stream: str) -> set[str]:
    try:
        found: Any = client.xinfo_consumers(stream, "G")
    except redis.exceptions.ResponseError:  # no group yet
        return set()
    return {c["name"].decode() if isinstance(c["name"], bytes) else c["name"] for c in found}


def test_two_consumer_workers_share_a_stream(tmp_path: Path, redis_server: RedisServer) -> None:
    db = f"sqlite:///{tmp_path / 'consumed.db'}"
    stream = f"frames-{uuid.uuid4().hex[:10]}"
    client = redis_server.client()
    proc = _consume(db, redis_server.url, stream, "--workers", "2", "--batch", "5")
    try:
        headcounts = {}
        deadline = time.monotonic() + 30
        for i in range(FRAMES):  # each sent twice, a little at a time
            frame_id = f"r{i}-{i + 1}"
            text = make_frame(i + 1, f"Site{i % 4}", "MED", i % 9 + 1, 50)
            headcounts[frame_id] = i % 9 + 1
            for _ in range(2):
                client.xadd(stream, {"body": text.encode(), "key": frame_id})
            time.sleep(0.01)
            # A consumer joins the group with its first read entry: until both have,
            # go slowly (the second may still be starting).
            while len(_consumers(client, stream)) < 2 and i >= FRAMES // 2:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the second consumer never read"
                client.xadd(stream, {"body": text.encode(), "key": frame_id})
                time.sleep(0.1)
        deadline = time.monotonic() + 60
        while True:  # everything read and acked
            groups = client.xinfo_groups(stream)
            group = groups[0]
            if (
                group["pending"] == 0
                and group["last-delivered-id"] == client.xinfo_stream(stream)["last-generated-id"]
            ):
                break
            assert time.monotonic() < deadline, f"not drained: {group}"
            time.sleep(0.1)
        sent = int(client.xlen(stream))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        client.close()
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["consumers"] == ["w-1", "w-2"]
    assert summary["entries"] == summary["acked"] == sent
    assert summary["verdicts"] == {"accepted": FRAMES, "duplicate": sent - FRAMES}
    assert summary["group_pending"] == 0
    by_worker = {one["consumer"]: one["entries"] for one in summary["workers"]}
    assert all(entries > 0 for entries in by_worker.values()), by_worker
    assert sum(by_worker.values()) == sent
    with oncebox.open(db) as box:
        assert box.stats("ussd")["records"] == FRAMES
        assert box.triage("ussd")["headcount"] == sum(headcounts.values())


def test_consume_workers_once_drains_and_exits(tmp_path: Path, redis_server: RedisServer) -> None:
    db = f"sqlite:///{tmp_path / 'once.db'}"
    stream = f"frames-{uuid.uuid4().hex[:10]}"
    client = redis_server.client()
    for i in range(30):
        text = make_frame(i + 1, "Site1", "WAT", 2, 50)
        client.xadd(stream, {"body": text.encode(), "key": f"r{i}-{i + 1}"})
    client.close()
    proc = _consume(db, redis_server.url, stream, "--workers", "2", "--once")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["consumers"] == ["w-1", "w-2"] and summary["acked"] == 30
    assert summary["verdicts"] == {"accepted": 30} and summary["group_pending"] == 0
    assert os.path.exists(tmp_path / "once.db")
