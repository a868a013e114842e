"""Dispatchers send what the outbox owes (issue 22, items 3 and 4): HTTP per Standard
Webhooks (checked by the official ``standardwebhooks`` package), Redis streams exactly once
through one Lua step, and a Python function outside any store transaction."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import forward_sink
from conftest import BoxFactory
from forward_receiver import SECRET, Receiver
from httpserver import serving
from oncebox import Delivery, InboxSpec, Oncebox
from oncebox.domain.forwarding import ForwardFilter, ForwardStatus
from oncebox.surfaces.forwarding.dispatcher import Dispatcher
from oncebox.surfaces.forwarding.senders import StreamSender, retry_after
from redisserver import MISSING, RedisServer


def keyed(forward: dict[str, Any]) -> InboxSpec:
    return InboxSpec("payments", codec="keyed", forward=forward)


def ingest(box: Oncebox, n: int) -> None:
    box.ingest_batch("payments", [Delivery(f"pay {i}".encode(), key=f"p-{i}") for i in range(n)])


def dispatch(box: Oncebox) -> dict[str, int]:
    return dict(Dispatcher(box, poll=0.02).run(threading.Event(), once=True))


def test_http_forwards_carry_the_key_and_a_signature_the_official_library_accepts(
    make_box: BoxFactory,
) -> None:
    # Every third request fails first (500, then a 429 asking for no wait at all).
    answers = {3: (500, {}), 6: (429, {"Retry-After": "0"})}
    receiver = Receiver(lambda n: answers.get(n, (200, {})))
    with serving(receiver.app) as base:
        box = make_box([keyed({"ledger": {
            "url": f"{base}/hooks", "sign": {"secret": SECRET}, "retry": ["0s"] * 3,
        }})])  # fmt: skip
        ingest(box, 10)
        outcomes = dispatch(box)
    assert outcomes == {"delivered": 10, "retry": 2}
    assert receiver.unverified == 0 and len(receiver.requests) == 12
    expected = {f.record_id: f for f in box.forwards()}
    assert all(f.status is ForwardStatus.DELIVERED for f in expected.values())
    entries = {e.record_id: e.idempotency_key for e in box.feed("payments").entries}
    assert sorted(receiver.applied) == sorted(entries.values())  # the feed's own keys
    for headers, body in receiver.requests:
        assert headers["idempotency-key"] == headers["webhook-id"]
        document = json.loads(body)
        assert document["idempotency_key"] == headers["webhook-id"]
        assert receiver.applied[headers["webhook-id"]] == body  # the same bytes each time
        assert document["content"]["text"] == f"pay {document['record_id'] - 1}"
    retried = [k for k in receiver.ids() if receiver.ids().count(k) == 2]
    assert len(set(retried)) == 2


def test_once_sends_a_retry_that_settled_while_it_asked_what_is_due(
    make_box: BoxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race, made certain: the failures settle (as retries due at once) while the
    # dispatcher waits for a claim that found nothing, read before they settled (on
    # PostgreSQL a claim skips the rows a settling transaction holds). `once` sends what
    # is due now, so it must not stop on that stale answer.
    answers = {2: (500, {}), 4: (500, {})}
    receiver = Receiver(lambda n: answers.get(n, (200, {})))
    settling = [0]
    lock = threading.Lock()
    with serving(receiver.app) as base:
        box = make_box([keyed({"ledger": {
            "url": f"{base}/hooks", "sign": {"secret": SECRET}, "retry": ["0s"] * 3,
        }})])  # fmt: skip
        ingest(box, 5)
        claim, settle = box.claim_forwards, box.settle_forwards

        def slow_settle(*args: Any, **kwargs: Any) -> Any:
            with lock:
                settling[0] += 1
            try:
                time.sleep(0.3)
                return settle(*args, **kwargs)
            finally:
                with lock:
                    settling[0] -= 1

        def late_claim(*args: Any) -> Any:
            found = claim(*args)
            if not found and settling[0]:  # answer only once the settling has landed
                quiet_since = time.monotonic()
                while time.monotonic() - quiet_since < 0.2:
                    if settling[0]:
                        quiet_since = time.monotonic()
                    time.sleep(0.01)
            return found

        monkeypatch.setattr(box, "claim_forwards", late_claim)
        monkeypatch.setattr(box, "settle_forwards", slow_settle)
        outcomes = dispatch(box)
    assert outcomes == {"delivered": 5, "retry": 2}
    assert len(receiver.requests) == 7


def test_an_unsigned_destination_still_sends_the_key(make_box: BoxFactory) -> None:
    receiver = Receiver()
    with serving(receiver.app) as base:
        box = make_box([keyed({"ledger": {"url": f"{base}/hooks"}})])
        ingest(box, 1)
        dispatch(box)
    [(headers, _)] = receiver.requests
    assert "webhook-signature" not in headers and headers["webhook-id"].startswith("obx_")
    assert receiver.unverified == 1  # the receiver wants it signed


def test_a_refusing_receiver_makes_dead_letters_at_once(make_box: BoxFactory) -> None:
    receiver = Receiver(lambda _n: (422, {}))
    with serving(receiver.app) as base:
        box = make_box([keyed({"ledger": {"url": f"{base}/hooks", "sign": {"secret": SECRET}}})])
        ingest(box, 2)
        assert dispatch(box) == {"dead": 2}
    dead = box.forwards()
    assert [f.status for f in dead] == [ForwardStatus.DEAD] * 2
    attempts = [box.forward(f.id)[1] for f in dead]  # sent together: either came first
    assert {a.status for [a] in attempts} == {422}
    assert {a.answer for [a] in attempts} == {b'{"seen": 1}', b'{"seen": 2}'}


def test_a_connection_refused_is_retried_and_kept_as_an_attempt(make_box: BoxFactory) -> None:
    box = make_box([keyed({"ledger": {"url": "http://127.0.0.1:9/hooks", "retry": ["0s", "1h"],
                                      "timeout": "2s"}})])  # fmt: skip
    ingest(box, 1)
    assert dispatch(box) == {"retry": 1}
    [forward] = box.forwards()
    assert forward.status is ForwardStatus.FAILED and "ConnectError" in (forward.last_error or "")


def test_retry_after_is_read_as_seconds_or_a_date() -> None:
    assert retry_after("120", 0.0) == 120.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert retry_after("soon", 0.0) is None and retry_after(None, 0.0) is None
    # Digits to str.isdigit that are not ASCII digits are malformed: ignored, not raised.
    assert retry_after("\u00b2", 0.0) is None and retry_after("\u0663", 0.0) is None


def test_a_malformed_retry_after_does_not_turn_an_answer_into_a_failure(
    make_box: BoxFactory,
) -> None:
    # A 200 with `Retry-After: ²` (a digit to str.isdigit, not to float) raised in the
    # sender: the delivery was kept as a failed attempt and sent again, and a refusal (a
    # 4xx, dead at once) was retried on the schedule.
    receiver = Receiver(lambda n: (200 if n == 1 else 410, {"Retry-After": "\u00b2"}))
    with serving(receiver.app) as base:
        box = make_box([keyed({"ledger": {"url": f"{base}/hooks", "sign": {"secret": SECRET},
                                          "retry": ["0s"] * 3}})])  # fmt: skip
        ingest(box, 1)
        assert dispatch(box) == {"delivered": 1}
        ingest(box, 2)
        assert dispatch(box) == {"dead": 1}
    assert len(receiver.requests) == 2
    assert [(f.status, f.last_status) for f in box.forwards()] == [
        (ForwardStatus.DELIVERED, 200), (ForwardStatus.DEAD, 410),
    ]  # fmt: skip


def test_a_python_destination_is_called_outside_the_store(make_box: BoxFactory) -> None:
    box = make_box([keyed({"local": {"kind": "python", "call": "forward_sink:take",
                                     "retry": ["0s", "0s"]}})])  # fmt: skip
    forward_sink.received.clear()
    ingest(box, 3)
    [first, *_] = box.feed("payments").entries
    forward_sink.fail_first.add(first.idempotency_key)
    assert dispatch(box) == {"delivered": 3, "retry": 1}
    assert sorted(e["record_id"] for e in forward_sink.received) == [1, 2, 3]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.fail(MISSING)
    server = RedisServer.start(Path(tmp_path_factory.mktemp("redis")))
    try:
        yield server
    finally:
        server.stop()


def test_a_stream_gets_each_revision_once_however_often_it_is_sent(
    make_box: BoxFactory, redis_server: RedisServer
) -> None:
    stream = f"payments-{time.monotonic_ns()}"
    box = make_box([keyed({"audit": {"kind": "redis-stream", "url": redis_server.url,
                                     "stream": stream}})])  # fmt: skip
    ingest(box, 3)
    claims = box.claim_forwards("audit", "d1", 10)
    import asyncio

    async def send_twice() -> list[Any]:
        sender = StreamSender(box.destination("audit"))
        try:
            return [await sender.send(c) for c in [*claims, *claims]]
        finally:
            await sender.close()

    sent = asyncio.run(send_twice())
    assert [s.answer for s in sent[:3]] == [s.answer for s in sent[3:]]  # the same entry
    client = redis_server.client()
    try:
        entries = client.xrange(stream)
        assert len(entries) == 3
        keys = [fields[b"idempotency_key"].decode() for _, fields in entries]
        assert keys == [c.key for c in claims]
        assert [fields[b"body"] for _, fields in entries] == [c.body for c in claims]
    finally:
        client.close()
    box.settle_forwards("audit", sent[:3], "d1")
    ingest(box, 4)  # one more
    assert dispatch(box) == {"delivered": 1}
    client = redis_server.client()
    try:
        assert client.xlen(stream) == 4
    finally:
        client.close()


@contextlib.contextmanager
def trickling(answer: bytes, gap: float) -> Iterator[str]:
    """A receiver that reads a request and answers it a byte every ``gap`` seconds, until
    its answer is out or the client hangs up; yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    hung_up = threading.Event()

    def answer_slowly() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in answer:
                if hung_up.wait(gap):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=answer_slowly, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks"
    finally:
        hung_up.set()
        thread.join(10)
        listener.close()


def test_an_answer_trickling_in_past_the_timeout_is_a_timed_out_attempt(
    make_box: BoxFactory,
) -> None:
    # `timeout` is how long one attempt may take (docs/forwarding.md), and a claim's lease
    # (twice it, plus 10 s) is sized to outlast it. A receiver that answers a byte at a
    # time, each within the timeout, kept the attempt out for as long as it liked: past
    # the lease, when another dispatcher claims and sends the forward again.
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    with trickling(answer, gap=0.05) as url:  # about 3 s in all, against a 0.5 s timeout
        box = make_box([keyed({"ledger": {"url": url, "timeout": "0.5s",
                                          "retry": ["0s", "1h"]}})])  # fmt: skip
        ingest(box, 1)
        assert dispatch(box) == {"retry": 1}
    [forward] = box.forwards()
    assert forward.status is ForwardStatus.FAILED
    assert forward.last_error == "timed out after 0.5s"


def test_python_calls_that_hang_hold_up_neither_the_store_nor_other_destinations(
    make_box: BoxFactory,
) -> None:
    # A call past its `timeout` is reported failed while its thread may run on. The calls
    # ran on asyncio's default executor, min(32, CPUs + 4) threads, which the dispatcher's
    # own claims and settles share: once that many calls hung, nothing more was claimed
    # or settled, for any destination, until they returned.
    receiver = Receiver()
    forward_sink.released.clear()
    finished = threading.Event()
    outcomes: dict[str, int] = {}
    with serving(receiver.app) as base:
        box = make_box([keyed({
            "stuck": {"kind": "python", "call": "forward_sink:stall", "timeout": "0.2s",
                      "max_in_flight": 64, "retry": ["0s", "1h"]},
            "ledger": {"url": f"{base}/hooks", "sign": {"secret": SECRET}},
        })])  # fmt: skip
        ingest(box, 40)  # more calls than the default executor has threads, on any machine

        def run() -> None:
            outcomes.update(dispatch(box))
            finished.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            finished.wait(60)  # generous: a busy machine, never a wait on a fixed store
            settled_while_hung = finished.is_set()
        finally:
            forward_sink.released.set()
            thread.join(60)
    assert settled_while_hung
    assert outcomes == {"retry": 40, "delivered": 40}
    assert len(receiver.requests) == 40
    stuck = box.forwards(ForwardFilter("stuck"))
    assert {(f.status, f.last_error) for f in stuck} == {
        (ForwardStatus.FAILED, "timed out after 0.2s")
    }
