"""Issue 13, item 3: a line that cannot be read is that line's dead letter; the rest of its
batch is still decided, for every codec and every surface.

Before the fix the NDJSON adapter read envelopes with ``json.loads``: a line of 100,000
``[`` raised RecursionError out of the batch (HTTP 500, ``oncebox ingest`` exit 70, the
Redis consumer stopped), so none of the batch's valid lines was ever decided and a retry
could never succeed. A lone surrogate escape in a key or fact raised UnicodeEncodeError
in the store, and on PostgreSQL a ``\\u0000`` in one failed the batch the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oncebox
from conftest import INBOXES, BoxFactory
from helpers import event_body
from httpserver import serving
from oncebox import Delivery, InboxSpec, Oncebox
from oncebox.domain import Decision, Verdict
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.consume import StreamConsumer, delivery_from_entry
from oncebox.surfaces.http import create_app
from oncebox.surfaces.lines import delivery_from_line
from redisserver import RedisServer
from test_consume import client, redis_server, stream  # noqa: F401 (fixtures)
from test_security_line_facts import TOKEN_MAX, fact_envelopes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))
import _fuzz_targets as targets

KEYED = InboxSpec("keyed", codec="keyed")
ALL = (*INBOXES, KEYED)
CODEC = {"ussd": "ussd-h1", "listing": "json-event", "feed": "feed", "keyed": "keyed"}
FRAME = make_frame(1, "Kakuma1", "MED", 3, 86)

# Lines no codec's adapter may fail on. Each must end as a dead letter of its own.
HOSTILE = {
    "100k [": b"[" * 100_000,
    "100k {": b'{"a":' * 100_000,
    "deep but small": b"[" * 5_000 + b"]" * 5_000,
    "deep fact": b'{"frame_id":"h-1","frame":"x","body":"x","key":"h","payload":"p","snapshot_id":'
    + b"[" * 3_000
    + b"]" * 3_000
    + b"}",
    "surrogate key": b'{"frame_id":"\\ud800","frame":"x","body":"x","key":"\\ud800","payload":"p"}',
    "surrogate fact": b'{"frame_id":"h-2","frame":"x","body":"x","key":"h","payload":"p",'
    b'"device_time":"\\udfff"}',
    "NUL key": b'{"frame_id":"h\\u0000-3","frame":"x","body":"x","key":"h\\u0000","payload":"p"}',
    "NUL fact": b'{"frame_id":"h-4","frame":"x","body":"x","key":"h","payload":"p",'
    b'"snapshot_id":"S\\u0000"}',
    "duplicate member": b'{"frame_id":"h-5","frame_id":"h-6","frame":"x","body":"x","body":"y",'
    b'"key":"h","key":"i","payload":"p","payload":"q"}',
}


def valid_line(inbox: str, n: int, token: int | None = None) -> bytes:
    if inbox == "ussd":
        frame = make_frame(n, "Kakuma1", "MED", n, 86)
        return json.dumps({"frame_id": f"rec{n}-{n}", "frame": frame}).encode()
    if inbox == "listing":
        return event_body(f"n-{n}")
    if inbox == "feed":
        row = {"payload": f"row-{n}", "snapshot_id": "S1", "lease_token": token}
        return json.dumps(row).encode()
    return json.dumps({"body": f"body-{n}", "key": f"k{n}"}).encode()


def lease(box: Oncebox, inbox: str) -> int | None:
    return box.lease("feed", "S1", 600).token if inbox == "feed" else None


def fenced(inbox: str) -> bool:
    """On the lease-fenced inbox the fence comes first (issue 19, item 8): a hostile line
    carries no readable lease, so it stores nothing, not even a dead letter, and may not
    be acked; the lines around it are decided all the same."""
    return inbox == "feed"


def assert_dead_lettered(
    box: Oncebox, inbox: str, decisions: list[Decision], line: bytes, name: str
) -> None:
    """The valid lines around the hostile one accepted; it is a dead letter of itself
    (fenced out instead, on a fenced inbox)."""
    first, hostile, last = decisions
    assert first.verdict is Verdict.ACCEPTED and last.verdict is Verdict.ACCEPTED, name
    if fenced(inbox):
        assert (hostile.verdict, hostile.reason, hostile.may_ack) == (
            Verdict.REJECTED, "stale_token", False
        ), name  # fmt: skip
        assert hostile.dead_letter_id is None and box.dead_letters(inbox) == [], name
        return
    assert hostile.verdict is Verdict.REJECTED and hostile.may_ack, (name, hostile)
    assert hostile.dead_letter_id is not None, name
    (letter,) = [d for d in box.dead_letters(inbox) if d.id == hostile.dead_letter_id]
    assert letter.length == len(line) and line.startswith(letter.head), name


# -- the adapter, through the engine, on every backend ----------------------------------------
@pytest.mark.parametrize("inbox", sorted(CODEC))
def test_a_hostile_line_is_its_own_dead_letter(make_box: BoxFactory, inbox: str) -> None:
    box = make_box(ALL)
    token = lease(box, inbox)
    for n, (name, line) in enumerate(HOSTILE.items()):
        batch = [valid_line(inbox, 3 * n + 1, token), line, valid_line(inbox, 3 * n + 2, token)]
        deliveries = [delivery_from_line(CODEC[inbox], item) for item in batch]
        decisions = box.ingest_batch(inbox, deliveries)
        assert_dead_lettered(box, inbox, decisions, line, name)


def test_keys_that_are_no_text_never_share_an_identity(make_box: BoxFactory) -> None:
    """``{"a": 1}`` and ``{"a": "1"}`` as a line's key were both read as the key
    ``{'a': '1'}``: the second message a conflict with the first. Each is unreadable."""
    box = make_box(ALL)
    lines = [b'{"body":"x","key":{"a":1}}', b'{"body":"y","key":{"a":"1"}}']
    decisions = box.ingest_batch("keyed", [delivery_from_line("keyed", x) for x in lines])
    assert [(d.verdict, d.reason) for d in decisions] == [(Verdict.REJECTED, "bad_format")] * 2
    assert box.quarantined("keyed", status=None) == []
    assert box.record("keyed", "{'a': '1'}") is None


# -- every surface ------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Oncebox, httpx.Client]]:
    box = oncebox.open(f"sqlite:///{tmp_path / 'lines.db'}", inboxes=ALL)
    secret = box.create_token("all", ["*"], ["read", "write"]).secret
    with serving(create_app(box)) as url:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            yield box, http
    box.close()


@pytest.mark.parametrize("inbox", sorted(CODEC))
def test_an_http_batch_decides_around_a_hostile_line(
    served: tuple[Oncebox, httpx.Client], inbox: str
) -> None:
    box, http = served
    token = lease(box, inbox)
    hostile = HOSTILE["100k ["]
    body = b"\n".join([valid_line(inbox, 1, token), hostile, valid_line(inbox, 2, token)])
    response = http.post(
        f"/v1/inboxes/{inbox}/batch", content=body, headers={"Content-Type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text[:300]
    verdicts = [(d["verdict"], d["may_ack"]) for d in response.json()["decisions"]]
    refused = ("rejected", not fenced(inbox))
    assert verdicts == [("accepted", True), refused, ("accepted", True)]
    # The same as a JSON array: a deep element that is balanced, so only the reader sees it.
    deep = b"[" * 50_000 + b"]" * 50_000
    elements = [valid_line(inbox, 3, token), deep, valid_line(inbox, 4, token)]
    array = b"[" + b",".join(elements) + b"]"
    response = http.post(
        f"/v1/inboxes/{inbox}/batch", content=array, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text[:300]
    verdicts = [(d["verdict"], d["may_ack"]) for d in response.json()["decisions"]]
    assert verdicts == [("accepted", True), refused, ("accepted", True)]


@pytest.mark.slow
@pytest.mark.parametrize("inbox", ["ussd", "feed", "keyed"])
def test_oncebox_ingest_decides_around_a_hostile_line(tmp_path: Path, inbox: str) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    config = tmp_path / "oncebox.toml"
    config.write_text(
        "".join(
            f'[inboxes.{spec.name}]\ncodec = "{spec.codec}"\n'
            + (f'apply = "{spec.apply}"\n' if spec.apply else "")
            for spec in ALL
        )
    )
    base = [sys.executable, "-m", "oncebox", "--db", db, "--config", str(config)]
    token = None
    if inbox == "feed":
        taken = subprocess.run([*base, "lease", "feed", "S1", "--ttl", "600"], capture_output=True)
        assert taken.returncode == 0, taken.stderr
        token = json.loads(taken.stdout)["token"]
    lines = [valid_line(inbox, 1, token), *HOSTILE.values(), valid_line(inbox, 2, token)]
    source = tmp_path / "lines.ndjson"
    source.write_bytes(b"\n".join(lines) + b"\n")
    done = subprocess.run([*base, "ingest", inbox, str(source)], capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]
    decisions = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(decisions) == len(lines)
    assert decisions[0]["verdict"] == decisions[-1]["verdict"] == "accepted"
    ackable = not fenced(inbox)
    assert all(d["verdict"] == "rejected" and d["may_ack"] is ackable for d in decisions[1:-1]), (
        decisions
    )


@pytest.mark.slow
@pytest.mark.parametrize("inbox", ["ussd", "feed", "keyed"])
def test_the_redis_consumer_acks_a_hostile_entry_as_a_dead_letter(
    make_box: BoxFactory,
    redis_server: RedisServer,  # noqa: F811
    client: redis.Redis,  # noqa: F811
    stream: str,  # noqa: F811
    inbox: str,
) -> None:
    box = make_box(ALL)
    token = lease(box, inbox)
    client.xadd(stream, {"line": valid_line(inbox, 1, token)})
    for line in HOSTILE.values():
        client.xadd(stream, {"line": line})
    client.xadd(stream, {"body": b"x", "key": b"k\x00", "snapshot_id": b"S\x00"})
    client.xadd(stream, {"line": valid_line(inbox, 2, token)})
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", inbox, batch=50)
    summary = consumer.run_once()
    consumer.close()
    hostile = len(HOSTILE) + 1
    assert summary.entries == hostile + 2
    assert summary.verdicts == {"accepted": 2, "rejected": hostile}, summary.to_dict()
    if fenced(inbox):  # fenced out, as any entry without the lease: pending, nothing kept
        assert (summary.acked, summary.left_pending) == (2, hostile)
        assert box.dead_letters(inbox) == []
        return
    assert (summary.acked, summary.left_pending) == (hostile + 2, 0)
    assert len(box.dead_letters(inbox)) == hostile


def test_a_malformed_entry_is_a_dead_letter_whatever_the_codec(make_box: BoxFactory) -> None:
    box = make_box(ALL)
    for inbox, codec in CODEC.items():
        entries = [
            {b"frame": b"H1|x"},
            {b"body": b"x", b"key": b"\xff"},
            {b"body": b"x", b"lease_token": b"seven"},
            {b"body": b"x", b"key": b"k\x00"},
        ]
        for n, fields in enumerate(entries):
            delivery = delivery_from_entry(codec, f"7-{n}", fields)
            decision = box.ingest_batch(inbox, [delivery])[0]
            assert decision.verdict is Verdict.REJECTED, (inbox, fields)
            # Fenced out on the fenced inbox (no lease can be read): nothing kept.
            assert decision.may_ack is not fenced(inbox), (inbox, fields)
            assert (decision.dead_letter_id is None) is fenced(inbox)


# -- properties ------------------------------------------------------------------------------------
def storable(text: str | None) -> bool:
    """Text every store holds: UTF-8 without lone surrogates, and no NUL (PostgreSQL)."""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def json_values() -> st.SearchStrategy[object]:
    texts = st.text() | st.sampled_from(["\ud800", "a\udfff", "\x00", "S\x00"])
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts
    return st.recursive(
        scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=8
    )


names = st.sampled_from(
    ["frame", "frame_id", "payload", "payload_b64", "body", "body_b64", "key", "snapshot_id",
     "device_time", "delivery_id", "lease_token", "x"]
)  # fmt: skip
envelopes = st.dictionaries(names, json_values(), max_size=6).map(
    lambda d: json.dumps(d, allow_nan=True).encode()
)
# Random members seldom make an envelope a codec reads, so they seldom reach the key, fact
# and token checks: the fact envelopes always do, with values at the bounds.
lines = (
    st.binary(max_size=300)
    | envelopes
    | fact_envelopes().map(lambda d: json.dumps(d).encode())
    | st.integers(1, 3_000).map(lambda n: b"[" * n)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from([*sorted(CODEC.values()), "custom"]), line=lines)
def test_the_line_adapter_is_total_and_gives_storable_facts(codec: str, line: bytes) -> None:
    delivery = delivery_from_line(codec, line)
    assert isinstance(delivery, Delivery)
    for text in (delivery.key, delivery.snapshot_id, delivery.device_time, delivery.delivery_id):
        assert storable(text)
    for number in (delivery.lease_token, delivery.dead_letter):
        assert number is None or (type(number) is int and 0 <= number <= TOKEN_MAX)


@pytest.fixture(scope="module")
def memory_box() -> Iterator[Oncebox]:
    box = oncebox.open("sqlite:///:memory:", inboxes=ALL)
    yield box
    box.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(inbox=st.sampled_from(sorted(CODEC)), line=lines)
def test_any_line_gets_a_decision_that_may_be_acked_or_is_fenced(
    memory_box: Oncebox, inbox: str, line: bytes
) -> None:
    decision = memory_box.ingest_batch(inbox, [delivery_from_line(CODEC[inbox], line)])[0]
    fenced = decision.reason in ("stale_token", "expired_lease")
    assert decision.may_ack or fenced


# -- the fuzz target and its negative control ------------------------------------------------------
@pytest.mark.slow
def test_a_bounded_line_fuzz_run_finds_nothing() -> None:
    stats = targets.mutation_fuzz("ndjson-lines", 3_000, seed=11)
    assert (stats.crashes, stats.hangs) == (0, 0), stats.first_crash or stats.first_hang
    assert stats.outcomes["accepted"] > 0 and stats.outcomes["unreadable"] > 0


def old_adapter(codec: str, line: bytes) -> Delivery:
    """The adapter before issue 13 (standard json.loads, facts taken as they came)."""
    line = line.rstrip(b"\r\n")
    if codec == "json-event":
        return Delivery(body=line)
    body_field, key_field = {"ussd-h1": ("frame", "frame_id"), "feed": ("payload", None)}.get(
        codec, ("body", "key")
    )
    try:
        envelope = json.loads(line)
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict) or not isinstance(envelope.get(body_field), str):
        return Delivery(body=line)
    key = envelope.get(key_field or "key")
    return Delivery(
        body=envelope[body_field].encode("utf-8", "surrogatepass"),
        key=str(key) if key is not None else None,
        snapshot_id=envelope.get("snapshot_id"),
    )


@pytest.mark.slow
def test_the_line_fuzzer_catches_the_old_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the fuzz target finds the recursion and the unstorable facts."""
    monkeypatch.setattr(targets, "delivery_from_line", old_adapter)
    stats = targets.mutation_fuzz("ndjson-lines", 3_000, seed=11)
    kinds = " ".join(stats.crash_kinds)
    assert "RecursionError" in kinds and "OracleFailure" in kinds, kinds
