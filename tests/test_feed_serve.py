"""The feed and its consumers through a real ``oncebox serve``: pages, long polls and
Server-Sent Events woken by what another client (or another process) accepts, and
consumers fenced by their lease (issue 21)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import oncebox
from helpers import event_body
from serveproc import ONCEBOX, Served, serving

pytestmark = pytest.mark.slow  # a real service as a process

FEED = "/v1/inboxes/listing/feed"


@pytest.fixture
def served(shared_url: str) -> Iterator[tuple[Served, str, str]]:
    box = oncebox.open(shared_url)
    try:
        writer = box.create_token("writer", ["*"], ["write", "operator"]).secret
        other = box.create_token("ussd-reader", ["ussd"], ["read"]).secret
    finally:
        box.close()
    with serving(shared_url) as server:
        yield server, writer, other


def client(server: Served, secret: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.base, headers={"Authorization": f"Bearer {secret}"}, timeout=40
    )


def send(http: httpx.Client, n: int, **changes: object) -> None:
    answer = http.post("/v1/inboxes/listing/deliveries", content=event_body(f"n-{n}", **changes))
    assert answer.status_code in (200, 201), answer.text


def test_pages_and_a_long_poll_woken_by_another_client(
    served: tuple[Served, str, str],
) -> None:
    server, secret, _ = served
    with client(server, secret) as http:
        for n in range(1, 6):
            send(http, n)
        first = http.get(FEED, params={"limit": 3}).json()
        rest = http.get(FEED, params={"after": first["next_after"]}).json()
        ids = [e["record_id"] for e in first["entries"] + rest["entries"]]
        assert ids == [1, 2, 3, 4, 5]
        keys = {e["idempotency_key"] for e in first["entries"] + rest["entries"]}
        assert len(keys) == 5 and all(k.startswith("obx_") for k in keys)
        assert first["entries"] == http.get(FEED, params={"limit": 3}).json()["entries"]

        got: dict[str, object] = {}

        def wait() -> None:
            with client(server, secret) as reader:
                started = time.monotonic()
                got["page"] = reader.get(
                    FEED, params={"after": rest["next_after"], "wait": 20}
                ).json()
                got["took"] = time.monotonic() - started

        reader = threading.Thread(target=wait)
        reader.start()
        time.sleep(0.5)
        send(http, 6)
        reader.join(30)
        page = got["page"]
        assert isinstance(page, dict) and [e["record_id"] for e in page["entries"]] == [6]
        assert isinstance(got["took"], float) and got["took"] < 15  # woken, not timed out
        # A page of nothing waits the whole time and says where to read on from.
        empty = http.get(FEED, params={"after": page["next_after"], "wait": 0.3}).json()
        assert empty == {"entries": [], "next_after": page["next_after"]}
        for bad in ({"limit": 0}, {"after": -1}, {"wait": 31}, {"limit": 1001}):
            answer = http.get(FEED, params=bad)
            assert answer.status_code == 422, bad
        assert http.get("/v1/inboxes/nowhere/feed").status_code == 404


def test_a_long_poll_sees_what_another_process_accepted(
    served: tuple[Served, str, str], shared_url: str, tmp_path: object
) -> None:
    server, secret, _ = served
    with client(server, secret) as http:
        start = http.get(FEED).json()["next_after"]
        got: dict[str, object] = {}

        def wait() -> None:
            got["page"] = http.get(FEED, params={"after": start, "wait": 20}).json()

        reader = threading.Thread(target=wait)
        reader.start()
        time.sleep(0.5)
        subprocess.run(
            [*ONCEBOX, "--db", shared_url, "ingest", "listing", "-"],
            input=event_body("n-99") + b"\n", check=True, capture_output=True,
        )  # fmt: skip
        reader.join(30)
        page = got["page"]
        assert isinstance(page, dict)
        assert [json.loads(e["content"]["text"])["notification_id"] for e in page["entries"]] == [
            "n-99"
        ]


def _events(lines: Iterator[str], count: int) -> list[tuple[str, dict]]:
    found: list[tuple[str, dict]] = []
    ident = ""
    for line in lines:
        if line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            found.append((ident, json.loads(line[6:])))
            if len(found) == count:
                return found
    raise AssertionError(f"the stream ended after {len(found)} events")


def test_server_sent_events_go_on_and_resume_after_the_last_event_id(
    served: tuple[Served, str, str],
) -> None:
    server, secret, _ = served
    with client(server, secret) as http:
        send(http, 1)
        sse = {"Accept": "text/event-stream"}
        with http.stream("GET", FEED, headers=sse) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            [(first_id, first)] = _events(lines, 1)
            assert first["record_id"] == 1 and first_id == str(first["position"])
            send(http, 2)  # sealed while the stream is open: it comes on it
            [(second_id, second)] = _events(lines, 1)
            assert second["record_id"] == 2
        send(http, 3)
        with http.stream("GET", FEED, headers={**sse, "Last-Event-ID": first_id}) as stream:
            resumed = _events(stream.iter_lines(), 2)
        assert [e["record_id"] for _, e in resumed] == [2, 3]
        assert resumed[0][0] == second_id


def test_an_event_stream_ends_once_its_token_is_revoked(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    """A stream is one request that goes on for as long as the client likes: revoking
    its token (the way to cut off a leaked one) must end it, not leave it handing on
    every record accepted from then on."""
    server, writer, _ = served
    box = oncebox.open(shared_url)
    try:
        follower = box.create_token("follower", ["listing"], ["read"]).secret
        with client(server, writer) as http, client(server, follower) as reader:
            send(http, 1)
            sse = {"Accept": "text/event-stream"}
            with reader.stream("GET", FEED, headers=sse) as stream:
                lines = stream.iter_lines()
                [(_, first)] = _events(lines, 1)
                assert first["record_id"] == 1
                box.revoke_token("follower", "test")
                send(http, 2)  # accepted after the revocation: not the follower's to see
                for line in lines:  # until the stream ends, as it must
                    assert not line.startswith("data: "), f"sent once revoked: {line}"
            refused = reader.get(FEED)
            assert refused.status_code == 401  # and a new request is refused, as ever
    finally:
        box.close()


def test_a_long_poll_whose_token_is_revoked_meanwhile_hands_over_nothing(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    """A long poll (feed page or consumer `next`) was admitted when it began; a record
    accepted after its token's revocation must not reach it when it wakes: 401."""
    server, writer, _ = served
    box = oncebox.open(shared_url)
    try:
        secrets = {
            name: box.create_token(name, ["listing"], scopes).secret
            for name, scopes in [
                ("poller", ["read"]),
                ("consumer", ["read", "write"]),  # its lease is a write
                ("kept", ["read"]),
            ]
        }
        with client(server, writer) as http:
            send(http, 1)
            start = http.get(FEED).json()["next_after"]
            http.put("/v1/consumers/tail", json={"inbox": "listing", "start": "end"})
            with client(server, secrets["consumer"]) as leaser:
                token = leaser.post("/v1/consumers/tail/lease", json={"holder": "c"}).json()
            polls = {
                "poller": (FEED, {"after": start, "wait": 20}),
                "consumer": ("/v1/consumers/tail/next", {"token": token["token"], "wait": 20}),
                "kept": (FEED, {"after": start, "wait": 20}),  # the control: not revoked
            }
            got: dict[str, httpx.Response] = {}

            def poll(name: str) -> None:
                path, params = polls[name]
                with client(server, secrets[name]) as reader:
                    got[name] = reader.get(path, params=params)

            readers = [threading.Thread(target=poll, args=(name,)) for name in polls]
            for reader in readers:
                reader.start()
            time.sleep(1.0)  # every poll is waiting
            box.revoke_token("poller", "test")
            box.revoke_token("consumer", "test")
            send(http, 2)  # accepted after the revocations
            for reader in readers:
                reader.join(30)
        for name in ("poller", "consumer"):
            assert got[name].status_code == 401, (name, got[name].text)
            assert "n-2" not in got[name].text
        kept = got["kept"].json()
        assert got["kept"].status_code == 200 and [e["record_id"] for e in kept["entries"]] == [2]
    finally:
        box.close()


def test_a_consumer_over_http_is_fenced_by_its_lease(served: tuple[Served, str, str]) -> None:
    server, secret, ussd_only = served
    with client(server, secret) as http, client(server, ussd_only) as stranger:
        for n in range(1, 5):
            send(http, n)
        made = http.put("/v1/consumers/ledger", json={"inbox": "listing"})
        assert made.status_code == 201 and made.json()["position"] == 0
        again = http.put("/v1/consumers/ledger", json={"inbox": "listing", "start": "end"})
        assert again.status_code == 200 and again.json()["position"] == 0  # left as it was
        clash = http.put("/v1/consumers/ledger", json={"inbox": "ussd"})
        assert clash.status_code == 409
        assert (
            http.put("/v1/consumers/x", json={"inbox": "listing", "start": -1}).status_code == 422
        )

        lease = http.post("/v1/consumers/ledger/lease", json={"holder": "a", "ttl": 60}).json()
        token = lease["token"]
        taken = http.post("/v1/consumers/ledger/lease", json={"holder": "b"})
        assert taken.status_code == 409  # a's lease is live

        page = http.get("/v1/consumers/ledger/next", params={"token": token, "limit": 2}).json()
        assert [e["record_id"] for e in page["entries"]] == [1, 2]
        past = http.post("/v1/consumers/ledger/ack", json={"token": token, "position": 10**6})
        assert past.status_code == 422 and "past" in past.json()["detail"]
        acked = http.post(
            "/v1/consumers/ledger/ack", json={"token": token, "position": page["next_after"]}
        )
        assert acked.status_code == 200 and acked.json()["position"] == page["next_after"]

        listed = http.get("/v1/consumers").json()["consumers"]
        [ledger] = [c for c in listed if c["name"] == "ledger"]
        assert ledger["holder"] == "a" and ledger["lag_entries"] == 2
        assert ledger["inbox"] == "listing"
        metrics = http.get("/metrics").text
        assert 'oncebox_consumer_lag_entries{consumer="ledger",inbox="listing"} 2.0' in metrics
        assert 'oncebox_consumer_lag_seconds{consumer="ledger",inbox="listing"}' in metrics
        samples = [x for x in stranger.get("/metrics").text.splitlines() if x[:1] != "#"]
        assert not [x for x in samples if x.startswith("oncebox_consumer_lag")]

        # a takes its lease again: the old token is stale, it moves nothing any more.
        renewed = http.post("/v1/consumers/ledger/lease", json={"holder": "a"}).json()
        assert renewed["token"] > token
        stale = http.post("/v1/consumers/ledger/ack", json={"token": token, "position": 1})
        assert stale.status_code == 409 and stale.json()["reason"] == "stale_token"
        late = http.get("/v1/consumers/ledger/next", params={"token": token})
        assert late.status_code == 409
        rest = http.get("/v1/consumers/ledger/next", params={"token": renewed["token"]}).json()
        assert [e["record_id"] for e in rest["entries"]] == [3, 4]

        # A token for another inbox learns nothing of this one's consumers.
        assert stranger.get("/v1/consumers/ledger").status_code == 404
        assert stranger.get("/v1/consumers").json() == {"consumers": []}
        # (and, holding only read, may make no consumer at all)
        assert stranger.put("/v1/consumers/mine", json={"inbox": "listing"}).status_code == 403
        assert stranger.get(FEED).status_code in (403, 404)
        assert http.get("/v1/consumers/nobody").status_code == 404

        assert http.delete("/v1/consumers/ledger").status_code == 204
        assert http.get("/v1/consumers/ledger").status_code == 404
