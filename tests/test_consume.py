"""The Redis Streams adapter against a real redis-server: ack only what committed, and a
consumer killed between its commit and its XACK loses nothing and applies nothing twice."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import oncebox
from conftest import INBOXES, SESSION, BoxFactory
from oncebox import Delivery, InboxSpec
from oncebox.engine import crashpoints
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.consume import StreamConsumer, Summary, delivery_from_entry
from redisserver import MISSING, RedisServer


@pytest.fixture(scope="session")
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


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis_server.client()
    yield c
    c.close()


@pytest.fixture
def stream() -> str:
    return f"frames-{uuid.uuid4().hex[:10]}"


def publish(client: redis.Redis, stream: str, frames: list[tuple[str, str]]) -> None:
    for frame_id, text in frames:
        client.xadd(stream, {"body": text.encode(), "key": frame_id})


def pending(client: redis.Redis, stream: str, group: str) -> int:
    info = client.xpending(stream, group)
    return int(info["pending"])  # type: ignore[index]


def traffic(count: int) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """``count`` distinct frames, each resent once or twice further on, and one conflict
    (same frame id, another headcount) near the end. Returns the frames as published
    and each identity's headcount (the first write's)."""
    distinct = [
        (f"r{i}-{i}", make_frame(i, f"Site{i % 4}", "MED", i % 9 + 1, 50)) for i in range(count)
    ]
    frames = list(distinct)
    for i, item in enumerate(distinct):
        frames.insert(min(len(frames), 2 * i + 3), item)
        if i % 3 == 0:
            frames.append(item)
    frames.append(("r0-0", make_frame(0, "Site0", "MED", 99, 50)))
    return frames, {fid: i % 9 + 1 for i, (fid, _) in enumerate(distinct)}


def assert_each_identity_applied_once(box: oncebox.Oncebox, headcounts: dict[str, int]) -> None:
    for frame_id in headcounts:
        assert box.record("ussd", frame_id) is not None, f"{frame_id} lost"
    stats = box.stats("ussd")
    assert stats["records"] == len(headcounts)
    triage = box.triage("ussd")
    assert triage["cases"] == len(headcounts)
    assert triage["headcount"] == sum(headcounts.values())
    assert [q.identity for q in box.quarantined("ussd")] == ["r0-0"]


# -- entry forms ------------------------------------------------------------------------


def test_entry_forms_map_to_deliveries() -> None:
    d = delivery_from_entry(
        "ussd-h1",
        "5-0",
        {b"body": b"H1|1|K|MED|3|86|#89", b"key": b"rec1-1", b"device_time": b"t"},
    )
    assert (d.body, d.key, d.device_time, d.delivery_id) == (
        b"H1|1|K|MED|3|86|#89",
        "rec1-1",
        "t",
        "5-0",
    )
    line = json.dumps({"frame_id": "rec1-1", "frame": "H1|x", "delivery_id": "gw-7"})
    d = delivery_from_entry("ussd-h1", "5-1", {b"line": line.encode()})
    assert (d.body, d.key, d.delivery_id) == (b"H1|x", "rec1-1", "gw-7")
    d = delivery_from_entry("feed", "5-2", {b"body": b"row", b"lease_token": b"0"})
    assert d.lease_token == 0 and d.delivery_id == "5-2"
    # Neither form, a fact that is not UTF-8, a token that is not an integer: delivered
    # as a copy of the raw fields, for the codec to refuse and dead-letter.
    for fields in (
        {b"frame": b"H1|x"},
        {b"body": b"H1|x", b"key": b"\xff"},
        {b"body": b"H1|x", b"lease_token": b"seven"},
    ):
        d = delivery_from_entry("ussd-h1", "5-3", fields)
        assert d.key is None and d.lease_token is None and b"=" in d.body


@pytest.mark.slow
def test_an_entry_correcting_a_dead_letter_is_decided_as_any_delivery(
    make_box: BoxFactory, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    """Whoever adds to the stream is a sender: a line re-delivering what a dead letter
    kept (an export's line) counts on it, but other bytes in its name (a correction,
    an operator's replay) are decided as any delivery and leave it as it was."""
    box = make_box()
    bad = "H1|1|K1|MED|3|86|#00"
    letter_id = box.ingest("ussd", Delivery(bad.encode(), key="a-1")).dead_letter_id
    other = {"frame_id": "rec1", "frame": SESSION[0][1], "dead_letter": letter_id}
    kept = {"frame_id": "a-1", "frame": bad, "dead_letter": letter_id}
    for line in (other, kept):
        client.xadd(stream, {"line": json.dumps(line)})
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", "ussd")
    summary = consumer.run_once()
    consumer.close()
    assert summary.verdicts == {"accepted": 1, "rejected": 1}
    [letter] = box.dead_letters("ussd")  # no new one: the kept line counted on it
    assert (letter.id, letter.status, letter.attempts) == (letter_id, "open", 1)


@pytest.mark.slow
def test_a_stream_of_frames_is_decided_and_every_entry_acked(
    make_box: BoxFactory, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    box = make_box()
    frames = [*SESSION, *SESSION, ("rec2", make_frame(2, "Kakuma2", "SHE", 80, 71))]
    publish(client, stream, frames)
    client.xadd(stream, {"body": b"H1|garbage", "key": b"rec9"})
    client.xadd(stream, {"line": json.dumps({"frame_id": "rec4", "frame": SESSION[0][1]})})
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", "ussd", batch=3)
    summary = consumer.run_once()
    assert summary.to_dict() == {
        "entries": 9,
        "claimed": 0,
        "verdicts": {"accepted": 4, "conflict": 1, "duplicate": 3, "rejected": 1},
        "reasons": {
            "conflict:same_identity_different_content": 1,
            "rejected:bad_format": 1,
        },
        "acked": 9,
        "left_pending": 0,
        "failed": 0,
        "deleted": 0,
    }
    assert pending(client, stream, "g") == 0
    assert box.triage("ussd")["headcount"] == 23 + 3  # rec4 repeats rec1's frame
    [quarantined] = box.quarantined("ussd")
    assert quarantined.identity == "rec2"
    [letter] = box.dead_letters("ussd")
    assert letter.reason == "bad_format"
    assert consumer.run_once().entries == 0  # drained: nothing new, nothing pending
    consumer.close()


@pytest.mark.slow
def test_fenced_entries_stay_pending_and_are_decided_again_when_claimed(
    make_box: BoxFactory, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    box = make_box()
    old = box.lease("feed", "S1", 60).token
    new = box.lease("feed", "S1", 60).token
    client.xadd(stream, {"body": b"row-A", "snapshot_id": "S1", "lease_token": str(old)})
    client.xadd(stream, {"body": b"row-B", "snapshot_id": "S1", "lease_token": str(new)})
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", "feed", claim_idle_ms=0)
    first = consumer.run_once()
    assert first.verdicts == {"rejected": 1, "accepted": 1}
    assert first.reasons == {"rejected:stale_token": 1}
    assert (first.acked, first.left_pending) == (1, 1)
    assert pending(client, stream, "g") == 1
    # Claimed again (idle >= 0 ms), decided again, still not stored and not acked.
    again = consumer.run_once()
    assert (again.claimed, again.reasons, again.acked) == (1, {"rejected:stale_token": 1}, 0)
    assert pending(client, stream, "g") == 1
    assert box.stats("feed")["records"] == 1
    consumer.close()


@pytest.mark.slow
def test_an_entry_whose_apply_step_fails_stays_pending_alone(
    make_box: BoxFactory, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    def fail_on_wat(tx: oncebox.store.Tx, change: oncebox.Change) -> None:
        if change.fields["need"] == "WAT":
            raise ValueError("ledger full")

    box = make_box([InboxSpec("ussd", codec="ussd-h1", apply=fail_on_wat)])
    publish(client, stream, SESSION)
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", "ussd")
    summary = consumer.run_once()
    assert (summary.acked, summary.failed, summary.left_pending) == (2, 1, 1)
    [entry] = client.xpending_range(stream, "g", min="-", max="+", count=10)
    assert box.record("ussd", "rec3") is None
    assert entry["consumer"] == b"c1"
    consumer.close()


# -- crashes between the commit and the XACK ---------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time
    import oncebox
    from oncebox import InboxSpec
    from oncebox.surfaces.consume import StreamConsumer

    db, redis_url, stream, mode = sys.argv[1:5]
    box = oncebox.open(db, inboxes=[InboxSpec("ussd", codec="ussd-h1", apply="triage")])
    consumer = StreamConsumer(box, redis_url, stream, "g", "doomed", "ussd", batch=16)
    if mode == "hang":
        def hang(stream, group, *ids):
            print("committed", len(ids), flush=True)
            time.sleep(600)
        consumer.redis.xack = hang
    consumer.run_once()
    print("survived", flush=True)
""")


def doomed(tmp_path: Path, db: str, url: str, stream: str, mode: str) -> subprocess.Popen[str]:
    script = tmp_path / "consumer.py"
    script.write_text(CHILD)
    env = dict(os.environ)
    env.pop("ONCEBOX_CRASH_AT", None)
    if mode == "crashpoint":
        env["ONCEBOX_CRASH_AT"] = crashpoints.BEFORE_XACK
    return subprocess.Popen(
        [sys.executable, str(script), db, url, stream, mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_hard_exit_before_xack_then_a_second_consumer_claims(
    tmp_path: Path, shared_url: str, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    frames, headcounts = traffic(30)
    publish(client, stream, frames)
    proc = doomed(tmp_path, shared_url, redis_server.url, stream, "crashpoint")
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a no-op once it has exited; never left behind
    assert proc.returncode == crashpoints.EXIT_CODE and "survived" not in out
    # The first batch committed, and all of it is still pending under the dead consumer.
    first = frames[:16]
    assert pending(client, stream, "g") == 16
    with oncebox.open(shared_url, inboxes=INBOXES) as box:
        committed = {fid for fid, _ in first}
        assert box.stats("ussd")["records"] == len(committed)
        time.sleep(0.3)
        taker = StreamConsumer(
            box, redis_server.url, stream, "g", "taker", "ussd", batch=16, claim_idle_ms=200
        )
        summary = taker.run_once()
        assert summary.claimed == 16 and summary.entries == len(frames)
        # Everything the dead consumer committed comes back as a duplicate: only the
        # identities it never saw are accepted now.
        assert summary.verdicts["accepted"] == len(headcounts) - len(committed)
        assert summary.verdicts["conflict"] == 1
        assert summary.acked == len(frames) and summary.left_pending == 0
        assert pending(client, stream, "g") == 0
        assert_each_identity_applied_once(box, headcounts)
        taker.close()


@pytest.mark.slow
def test_sigkill_between_commit_and_xack_a_live_consumer_takes_over(
    tmp_path: Path, shared_url: str, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    frames, headcounts = traffic(40)
    publish(client, stream, frames)
    proc = doomed(tmp_path, shared_url, redis_server.url, stream, "hang")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["committed", "16"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # never left behind, even if the test fails
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert pending(client, stream, "g") == 16
    with oncebox.open(shared_url, inboxes=INBOXES) as box:
        taker = StreamConsumer(
            box,
            redis_server.url,
            stream,
            "g",
            "taker",
            "ussd",
            batch=16,
            block_ms=50,
            claim_idle_ms=300,
        )
        stop = threading.Event()
        totals: list[Summary] = []
        worker = threading.Thread(target=lambda: totals.append(taker.run(stop)))
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if pending(client, stream, "g") == 0 and box.stats("ussd")["records"] == len(
                    headcounts
                ):
                    break
                time.sleep(0.05)
        finally:
            stop.set()
            worker.join(timeout=10)
        assert not worker.is_alive()
        [summary] = totals
        assert summary.claimed == 16 and summary.acked == len(frames)
        assert pending(client, stream, "g") == 0
        assert_each_identity_applied_once(box, headcounts)
        taker.close()


# -- the command ---------------------------------------------------------------------------


@pytest.mark.slow
def test_consume_once_from_the_command_line(
    tmp_path: Path, redis_server: RedisServer, client: redis.Redis, stream: str
) -> None:
    frames, headcounts = traffic(12)
    publish(client, stream, frames)

    def run() -> dict[str, object]:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "oncebox",
                "--db",
                f"sqlite:///{tmp_path / 'cli.db'}",
                "consume",
                redis_server.url,
                "--stream",
                stream,
                "--group",
                "G",
                "--inbox",
                "ussd",
                "--consumer",
                "cli-1",
                "--once",
            ],
            capture_output=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr.decode()
        data: dict[str, object] = json.loads(result.stdout)
        return data

    summary = run()
    assert summary["verdicts"] == {
        "accepted": len(headcounts),
        "conflict": 1,
        "duplicate": len(frames) - len(headcounts) - 1,
    }
    assert summary["acked"] == len(frames)
    assert (summary["left_pending"], summary["group_pending"]) == (0, 0)
    assert (summary["stream"], summary["group"], summary["consumer"]) == (stream, "G", "cli-1")
    assert run()["entries"] == 0
    with oncebox.open(f"sqlite:///{tmp_path / 'cli.db'}", inboxes=INBOXES) as box:
        assert_each_identity_applied_once(box, headcounts)
