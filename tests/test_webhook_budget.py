"""Made-up webhook headers cost no memory (issue 19, item 2), on a real ``oncebox serve``.

A request that carries a webhook's headers is refused from its head for everything its
head can be refused for (a malformed header, a signed time out of the window, a second
upload of a message id still arriving), and its body is then held only within the
worker's budget of unverified bytes (``--unverified-budget``): past it, 503 with
Retry-After, before any of its body is read. The signature is computed as the body
arrives, and the budget is given back when the upload ends, however it ends.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncebox.formats.webhooks import sign_github
from serveproc import Served, closed_within, head, json_of, rss_bytes, serving, status_of

pytestmark = pytest.mark.slow  # oncebox serve as a process, flooded with uploads

SECRET = "It's a Secret to Everybody"
CONFIG = f"""
[inboxes.gh]
codec = "keyed"
webhook = {{ scheme = "github", secret = "{SECRET}" }}

[inboxes.sw]
codec = "keyed"
webhook = {{ scheme = "standard-webhooks", secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }}
"""
PATH = "/v1/inboxes/gh/deliveries"
BODY = 1_048_576
UPLOADS = 48
BUDGET = 4 * BODY


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    config = tmp_path / "oncebox.toml"
    config.write_text(CONFIG)
    url = f"sqlite:///{tmp_path / 'budget.db'}"
    options = ["--workers", "1", "--body-timeout", "60", "--unverified-budget", str(BUDGET)]
    with serving(url, *options, env={"ONCEBOX_CONFIG": str(config)}) as server:
        yield server


def made_up(delivery: str, path: str = PATH) -> bytes:
    """The head of an upload that claims to come from GitHub: a signature of zeros."""
    return head(path, BODY, f"X-Hub-Signature-256: sha256={'0' * 64}",
                f"X-GitHub-Delivery: {delivery}")  # fmt: skip


def idle_upload(served: Served, start: bytes) -> socket.socket:
    """``start``, then all of a 1 MiB body but its last byte; then nothing."""
    sock = served.connect()
    sock.sendall(start)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        sock.sendall(b"x" * (BODY - 1))
    return sock


def settled_rss(pid: int) -> int:
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = rss_bytes(pid)
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


def deliver(served: Served, body: bytes, delivery: str) -> int:
    """A real GitHub delivery of ``body``: its status."""
    sock = served.connect(timeout=30)
    try:
        signature = sign_github(SECRET.encode(), body)
        headers = (f"X-Hub-Signature-256: {signature}", f"X-GitHub-Delivery: {delivery}")
        sock.sendall(head(PATH, len(body), *headers) + body)
        _, answer = closed_within(sock, 10)
        status = status_of(answer)
        assert status is not None, answer[:200]
        return status
    finally:
        sock.close()


def test_idle_uploads_with_made_up_signatures_are_held_within_the_budget(served: Served) -> None:
    pid = served.proc.pid
    assert deliver(served, b"warm", "warm-up") == 201
    before = settled_rss(pid)
    sockets = [idle_upload(served, made_up(str(uuid.uuid4()))) for _ in range(UPLOADS)]
    held = settled_rss(pid) - before
    busy = 0
    for sock in sockets:
        closed, answer = closed_within(sock, 0.2)
        if status_of(answer) == 503:
            assert closed and b"\r\nretry-after: " in answer.lower(), answer[:300]
            busy += 1
    # The budget holds four bodies of 1 MiB; every other upload was refused from its head.
    assert busy == UPLOADS - BUDGET // BODY
    assert held < UPLOADS * BODY // 4, f"+{held / 2**20:.1f} MiB"
    # A real delivery meanwhile finds no room either: the budget is this worker's.
    assert deliver(served, b"x" * 100, "while-full") == 503
    for sock in sockets:
        sock.close()
    # Once the uploads end, their room is given back: a real delivery is taken again.
    deadline = time.monotonic() + 30
    while (status := deliver(served, b"y" * BODY, "after")) == 503:
        assert time.monotonic() < deadline, "the budget was not given back"
        time.sleep(0.2)
    assert status == 201


def test_a_forged_upload_under_a_real_message_id_does_not_hold_the_real_one_off(
    served: Served,
) -> None:
    """A stranger who knows or guesses a message id (GitHub signs no delivery id) sends
    a slow upload with a made-up signature under it: the sender's own upload of that
    message, with its real signature, is taken meanwhile, not answered 503 (which
    GitHub never retries)."""
    forged = idle_upload(served, made_up("known-delivery"))
    try:
        closed, answer = closed_within(forged, 0.5)
        assert not closed and status_of(answer) is None, answer[:300]  # being received
        assert deliver(served, b"the real one", "known-delivery") == 201
    finally:
        forged.close()


def test_a_head_that_can_be_refused_is_refused_before_its_body(served: Served) -> None:
    stale = int(time.time()) - 3600
    cases = [
        (made_up("d-1").replace(b"sha256=" + b"0" * 64, b"sha256=" + b"A" * 64),
         "bad_signature_header"),
        (head("/v1/inboxes/sw/deliveries", BODY, "webhook-id: msg_1",
              f"webhook-timestamp: {stale}", "webhook-signature: v1,AAAA"), "stale_signature"),
        (head("/v1/inboxes/sw/deliveries", BODY, "webhook-id: msg.1",
              f"webhook-timestamp: {int(time.time())}", "webhook-signature: v1,AAAA"),
         "bad_signature_header"),
    ]  # fmt: skip
    for start, reason in cases:
        sock = served.connect()
        sock.sendall(start)
        closed, answer = closed_within(sock, 5)  # no byte of the body sent
        assert status_of(answer) == 401 and closed, answer[:300]
        assert json_of(answer)["reason"] == reason
        sock.close()


def test_a_second_upload_of_a_message_still_arriving_is_refused(served: Served) -> None:
    uploads = [idle_upload(served, made_up("same-delivery")) for _ in range(2)]
    answers = [closed_within(sock, 3) for sock in uploads]
    # One of the two is being received (whichever head came first); the other is refused.
    assert sorted(status_of(answer) or 0 for _, answer in answers) == [0, 503], answers
    for sock in uploads:
        sock.close()
    # Once it has gone, the message may come again.
    deadline = time.monotonic() + 30
    while (status := deliver(served, b"z", "same-delivery")) == 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert status == 201
