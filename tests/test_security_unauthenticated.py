"""Issue 13, item 2: what an unauthenticated or slow client may cost ``oncebox serve``.

Each test runs a real ``oncebox serve`` process and talks to it over raw sockets: idle
unauthenticated uploads must not hold their bodies (measured as the server's RSS), a
head or a body that arrives too slowly is closed within its timeout, a 413 (and a
refusal from the head) closes the connection, and connections over the bound are
refused at once. Every test also has its negative control: the same probe shows the
cost (or the open connection) where it is allowed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import pytest

from helpers import event_body
from serveproc import (
    Served,
    closed_within,
    create_token,
    get,
    head,
    json_of,
    rss_bytes,
    serving,
    status_of,
)

DELIVERIES = "/v1/inboxes/listing/deliveries"
BODY = 1_048_576  # the default body bound
UPLOADS = 48


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'served.db'}"


def _upload_but_last_byte(served: Served, *headers: str, path: str = DELIVERIES) -> socket.socket:
    """A delivery head declaring BODY bytes, then all of them but the last: an idle upload."""
    sock = served.connect()
    sock.sendall(head(path, BODY, *headers))
    # Refused and closed before the body went (what should happen): the send fails.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        sock.sendall(b"x" * (BODY - 1))
    return sock


def _settled_rss(pid: int) -> int:
    """RSS once it stopped moving for a moment (the server took in what was sent)."""
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = rss_bytes(pid)
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


@pytest.mark.slow
def test_idle_unauthenticated_uploads_hold_no_bodies(tmp_path: Path) -> None:
    url = _url(tmp_path)
    secret = create_token(url)
    with serving(url, "--workers", "1", "--body-timeout", "60") as served:
        pid = served.proc.pid
        for _ in range(20):  # warm the request path, so that its first allocations are not counted
            assert get(f"{served.base}/healthz")[0] == 200
        before = _settled_rss(pid)
        sockets = [_upload_but_last_byte(served) for _ in range(UPLOADS)]
        held = _settled_rss(pid) - before
        print(f"{UPLOADS} idle unauthenticated 1 MiB uploads: server RSS +{held / 2**20:.1f} MiB")
        assert held < UPLOADS * BODY // 10
        deadline = time.monotonic() + 5
        for sock in sockets:
            closed, answer = closed_within(sock, max(deadline - time.monotonic(), 0.1))
            assert status_of(answer) == 401 and closed, answer[:200]
            sock.close()

        # Negative control: uploads that carry a live token are taken in, and the probe
        # sees their bodies held (until they complete or their body timeout ends them).
        # To the feed inbox, whose bound (1 MiB) holds them: past listing's 64 KiB only
        # a dead letter's head is kept.
        before = _settled_rss(pid)
        authed = f"Authorization: Bearer {secret}"
        feed = "/v1/inboxes/feed/deliveries"
        sockets = [_upload_but_last_byte(served, authed, path=feed) for _ in range(UPLOADS)]
        held_authed = _settled_rss(pid) - before
        print(
            f"{UPLOADS} idle authenticated 1 MiB uploads: server RSS +{held_authed / 2**20:.1f} MiB"
        )
        assert held_authed > UPLOADS * BODY // 2
        for sock in sockets:
            sock.close()


@pytest.mark.slow
def test_a_slowloris_head_is_closed_within_the_header_timeout(tmp_path: Path) -> None:
    timeout = 2.0
    with serving(_url(tmp_path), "--workers", "1", "--header-timeout", str(timeout)) as served:
        slow = served.connect()
        idle = served.connect()  # sends nothing at all
        started = time.monotonic()
        closed = False
        for byte in head(DELIVERIES, 10):  # one byte a second, as the probe did
            if time.monotonic() - started > 3 * timeout:
                break
            try:
                slow.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            closed, answer = closed_within(slow, 1.0)
            if closed:
                break
        elapsed = time.monotonic() - started
        print(f"a head sent one byte a second: closed after {elapsed:.1f} s")
        assert closed and elapsed <= 3 * timeout
        idle_closed, answer = closed_within(idle, 3 * timeout)
        assert idle_closed and status_of(answer) in (408, None)

        # Negative control: a head sent promptly on the same server is answered.
        assert get(f"{served.base}/healthz")[0] == 200


@pytest.mark.slow
def test_a_slow_body_is_closed_within_the_body_timeout(tmp_path: Path) -> None:
    url = _url(tmp_path)
    secret = create_token(url)
    timeout = 2.0
    authed = f"Authorization: Bearer {secret}"
    log = (tmp_path / "serve.err").open("wb")
    args = ("--workers", "1", "--body-timeout", str(timeout), "--log-format", "json")
    with log, serving(url, *args, stderr=log) as served:
        body = event_body("slow-1")
        sock = served.connect()
        sock.sendall(head(DELIVERIES, len(body), authed))
        started = time.monotonic()
        closed = False
        answer = b""
        for byte in body:
            if time.monotonic() - started > 3 * timeout:
                break
            try:
                sock.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            closed, answer = closed_within(sock, 1.0)
            if closed:
                break
        elapsed = time.monotonic() - started
        print(f"a body sent one byte a second: closed after {elapsed:.1f} s")
        assert closed and elapsed <= 3 * timeout
        assert status_of(answer) in (408, None)

        # Negative control: the same delivery sent at once is decided, on the same server.
        fast = served.connect()
        fast.sendall(head(DELIVERIES, len(body), authed) + body)
        _, answer = closed_within(fast, 2)
        assert status_of(answer) == 201 and json_of(answer)["verdict"] == "accepted"
    # The access log says what the client was answered: the 408 the deadline wrote, not
    # a 500 for a request whose handler never answered.
    lines = (tmp_path / "serve.err").read_text().splitlines()
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert [(e["path"], e["status"]) for e in logged if e["method"] == "POST"] == [
        (DELIVERIES, 408),
        (DELIVERIES, 201),
    ]


@pytest.mark.slow
def test_a_refusal_before_the_body_closes_the_connection(tmp_path: Path) -> None:
    url = _url(tmp_path)
    secret = create_token(url)
    authed = f"Authorization: Bearer {secret}"
    with serving(url, "--workers", "1", "--body-timeout", "60") as served:
        for headers, status in (
            ((authed,), 413),
            ((), 401),
            (("Authorization: Bearer nope",), 401),
        ):
            sock = served.connect()
            # Over the server's bound on the batch route: one delivery's body over its
            # inbox's bound is read to its end instead, to keep it as a dead letter.
            if status == 413:
                sock.sendall(head("/v1/inboxes/listing/batch", 2 * BODY, *headers))
            else:
                sock.sendall(head(DELIVERIES, BODY, *headers))
            # The client keeps sending its body slowly; the server must still hang up.
            answer = b""
            closed = False
            for _ in range(6):
                try:
                    sock.send(b"x" * 1000)
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                closed, more = closed_within(sock, 0.5)
                answer += more
                if closed:
                    break
            assert status_of(answer) == status, answer[:300]
            assert closed, f"{status}: the connection stayed open"
            sock.close()

        # Negative control: a request the server answers in full keeps its connection.
        sock = served.connect()
        sock.sendall(head("/healthz", None, method="GET"))
        closed, answer = closed_within(sock, 1.0)
        assert status_of(answer) == 200 and not closed


def _endless(served: Served, start: bytes) -> tuple[bytes, int]:
    """``start``, then one field's value without end, 64 KiB at a time (up to 32 MiB)
    until the server hangs up: what it answered, and how much was sent."""
    sock = served.connect()
    sock.sendall(start)
    answer, closed, sent = b"", False, 0
    while not closed and sent < 32 * 1024 * 1024:
        try:
            sock.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += 65536
        closed, more = closed_within(sock, 0.02)
        answer += more
    sock.close()
    return answer, sent


@pytest.mark.slow
def test_a_head_or_trailer_over_its_bound_is_refused_without_being_held(tmp_path: Path) -> None:
    """One endless header (or trailer field of a chunked body), sent as fast as the
    client likes: the parser (httptools) bounds none and keeps it until it ends, so
    within the deadline a connection could make the server hold tens of MiB. It is
    refused (431) once over 64 KiB."""
    url = _url(tmp_path)
    authed = f"Authorization: Bearer {create_token(url)}"
    args = ("--workers", "1", "--header-timeout", "60", "--body-timeout", "60")
    with serving(url, *args) as served:
        before = _settled_rss(served.proc.pid)
        header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: "
        chunked = head(DELIVERIES, None, authed, "Transfer-Encoding: chunked")
        trailer = chunked + b"3\r\nabc\r\n0\r\nX-Endless: "
        for what, start in (("header", header), ("trailer", trailer)):
            answer, sent = _endless(served, start)
            print(f"one endless {what}: closed after {sent:,} bytes sent")
            assert status_of(answer) == 431, (what, answer[:300])
            assert sent <= 1024 * 1024, what  # near its bound, not at a deadline
        assert _settled_rss(served.proc.pid) - before < 8 * 1024 * 1024

        # Negative control: a head of 48 KiB of headers is answered in full.
        headers = [f"X-Pad-{i}: {'p' * 1000}" for i in range(48)]
        sock = served.connect()
        sock.sendall(head("/healthz", None, *headers, method="GET"))
        _, answer = closed_within(sock, 2.0)
        assert status_of(answer) == 200, answer[:300]


def test_the_head_bound_is_set_by_max_head(tmp_path: Path) -> None:
    """`--max-head` moves the 431 bound: with 8 KiB, a 12 KiB head is refused and a
    6 KiB one answered."""
    with serving(_url(tmp_path), "--workers", "1", "--max-head", "8192") as served:
        for pads, status in ((12, 431), (6, 200)):
            sock = served.connect()
            headers = [f"X-Pad-{i}: {'p' * 1000}" for i in range(pads)]
            sock.sendall(head("/healthz", None, *headers, method="GET"))
            _, answer = closed_within(sock, 2.0)
            sock.close()
            assert status_of(answer) == status, (pads, answer[:300])


@pytest.mark.slow
def test_connections_over_the_bound_are_refused_at_once(tmp_path: Path) -> None:
    bound = 8
    args = ("--workers", "1", "--max-connections", str(bound), "--header-timeout", "30")
    with serving(_url(tmp_path), *args) as served:
        held = [served.connect() for _ in range(bound)]  # idle: no byte sent
        time.sleep(0.3)
        over = served.connect()
        closed, answer = closed_within(over, 2)
        assert closed, "a connection over the bound was held open"
        assert status_of(answer) in (503, None)
        over.close()

        # Negative control: the held connections are still open, and once they go, new
        # connections are served again.
        for sock in held:
            assert not closed_within(sock, 0.05)[0]
            sock.close()
        deadline = time.monotonic() + 5
        while True:
            try:
                if get(f"{served.base}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "not served after the held connections closed"
            time.sleep(0.1)


def test_serve_defaults_are_the_limits_defaults() -> None:
    """`oncebox serve` states its defaults without loading uvicorn; they must agree."""
    from oncebox.surfaces import serve
    from oncebox.surfaces.http.limits import Limits

    assert Limits() == Limits(
        serve.HEADER_TIMEOUT, serve.BODY_TIMEOUT, serve.MAX_CONNECTIONS, serve.MAX_HEAD
    )
