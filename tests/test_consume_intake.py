"""The Redis consumer as an intake desk runs it: a malformed envelope is a dead letter
that is acked (never re-decided for ever), a keyless entry is ``missing_key``, and
consumers keep stable names and leave the group when they exit with nothing pending."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import oncebox
from conftest import INBOXES
from oncebox.formats.ussd_h1 import make_frame
from redisserver import MISSING, RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.fail(MISSING)
    workdir = Path(tempfile.mkdtemp(prefix="oncebox-redis-", dir="/tmp"))
    started = RedisServer.start(workdir)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    c = server.client()
    yield c
    c.close()


def consume(db: Path, url: str, stream: str, inbox: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "oncebox", "--db", f"sqlite:///{db}", "consume", url,
         "--stream", stream, "--group", "G", "--inbox", inbox, "--once", *extra],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_malformed_transport_fact_is_a_bad_envelope_dead_letter_and_acked(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    stream = f"feed-{uuid.uuid4().hex[:8]}"
    client.xadd(stream, {"body": b"row-1", "snapshot_id": b"S", "lease_token": b"twelve"})
    client.xadd(stream, {"body": b"row-2", "snapshot_id": b"S", "device_time": b"\xff\xfe"})
    summary = consume(tmp_path / "s.db", server.url, stream, "feed")
    # Fenced out as stale_token they would stay pending and be decided again for ever.
    assert summary["verdicts"] == {"rejected": 2}
    assert (summary["acked"], summary["group_pending"]) == (2, 0)
    with oncebox.open(f"sqlite:///{tmp_path / 's.db'}", inboxes=INBOXES) as box:
        assert sorted(d.reason for d in box.dead_letters("feed")) == ["bad_envelope"] * 2


def test_an_entry_without_its_key_is_a_missing_key_dead_letter(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    stream = f"frames-{uuid.uuid4().hex[:8]}"
    client.xadd(stream, {"body": make_frame(1, "K1", "MED", 3, 86).encode()})
    summary = consume(tmp_path / "k.db", server.url, stream, "ussd")
    assert (summary["acked"], summary["group_pending"]) == (1, 0)
    with oncebox.open(f"sqlite:///{tmp_path / 'k.db'}", inboxes=INBOXES) as box:
        assert [d.reason for d in box.dead_letters("ussd")] == ["missing_key"]


def test_a_consumer_that_exits_with_nothing_pending_leaves_the_group(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    stream = f"frames-{uuid.uuid4().hex[:8]}"
    for i in range(1, 4):
        client.xadd(stream, {"body": make_frame(i, "K1", "MED", 3, 86).encode(), "key": f"r-{i}"})
    first = consume(tmp_path / "n.db", server.url, stream, "ussd")
    assert first["acked"] == 3 and first["consumer"] == f"{socket.gethostname()}-1"
    assert client.xinfo_consumers(stream, "G") == []
    assert consume(tmp_path / "n.db", server.url, stream, "ussd")["entries"] == 0
    assert client.xinfo_consumers(stream, "G") == []


def test_a_consumer_keeps_its_name_across_restarts_so_names_do_not_pile_up(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    stream = f"feed-{uuid.uuid4().hex[:8]}"
    # A fenced entry under a token no lease holds is not acked: it stays pending.
    client.xadd(stream, {"body": b"row", "snapshot_id": b"S", "lease_token": b"7"})
    for _ in range(3):
        summary = consume(tmp_path / "p.db", server.url, stream, "feed", "--claim-idle-ms", "0")
        assert summary["group_pending"] == 1
    names = [c["name"] for c in client.xinfo_consumers(stream, "G")]
    assert names == [f"{socket.gethostname()}-1".encode()]
