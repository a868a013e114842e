"""The Redis consumer as an intake desk runs it: a malformed envelope is a dead letter
that is acked (never re-decided for ever), a keyless entry is ``missing_key``, consumers
keep stable names and leave the group when they exit with nothing pending, and configured
``keyed`` and ``json`` inboxes decide stream entries end to end."""

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

pytestmark = pytest.mark.slow  # every test needs a redis-server process


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


def consume(
    db: Path, url: str, stream: str, inbox: str, *extra: str, config: Path | None = None
) -> dict[str, Any]:
    configured = ["--config", str(config)] if config is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "oncebox", "--db", f"sqlite:///{db}", *configured, "consume",
         url, "--stream", stream, "--group", "G", "--inbox", inbox, "--once", *extra],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_malformed_transport_fact_is_a_bad_envelope_dead_letter_and_acked(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    stream = f"frames-{uuid.uuid4().hex[:8]}"
    frame = make_frame(1, "K1", "MED", 3, 86).encode()
    client.xadd(stream, {"body": frame, "key": b"r-1", "lease_token": b"twelve"})
    client.xadd(stream, {"body": frame, "key": b"r-2", "device_time": b"\xff\xfe"})
    summary = consume(tmp_path / "s.db", server.url, stream, "ussd")
    # Left pending, they would be claimed and decided again for ever.
    assert summary["verdicts"] == {"rejected": 2}
    assert (summary["acked"], summary["group_pending"]) == (2, 0)
    with oncebox.open(f"sqlite:///{tmp_path / 's.db'}", inboxes=INBOXES) as box:
        assert sorted(d.reason for d in box.dead_letters("ussd")) == ["bad_envelope"] * 2


def test_on_a_fenced_inbox_a_malformed_envelope_without_the_lease_stores_nothing(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    """The fence comes first: an entry that holds no current lease stores nothing, not
    even its dead letter, and stays pending like any fenced entry; one under the current
    lease is dead-lettered and acked."""
    with oncebox.open(f"sqlite:///{tmp_path / 'f.db'}", inboxes=INBOXES) as box:
        token = str(box.lease("feed", "S", 600).token).encode()
    stream = f"feed-{uuid.uuid4().hex[:8]}"
    client.xadd(stream, {"body": b"row-1", "snapshot_id": b"S", "lease_token": b"twelve"})
    client.xadd(stream, {"body": b"row-2", "snapshot_id": b"S", "device_time": b"\xff\xfe"})
    client.xadd(
        stream,
        {"body": b"row-3", "snapshot_id": b"S", "lease_token": token, "device_time": b"\xff"},
    )
    summary = consume(tmp_path / "f.db", server.url, stream, "feed")
    assert summary["reasons"] == {"rejected:stale_token": 2, "rejected:bad_envelope": 1}
    assert (summary["acked"], summary["group_pending"]) == (1, 2)
    with oncebox.open(f"sqlite:///{tmp_path / 'f.db'}", inboxes=INBOXES) as box:
        assert [d.reason for d in box.dead_letters("feed")] == ["bad_envelope"]


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


CONFIGURED = """
[inboxes.queue]
codec = "keyed"

[inboxes.orders]
codec = "json"
identity = ["/id"]
witness_ignore = ["/attempt"]
"""


def test_keyed_and_json_inboxes_from_redis_end_to_end(
    tmp_path: Path, server: RedisServer, client: redis.Redis
) -> None:
    config = tmp_path / "oncebox.toml"
    config.write_text(CONFIGURED)
    queue, orders = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("queue", "orders"))
    for fields in (
        {"body": b"payload-1", "key": b"m-1"},
        {"body": b"payload-1", "key": b"m-1"},  # redelivered: a duplicate
        {"body": b"payload-X", "key": b"m-1"},  # the same key over other bytes: a conflict
        {"line": b'{"body": "payload-2", "key": "m-2"}'},  # the NDJSON line form
        {"body": b"keyless"},  # missing_key
    ):
        client.xadd(queue, fields)
    for fields in (
        {"body": b'{"id": "o-1", "attempt": 1, "n": 5}'},
        {"body": b'{"attempt": 2, "n": 5, "id": "o-1"}'},  # noise moved: a duplicate
        {"line": b'{"id": "o-2", "n": 1}'},  # a json line is the object itself
        {"body": b'{"id": "o-3", "id": "o-4"}'},  # duplicate_member
    ):
        client.xadd(orders, fields)
    db = tmp_path / "c.db"
    keyed = consume(db, server.url, queue, "queue", config=config)
    assert keyed["verdicts"] == {"accepted": 2, "duplicate": 1, "conflict": 1, "rejected": 1}
    pointers = consume(db, server.url, orders, "orders", config=config)
    assert pointers["verdicts"] == {"accepted": 2, "duplicate": 1, "rejected": 1}
    for summary in (keyed, pointers):
        assert summary["acked"] == summary["entries"] and summary["group_pending"] == 0
    with oncebox.open(f"sqlite:///{db}", config=config) as box:
        assert [d.reason for d in box.dead_letters("queue")] == ["missing_key"]
        assert [d.reason for d in box.dead_letters("orders")] == ["duplicate_member"]
        assert len(box.quarantined("queue")) == 1
        first = box.record("queue", "m-1")
        assert first is not None and first.seen_count == 2 and first.content == b"payload-1"
        assert first.delivery_id is not None  # the stream entry's id, recorded
        order = box.record("orders", '["o-1"]')
        assert order is not None and order.seen_count == 2
