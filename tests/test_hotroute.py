"""The one-delivery route's fast path answers exactly as the framework's router did.

:class:`~oncebox.surfaces.http.hotroute.HotRoute` calls the delivery handler straight
from the middleware once the gate matched its route. The same requests go to two apps
on two fresh stores, one with it and one without (the general path), and every answer
must be the same bytes: status, headers and body, for each verdict, each refusal and
each way a request can miss the fast path; and the latency metric must count the same
routes and statuses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from starlette.datastructures import Headers

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import InboxSpec, Oncebox
from oncebox.engine import tokens
from oncebox.formats.ussd_h1 import make_frame
from oncebox.formats.webhooks import sign_github
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.hotroute import HotRoute
from oncebox.surfaces.http.routes.deliveries import HEADERS, ours

GH_SECRET = "It's a Secret to Everybody"
SPECS = (
    *INBOXES,
    InboxSpec("keyed", codec="keyed"),
    InboxSpec("gh", codec="keyed", webhook={"scheme": "github", "secret": GH_SECRET}),
)
USSD = "/v1/inboxes/ussd/deliveries"
LISTING = "/v1/inboxes/listing/deliveries"
Send = Callable[[str, str, bytes, dict[str, str]], httpx.Response]


def frame(seq: int, need: str = "MED") -> bytes:
    return make_frame(seq, "Kakuma1", need, 3, 86).encode()


def event(n: int) -> bytes:
    return json.dumps(
        {"source": "sp-api", "stream": "s", "id": f"e{n}", "seq": n, "data": {"n": n}}
    ).encode()


def conversation(box: Oncebox, send: Send) -> list[tuple[str, httpx.Response]]:
    """The same requests, in the same order, against one app."""
    writer = box.create_token("writer", ["*"], ["read", "write"]).secret
    reader = box.create_token("reader", ["*"], ["read"]).secret
    only_feed = box.create_token("feed", ["feed"], ["write"]).secret
    signer = box.create_token("signer", ["*"], ["write"], hmac=True)
    bearer = {"Authorization": f"Bearer {writer}"}

    def keyed(n: int, headers: dict[str, str] | None = None) -> dict[str, str]:
        return {**(bearer if headers is None else headers), "Oncebox-Key": f"k{n}"}

    too_big = b"x" * ((box.inbox("listing").codec.max_bytes or 1 << 20) + 1)

    def signed(body: bytes, facts: dict[str, str]) -> dict[str, str]:
        stamp = str(int(time.time()))
        key = str(signer.token.hmac_key)
        signature = tokens.sign(key, stamp, "POST", USSD, body, facts)
        return {
            **facts,
            "Authorization": f"Bearer {signer.secret}",
            "Oncebox-Timestamp": stamp,
            "Oncebox-Signature": signature,
        }

    def hook(n: int, body: bytes, good: bool = True) -> dict[str, str]:
        secret = GH_SECRET.encode() if good else b"wrong"
        return {"X-Hub-Signature-256": sign_github(secret, body), "X-GitHub-Delivery": f"d{n}"}

    once = signed(frame(7), {"Oncebox-Key": "k7"})  # sent twice: the second time a replay
    cases: list[tuple[str, str, str, bytes, dict[str, str]]] = [
        ("accepted", "POST", USSD, frame(1), keyed(1)),
        ("duplicate", "POST", USSD, frame(1), keyed(1)),
        ("conflict", "POST", USSD, frame(1, "SHE"), keyed(1)),
        ("invalid", "POST", USSD, b"H1|not a frame", keyed(2)),
        ("no key", "POST", USSD, frame(1), bearer),
        (
            "json event, fields missing",
            "POST",
            LISTING,
            event(1),
            {**bearer, "Oncebox-Device-Time": "t"},
        ),
        ("json invalid", "POST", LISTING, b"{not json", bearer),
        ("too large", "POST", LISTING, too_big, bearer),
        ("headers", "POST", USSD, frame(2), keyed(3, {**bearer, "Oncebox-Snapshot": "s1"})),
        (
            "bad lease token",
            "POST",
            USSD,
            frame(3),
            keyed(4, {**bearer, "Oncebox-Lease-Token": "-1"}),
        ),
        (
            "stale lease token",
            "POST",
            USSD,
            frame(4),
            keyed(5, {**bearer, "Oncebox-Lease-Token": "7"}),
        ),
        ("missing key", "POST", "/v1/inboxes/keyed/deliveries", b"{}", bearer),
        ("keyed", "POST", "/v1/inboxes/keyed/deliveries", b"{}", {**bearer, "Oncebox-Key": "k"}),
        ("unknown inbox", "POST", "/v1/inboxes/nope/deliveries", frame(5), bearer),
        ("no token", "POST", USSD, frame(6), {}),
        ("unknown token", "POST", USSD, frame(6), {"Authorization": "Bearer nope"}),
        ("read-only token", "POST", USSD, frame(6), {"Authorization": f"Bearer {reader}"}),
        ("other inbox", "POST", USSD, frame(6), {"Authorization": f"Bearer {only_feed}"}),
        ("empty body", "POST", USSD, b"", bearer),
        ("signing token", "POST", USSD, frame(7), once),
        ("replayed signature", "POST", USSD, frame(7), once),
        ("webhook", "POST", "/v1/inboxes/gh/deliveries", b'{"n":1}', hook(1, b'{"n":1}')),
        (
            "webhook, bad signature",
            "POST",
            "/v1/inboxes/gh/deliveries",
            b'{"n":2}',
            hook(2, b'{"n":2}', good=False),
        ),
        ("trailing slash", "POST", USSD + "/", frame(8), bearer),
        ("GET", "GET", USSD, b"", bearer),
        ("batch", "POST", "/v1/inboxes/listing/batch", event(9) + b"\n", bearer),
    ]
    answers = [(case[0], send(*case[1:])) for case in cases]
    metrics = send("GET", "/metrics", b"", bearer)
    answers.append(("metrics", metrics))
    return answers


def answered(box: Oncebox, app: FastAPI) -> list[tuple[str, int, list[tuple[str, str]], bytes]]:
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:

        def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
            return http.request(method, path, content=body, headers=headers)

        found = conversation(box, send)
    shown = []
    for name, response in found:
        headers = [(k, v) for k, v in response.headers.items() if k != "date"]
        content = response.content
        if name == "metrics":  # the latency series' counts, by method, route and status
            content = b"\n".join(
                line
                for line in content.splitlines()
                if line.startswith(b"oncebox_http_request_duration_seconds_count")
            )
            headers = [(k, v) for k, v in headers if k != "content-length"]
        shown.append((name, response.status_code, headers, content))
    return shown


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[tuple[Oncebox, Oncebox]]:
    hot = oncebox.open(f"sqlite:///{tmp_path / 'hot.db'}", inboxes=SPECS)
    general = oncebox.open(f"sqlite:///{tmp_path / 'general.db'}", inboxes=SPECS)
    yield hot, general
    hot.close()
    general.close()


@pytest.mark.slow
def test_the_hot_route_answers_as_the_router_did(
    boxes: tuple[Oncebox, Oncebox], monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[str] = []
    original = HotRoute._answer

    async def counted(self: HotRoute, scope: dict, receive: object, send: object) -> None:
        taken.append(scope["path"])
        await original(self, scope, receive, send)  # type: ignore[arg-type]

    monkeypatch.setattr(HotRoute, "_answer", counted)
    hot_box, general_box = boxes
    general_app = create_app(general_box)
    general_app.user_middleware = [m for m in general_app.user_middleware if m.cls is not HotRoute]
    general = answered(general_box, general_app)
    assert taken == []
    hot = answered(hot_box, create_app(hot_box))
    for (name, *before), (_, *after) in zip(general, hot, strict=True):
        assert after == before, name
    # The fast path took the delivery requests the gate matched, and nothing else.
    assert len(taken) >= 12
    assert all(path.endswith("/deliveries") for path in taken)
    statuses = {name: status for name, status, _, _ in hot}
    assert statuses == {
        **dict.fromkeys(["accepted", "headers", "stale lease token", "keyed"], 201),
        **dict.fromkeys(["signing token", "webhook"], 201),
        **dict.fromkeys(["duplicate", "conflict", "batch", "metrics"], 200),
        **dict.fromkeys(["invalid", "json event, fields missing", "json invalid"], 422),
        **dict.fromkeys(["no key", "bad lease token", "missing key", "empty body"], 400),
        **dict.fromkeys(["no token", "unknown token", "replayed signature"], 401),
        "webhook, bad signature": 401,
        **dict.fromkeys(["read-only token", "other inbox"], 403),
        "unknown inbox": 404,
        "GET": 405,
        "too large": 413,
        "trailing slash": 307,
    }


def test_the_delivery_headers_are_read_as_request_headers_reads_them() -> None:
    raw = [
        (b"oncebox-key", b"first"),
        (b"oncebox-key", b"second"),  # the first one counts
        (b"oncebox-snapshot", "s\u00e9".encode("latin-1")),
        (b"oncebox-device-time", b""),
        (b"authorization", b"Bearer x"),
        (b"x-oncebox-key", b"not ours"),
    ]
    scope = {"type": "http", "headers": raw}
    found = ours(scope)
    for name in HEADERS:
        assert found.get(name.lower().encode()) == Headers(scope=scope).get(name), name
    assert ours({"type": "http", "headers": []}) == {}
