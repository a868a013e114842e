"""A delivery over a bound is never dropped silently (issue 19, item 5).

On every surface (the library, ``oncebox ingest``, the Redis consumer, a real
``oncebox serve``'s one-delivery and batch routes) a delivery over its inbox's bound is
kept as a ``too_large`` dead letter: its first 64 KiB, its length and its SHA-256, taken
as it streamed by where the surface streams, counted by reason in ``/metrics`` and
listed in the console, while an HTTP sender still gets 413. Only an authenticated
request leaves one: a token that may write to the inbox (and does not sign its
requests), or a webhook whose signature verified over the whole body; any other stores
nothing. The HTTP batch route refuses a body over the server's bound as a whole (413,
nothing stored): a batch is not one delivery, and its sender holds a token and hears
that none of it was decided.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from clirun import oncebox_here
from conftest import INBOXES, fresh_database
from helpers import event_body
from oncebox import InboxSpec, Oncebox
from oncebox.engine.tokens import sign
from oncebox.formats import Overflow
from oncebox.formats.webhooks import sign_standard_webhooks, standard_secret
from oncebox.surfaces.lines import bounded_lines
from redisserver import MISSING, RedisServer
from serveproc import serving

KEYED = InboxSpec("queue", codec="keyed")
HEAD_KEPT = 65_536  # what a dead letter keeps of a body (formats.codec.HEAD_KEPT)
BIG = 200_000  # over json-event's 64 KiB, under the server's 1 MiB


def padded(size: int, key: str = "n-1") -> bytes:
    """A json-event of ``size`` bytes (its text padded with spaces)."""
    body = event_body(key)
    return body + b" " * (size - len(body))


def kept(box: Oncebox, inbox: str) -> list[tuple[bytes, int, str]]:
    """The too_large dead letters of an inbox: (head, length, sha256)."""
    return [(d.head, d.length, d.sha256) for d in box.dead_letters(inbox, reason="too_large")]


def letter_of(body: bytes) -> tuple[bytes, int, str]:
    return body[:HEAD_KEPT], len(body), hashlib.sha256(body).hexdigest()


# -- the library ---------------------------------------------------------------------------------
def test_the_library_keeps_a_body_over_the_bound_whole_or_streamed(make_box: Any) -> None:
    from oncebox import Oversize, read_bounded
    from oncebox.formats.codec import HEAD_KEPT as KEPT

    assert KEPT == HEAD_KEPT
    box = make_box([*INBOXES, KEYED])
    whole = padded(BIG)
    decision = box.ingest("listing", whole)
    assert (decision.verdict.value, decision.reason, decision.may_ack) == (
        "rejected",
        "too_large",
        True,
    )
    # Streamed: the rest of the body past the bound is never held.
    streamed = b"".join(bytes([65 + i % 26]) * 10_000 for i in range(30))
    chunks = (streamed[i : i + 10_000] for i in range(0, len(streamed), 10_000))
    delivery = read_bounded(chunks, box.inbox("listing").codec.max_bytes)
    assert isinstance(delivery, Oversize) and len(delivery.body) == HEAD_KEPT
    assert box.ingest("listing", delivery).reason == "too_large"
    # Within the bound, read_bounded gives the body itself.
    small = read_bounded([event_body("n-2")[:10], event_body("n-2")[10:]], 65_536)
    assert type(small) is oncebox.Delivery and box.ingest("listing", small).verdict.value == (
        "accepted"
    )
    # Over the bound comes first: a keyed delivery without its key is too_large too.
    assert box.ingest("queue", b"q" * 1_048_577).reason == "too_large"
    assert kept(box, "listing") == [letter_of(whole), letter_of(streamed)]
    assert box.stats("listing")["reasons"]["rejected:too_large"] == 2


# -- oncebox ingest ------------------------------------------------------------------------------
@pytest.mark.slow
def test_oncebox_ingest_keeps_a_line_over_its_bound_without_holding_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    huge = b"x" * (96 * 1024 * 1024)  # the line is the body for json-event: over 64 KiB
    frame = json.dumps({"frame_id": "r1-1", "frame": "H1|" + "y" * 400_000}).encode()
    source = tmp_path / "lines.ndjson"
    with source.open("wb") as out:
        out.write(event_body("n-1") + b"\n" + huge + b"\r\n" + event_body("n-2") + b"\n")
    # The peak memory of the command: well under the line, which it never holds whole.
    measure = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    )
    command = [sys.executable, "-m", "oncebox", "--db", url, "ingest", "listing", str(source)]
    ran = subprocess.run(
        [sys.executable, "-c", measure, *command], capture_output=True, timeout=300, check=True
    )
    *lines, peak = ran.stdout.decode().splitlines()
    assert [json.loads(line)["verdict"] for line in lines] == ["accepted", "rejected", "accepted"]
    assert int(peak) < len(huge), f"peak RSS {int(peak) / 2**20:.0f} MiB"
    # An envelope codec: a line longer than any envelope of a frame is kept unread.
    ussd = subprocess.run(
        [sys.executable, "-m", "oncebox", "--db", url, "ingest", "ussd", "-"],
        input=frame + b"\n",
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert json.loads(ussd.stdout)["reason"] == "too_large"
    box = oncebox.open(url)
    try:
        assert kept(box, "listing") == [letter_of(huge)]
        [letter] = box.dead_letters("ussd", reason="too_large")
        assert (letter.head, letter.length) == (frame[:HEAD_KEPT], len(frame))
        assert "over the" in letter.detail
    finally:
        box.close()


def test_a_line_going_on_past_carriage_returns_at_its_bound_is_one_line(tmp_path: Path) -> None:
    """A line read in pieces of its bound (and two) whose first piece ended in carriage
    returns just past the bound was taken as ended there: the line over the bound was
    split in two deliveries, each decided (two decision lines for one input line, two
    records from a line that is no event). It is one line over its bound; a line
    that only ends in carriage returns there is still one whole line."""
    first = padded(65_536, "n-1")  # json-event's bound exactly
    whole = first + b"\r\r" + event_body("n-2")
    source = tmp_path / "lines.ndjson"
    source.write_bytes(whole + b"\n" + event_body("n-3") + b"\n")
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    ran = oncebox_here(tmp_path, "--db", url, "ingest", "listing", str(source))
    assert ran.returncode == 0, ran.stderr
    decided = [json.loads(line) for line in ran.stdout.splitlines()]
    assert [(d["verdict"], d["reason"]) for d in decided] == [
        ("rejected", "too_large"),
        ("accepted", None),
    ]
    assert decided[1]["identity"].endswith('"n-3"]')
    box = oncebox.open(url)
    try:
        assert kept(box, "listing") == [letter_of(whole)]
    finally:
        box.close()
    # Carriage returns alone after the bound, then the newline or the end: one line.
    for ending in (b"\r\r\r\n", b"\r\r\r"):
        [line] = bounded_lines(io.BytesIO(b"abcd" + ending), 4)
        assert isinstance(line, bytes) and line.rstrip(b"\r\n") == b"abcd"


def test_a_blank_line_over_the_bound_is_skipped_as_any_blank_line(tmp_path: Path) -> None:
    """``oncebox ingest`` skips a blank line (it carries nothing): no decision line. One
    of whitespace past the bound was a ``too_large`` dead letter instead, a decision
    line more than the lines that carry deliveries."""
    source = tmp_path / "lines.ndjson"
    source.write_bytes(b" \t" * 40_000 + b"\r\n" + event_body("n-1") + b"\n\n")
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    ran = oncebox_here(tmp_path, "--db", url, "ingest", "listing", str(source))
    assert ran.returncode == 0, ran.stderr
    assert [json.loads(line)["verdict"] for line in ran.stdout.splitlines()] == ["accepted"]


@settings(max_examples=400)
@given(st.binary(max_size=40).map(lambda b: bytes(b"ab \r\n"[x % 5] for x in b)),
       st.integers(1, 6))  # fmt: skip
def test_bounded_lines_are_the_lines_as_splitting_gives_them(data: bytes, bound: int) -> None:
    """Each line as ``data.split(b"\n")`` gives it, CRs at its end aside: within the bound
    whole, over it an Overflow of all of it, blank (whitespace only) a blank line."""
    wanted: list[tuple[Any, ...]] = []
    for line in data.split(b"\n")[: -1 if data.endswith(b"\n") or not data else None]:
        text = line.rstrip(b"\r")
        if not line.strip():
            wanted.append(("blank",))
        elif len(text) <= bound:
            wanted.append(("line", text))
        else:
            wanted.append(("over", len(text), hashlib.sha256(text).hexdigest()))
    got: list[tuple[Any, ...]] = []
    for item in bounded_lines(io.BytesIO(data), bound):
        if isinstance(item, Overflow):
            got.append(("over", item.length, item.delivery().sha256))
        else:
            got.append(("line", item.rstrip(b"\r\n")) if item.strip() else ("blank",))
    assert got == wanted


# -- the Redis consumer --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if not RedisServer.available():
        pytest.fail(MISSING)
    workdir = Path(tempfile.mkdtemp(prefix="oncebox-redis-", dir="/tmp"))
    server = RedisServer.start(workdir)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.slow
def test_the_redis_consumer_keeps_and_acks_an_entry_over_the_bound(
    make_box: Any, redis_url: str
) -> None:
    from oncebox.surfaces.consume import StreamConsumer

    box = make_box()
    stream = f"big-{uuid.uuid4().hex[:8]}"
    whole = padded(BIG)
    frame = "H1|" + "z" * 500
    consumer = StreamConsumer(box, redis_url, stream, "g", "c1", "listing")
    try:
        consumer.redis.xadd(stream, {"body": whole})
        consumer.redis.xadd(stream, {"line": whole})
        summary = consumer.run_once()
        assert summary.reasons["rejected:too_large"] == 2 and summary.acked == 2
        assert consumer.pending() == 0
    finally:
        consumer.close()
    ussd = StreamConsumer(box, redis_url, stream + "-ussd", "g", "c1", "ussd")
    try:
        ussd.redis.xadd(stream + "-ussd", {"line": json.dumps({"frame_id": "a-1", "frame": frame})})
        assert ussd.run_once().reasons["rejected:too_large"] == 1
    finally:
        ussd.close()
    assert kept(box, "listing") == [letter_of(whole)] * 2
    assert kept(box, "ussd") == [letter_of(frame.encode())]


# -- a real oncebox serve ------------------------------------------------------------------------
HOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HOOK_MAX = 4096
CONFIG = f"""
[inboxes.listing]
codec = "json-event"

[inboxes.hooks]
codec = "json"
max_bytes = {HOOK_MAX}
webhook = {{ scheme = "standard-webhooks", secret = "{HOOK_SECRET}" }}
"""


def signed_hook(msg_id: str, body: bytes, secret: bytes | None = None) -> dict[str, str]:
    key = standard_secret(HOOK_SECRET) if secret is None else secret
    stamp = int(time.time())
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp),
            "webhook-signature": sign_standard_webhooks(key, msg_id, stamp, body)}  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Oncebox]]:
    databases: Iterator[str] | None = None
    if request.param == "postgres":
        databases = fresh_database(
            request.getfixturevalue("pg_server"), request.getfixturevalue("pg_template")
        )
        url = next(databases)
    else:
        url = f"sqlite:///{tmp_path / 'served.db'}"
    config = tmp_path / "oncebox.toml"
    config.write_text(CONFIG)
    box = oncebox.open(url, config=config)
    try:
        with serving(url, "--workers", "1", env={"ONCEBOX_CONFIG": str(config)}) as server:
            yield server.base, box
    finally:
        box.close()
        if databases is not None:
            next(databases, None)


@pytest.mark.slow
def test_serve_keeps_what_an_authenticated_sender_sends_over_the_bound(
    served: tuple[str, Oncebox],
) -> None:
    base, box = served
    writer = box.create_token("writer", ["*"], ["read", "write"]).secret
    signer = box.create_token("signer", ["*"], ["write"], hmac=True)
    reader = box.create_token("reader", ["*"], ["read"]).secret
    whole = padded(BIG)
    streamed = padded(3 * 1024 * 1024, "n-2")  # over the server's 1 MiB too

    def post(body: Any, headers: dict[str, str], inbox: str = "listing") -> httpx.Response:
        target = f"{base}/v1/inboxes/{inbox}/deliveries"
        return httpx.post(target, content=body, headers=headers, timeout=30)

    bearer = {"Authorization": f"Bearer {writer}"}
    for content in (whole, iter([streamed[:1_000_000], streamed[1_000_000:]])):
        answer = post(content, bearer)
        assert answer.status_code == 413, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert (answer.json()["reason"], answer.json()["may_ack"]) == ("too_large", True)
    # A webhook whose signature verified over the whole body: kept, signature and all.
    hook = b'{"pad": "' + b"h" * (2 * HOOK_MAX) + b'"}'
    answer = post(hook, signed_hook("msg_big", hook), "hooks")
    assert answer.status_code == 413 and answer.json()["identity"] == "msg_big"
    before = {name: box.stats(name)["dead_letters"] for name in ("listing", "hooks")}

    # Nothing is kept of what is not authenticated: a forged signature, a token that
    # signs its requests (its signature cannot be checked without the body), a token
    # that may only read, no token at all.
    forged = post(hook, signed_hook("msg_big2", hook, b"not the secret"), "hooks")
    assert forged.status_code == 401 and forged.json()["reason"] == "bad_signature"
    assert post(whole, {"Authorization": f"Bearer {reader}"}).status_code == 403
    assert post(whole, {}).status_code == 401
    stamp = str(int(time.time()))
    assert signer.token.hmac_key is not None
    signature = sign(signer.token.hmac_key, stamp, "POST", "/v1/inboxes/listing/deliveries", whole)
    signed = {"Authorization": f"Bearer {signer.secret}", "Oncebox-Timestamp": stamp,
              "Oncebox-Signature": signature}  # fmt: skip
    refused = post(whole, signed)
    assert refused.status_code == 413
    assert refused.headers["content-type"] == "application/problem+json"
    # The batch route: a line over its codec's bound is its own dead letter; a body over
    # the server's bound is refused as a whole, and nothing of it is stored.
    batch = f"{base}/v1/inboxes/listing/batch"
    lines = event_body("n-9") + b"\n" + whole + b"\n"
    decided = httpx.post(batch, content=lines, headers=bearer, timeout=30).json()["decisions"]
    assert [d.get("reason") for d in decided] == [None, "too_large"]
    over = httpx.post(batch, content=b"\n".join([whole] * 6), headers=bearer, timeout=30)
    assert over.status_code == 413 and over.headers["content-type"] == "application/problem+json"

    assert box.stats("hooks")["dead_letters"] == before["hooks"]
    assert box.stats("listing")["dead_letters"] == before["listing"] + 1  # the batch's line
    assert kept(box, "listing") == [letter_of(whole), letter_of(streamed), letter_of(whole)]
    [letter] = box.dead_letters("hooks", reason="too_large")
    assert (letter.head, letter.length, letter.key) == (hook, len(hook), "msg_big")
    assert json.loads(letter.signature or "{}")["scheme"] == "standard-webhooks"

    # Counted by reason in /metrics, and listed in the console with their length.
    metrics = httpx.get(f"{base}/metrics", headers=bearer, timeout=30).text
    counted = re.search(r'oncebox_rejected_total\{inbox="listing",reason="too_large"\} (\S+)',
                        metrics)  # fmt: skip
    assert counted and float(counted.group(1)) == 3
    operator = box.create_token("op", ["*"], ["read", "operator"]).secret
    with httpx.Client(base_url=base, timeout=30) as console:
        form = console.get("/console/signin")
        found = re.search(r'name="signin" value="([^"]+)"', form.text)
        assert found
        console.post("/console/signin", data={"signin": found.group(1), "token": operator})
        asked = {"inbox": "listing", "reason": "too_large"}
        page = console.get("/console/dead-letters", params=asked).text
    assert f"{len(streamed):,} (kept {HEAD_KEPT:,})" in page
