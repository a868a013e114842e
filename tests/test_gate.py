"""The gate looks each request's credential up once (issue 20, item 5).

A bearer token, a signing token, a webhook sender's signature or a console session: each
request is looked up in the store at most once, and that one value is what the route, the
scope check, the group commit and the metrics filter use. Counted here by wrapping
``Oncebox.authenticate`` and the store's two credential reads (a token by its secret's
hash, a session with its token); the group commit's re-check of revocation, once per
turn for the tokens in it, is counted apart.

The figures, before and after: ``pytest -s tests/test_gate.py -k once`` (the imports of
the gate's own names are inside the tests that need them, so that this one also runs
against an older tree).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import httpx
import pytest
from fastapi.routing import APIRoute

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import InboxSpec, Oncebox
from oncebox.engine import tokens
from oncebox.engine.sessions import Sessions
from oncebox.formats.ussd_h1 import make_frame
from oncebox.formats.webhooks import sign_github
from oncebox.store.sqltx.leases import TokensSql
from oncebox.surfaces.http import create_app
from openapidoc import openapi_document

GH_SECRET = "It's a Secret to Everybody"
HOOKS = (
    *INBOXES,
    InboxSpec("gh", codec="keyed", webhook={"scheme": "github", "secret": GH_SECRET}),
)
DELIVERIES = "/v1/inboxes/ussd/deliveries"
NO_INBOX = "/v1/inboxes/no/deliveries"


class Counted:
    """Credential lookups, by what made them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        for owner, name, label in (
            (Oncebox, "authenticate", "authenticate"),
            (TokensSql, "token_by_hash", "token reads"),
            (TokensSql, "session_token", "session reads"),
        ):
            monkeypatch.setattr(owner, name, self._counting(getattr(owner, name), label))

    def _counting(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            # Counted once the lookup has read the store, so that a test waiting for it
            # knows the read is over (counted before it, a revocation made at once could
            # land first, under load).
            found = original(*args, **kwargs)
            with self._lock:
                self.seen[label] += 1
            return found

        return counted

    def during(self, request: Callable[[], httpx.Response], status: int) -> dict[str, int]:
        """What one request looked up (its answer checked)."""
        with self._lock:
            self.seen.clear()
        response = request()
        assert response.status_code == status, response.text
        with self._lock:
            return dict(self.seen)


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Oncebox]:
    opened = oncebox.open(f"sqlite:///{tmp_path / 'gate.db'}", inboxes=HOOKS)
    yield opened
    opened.close()


def frame(seq: int) -> bytes:
    return make_frame(seq, "Kakuma1", "MED", 3, 86).encode()


def signed(key: str, target: str, body: bytes, facts: dict[str, str]) -> dict[str, str]:
    stamp = str(int(time.time()))
    signature = tokens.sign(key, stamp, "POST", target, body, facts)
    return {**facts, "Oncebox-Timestamp": stamp, "Oncebox-Signature": signature}


def figures(box: Oncebox, counted: Counted, url: str) -> dict[str, dict[str, int]]:
    """The lookups of one request of each kind, each kind with its own token: its first
    request, then a second one right after it."""
    made = iter(range(1, 1000))

    def bearer(scopes: tuple[str, ...] = ("read", "write", "operator")) -> dict[str, str]:
        secret = box.create_token(f"t{next(made)}", ["*"], list(scopes)).secret
        return {"Authorization": f"Bearer {secret}"}

    found: dict[str, dict[str, int]] = {}
    with httpx.Client(base_url=url, timeout=30) as http:
        seq = iter(range(1, 1000))

        def deliver(headers: dict[str, str], path: str = DELIVERIES) -> httpx.Response:
            n = next(seq)
            return http.post(path, content=frame(n), headers={**headers, "Oncebox-Key": f"k{n}"})

        def deliver_signed(secret: str, key: str) -> httpx.Response:
            n = next(seq)
            body = frame(n)
            headers = signed(key, DELIVERIES, body, {"Oncebox-Key": f"k{n}"})
            headers["Authorization"] = f"Bearer {secret}"
            return http.post(DELIVERIES, content=body, headers=headers)

        def webhook() -> httpx.Response:
            n = next(seq)
            body = json.dumps({"n": n}).encode()
            headers = {
                "X-Hub-Signature-256": sign_github(GH_SECRET.encode(), body),
                "X-GitHub-Delivery": f"d{n}",
            }
            return http.post("/v1/inboxes/gh/deliveries", content=body, headers=headers)

        def batch(headers: dict[str, str]) -> httpx.Response:
            lines = [
                json.dumps({"frame_id": f"b{n}", "frame": frame(n).decode()})
                for n in (next(seq), next(seq))
            ]
            body = "\n".join(lines).encode()
            return http.post("/v1/inboxes/ussd/batch", content=body, headers=headers)

        signer = box.create_token("signer", ["*"], ["read", "write"], hmac=True)
        key = str(signer.token.hmac_key)
        operator = box.create_token("ops", ["*"], ["operator"]).token
        session = Sessions(box.store).open(operator)
        cookie = {"Cookie": f"oncebox_console={session}"}
        writer, batcher, unknown, reader, row, scraper = (bearer() for _ in range(6))
        kinds: list[tuple[str, Callable[[], httpx.Response], int]] = [
            ("single delivery", lambda: deliver(writer), 201),
            ("single delivery, signing token", lambda: deliver_signed(signer.secret, key), 201),
            ("single delivery, unknown inbox", lambda: deliver(unknown, NO_INBOX), 404),
            ("webhook delivery", webhook, 201),
            ("batch", lambda: batch(batcher), 200),
            ("read listing", lambda: http.get("/v1/inboxes/ussd/quarantine", headers=reader), 200),
            ("row by id", lambda: http.get("/v1/quarantine/999", headers=row), 404),
            ("metrics", lambda: http.get("/metrics", headers=scraper), 200),
            ("console page", lambda: http.get("/console", headers=cookie), 200),
            ("console, no such page", lambda: http.get("/console/nope", headers=cookie), 404),
        ]
        for name, request, status in kinds:
            found[name] = counted.during(request, status)
            found[name + " (again)"] = counted.during(request, status)
    return found


def test_each_request_looks_its_credential_up_once(
    box: Oncebox, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(monkeypatch)
    with serving(create_app(box)) as url:
        found = figures(box, counted, url)
    for name, seen in found.items():
        print(f"{name:40} {seen}")
    for name, seen in found.items():
        assert seen.get("authenticate", 0) <= 1, name
        assert seen.get("session reads", 0) <= 1, name
    for name in ("batch", "read listing", "row by id", "metrics"):
        assert found[name] == {"authenticate": 1, "token reads": 1}, name
        assert found[name + " (again)"] == found[name], name
    # A delivery: its head's lookup (none when the head check remembers the token from a
    # moment ago), then its turn's re-check of the token.
    for name in ("single delivery", "single delivery, signing token"):
        assert found[name] == {"authenticate": 1, "token reads": 2}, name
        again = found[name + " (again)"]
        assert again["token reads"] == again.get("authenticate", 0) + 1, name
    for name in ("webhook delivery", "console page", "console, no such page"):
        assert "authenticate" not in found[name] and "token reads" not in found[name], name
    assert found["console page"]["session reads"] == 1


def test_a_turn_re_checks_its_tokens_in_one_read(
    box: Oncebox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliveries decided together: each looked up at most once at its head, and each
    turn reads its token once more, whatever the number of requests in it."""
    secret = box.create_token("w", ["ussd"], ["write"]).secret
    counted = Counted(monkeypatch)
    app = create_app(box, group_wait=0.2)
    clients = 6
    barrier = threading.Barrier(clients)
    with serving(app) as url:

        def post(n: int) -> int:
            headers = {"Authorization": f"Bearer {secret}", "Oncebox-Key": f"k{n}"}
            with httpx.Client(base_url=url, timeout=30) as http:
                barrier.wait()
                return http.post(DELIVERIES, content=frame(n + 1), headers=headers).status_code

        with ThreadPoolExecutor(clients) as pool:
            assert list(pool.map(post, range(clients))) == [201] * clients
    turns = app.state.group_commit.transactions
    print(f"{clients} deliveries in {turns} turn(s): {dict(counted.seen)}")
    assert counted.seen["authenticate"] <= clients
    assert counted.seen["token reads"] == counted.seen["authenticate"] + turns


def test_a_token_revoked_while_its_body_arrives_is_refused_in_the_turn(
    box: Oncebox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head admitted the token; it is revoked before the body is complete: the turn
    that would decide the delivery refuses it, and nothing is stored."""
    secret = box.create_token("w", ["ussd"], ["write"]).secret
    counted = Counted(monkeypatch)
    body = frame(1)
    revoked = threading.Event()

    def arriving() -> Iterator[bytes]:
        yield body[:5]
        revoked.wait(30)
        yield body[5:]

    with serving(create_app(box)) as url, ThreadPoolExecutor(1) as pool:
        headers = {
            "Authorization": f"Bearer {secret}",
            "Oncebox-Key": "k1",
            "Content-Length": str(len(body)),
        }
        with httpx.Client(base_url=url, timeout=30) as http:
            answer = pool.submit(http.post, DELIVERIES, content=arriving(), headers=headers)
            deadline = time.monotonic() + 30
            while counted.seen["authenticate"] == 0:  # the head is checked
                assert time.monotonic() < deadline, "the head was never checked"
                time.sleep(0.01)
            box.revoke_token("w")
            revoked.set()
            response = answer.result()
    assert response.status_code == 401, response.text
    assert response.json()["detail"] == "unknown, revoked or expired token"
    assert counted.seen["authenticate"] == 1
    assert box.stats("ussd")["records"] == 0


def test_each_route_that_takes_a_caller_declares_what_it_needs() -> None:
    """The declaration the gate, the route and the OpenAPI document read: a route whose
    handler takes the caller declares it; one that declares nothing is public."""
    from oncebox.surfaces.http.auth import NEEDS, Caller
    from oncebox.surfaces.http.routes import ROUTERS

    public = []
    for router in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            endpoint = route.endpoint
            hints = get_type_hints(endpoint, include_extras=True).values()
            takes = any(get_origin(h) is Annotated and get_args(h)[0] is Caller for h in hints)
            assert not takes or endpoint in NEEDS, endpoint.__name__
            if endpoint not in NEEDS:
                public.append(endpoint.__name__)
    assert sorted(public) == ["healthz", "readyz"]


def test_the_openapi_security_is_the_declared_one() -> None:
    from oncebox.surfaces.http.auth import NEEDS

    doc = openapi_document()
    declared = {endpoint.__name__ for endpoint in NEEDS}
    for operations in doc["paths"].values():
        for operation in operations.values():
            secured = operation["operationId"] in declared
            assert operation["security"] == ([{"HTTPBearer": []}] if secured else [])
