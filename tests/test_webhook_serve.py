"""Signed webhooks end to end, through a real ``oncebox serve`` on SQLite and PostgreSQL.

One served process per backend for the whole module. Each scheme in the published
formats (Standard Webhooks with several secrets for a rotation, GitHub's documented test
vector keyed by ``X-GitHub-Delivery``, Stripe with the event id as identity): a good
signature is decided like any delivery and its signature recorded; a replay inside the
tolerance is a duplicate; a missing, malformed, stale or wrong one is 401 with its reason,
and nothing at all is stored (records, duplicates, quarantine and dead letters counted).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import oncebox
from conftest import fresh_database
from oncebox import Oncebox
from oncebox.engine.views import signature_of
from oncebox.formats.webhooks import (
    sign_github,
    sign_standard_webhooks,
    sign_stripe,
    standard_secret,
)
from serveproc import free_port, serving

pytestmark = pytest.mark.slow  # oncebox serve as a process

# standard-webhooks/standard-webhooks' libraries' test secret, and a second one: the
# inbox holds both, as during a rotation.
SW_OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_NEW = "whsec_" + "bmV3IHNlY3JldCBmb3IgdGhlIHJvdGF0aW9uIQ=="
SW_STRANGER = standard_secret("whsec_c3RyYW5nZXIgc2VjcmV0IG5vdCBvdXJz")
# docs.github.com "Validating webhook deliveries": the documented test values.
GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
GH_DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
ST_SECRET = "whsec_synthetic0stripe0endpoint0secret"
HOOKS_MAX = 4096

CONFIG = f"""
[inboxes.hooks]
codec = "json"
witness_ignore = ["/attempt"]
max_bytes = {HOOKS_MAX}
webhook = {{ scheme = "standard-webhooks", secret_env = ["HOOK_OLD", "HOOK_NEW"] }}

[inboxes.gh]
codec = "keyed"
webhook = {{ scheme = "github", secret = "{GH_SECRET}" }}

[inboxes.st]
codec = "json"
webhook = {{ scheme = "stripe", secret = "{ST_SECRET}" }}

[inboxes.plain]
codec = "keyed"
"""
ENV = {"HOOK_OLD": SW_OLD, "HOOK_NEW": SW_NEW}


@dataclass
class Hooks:
    base: str
    box: Oncebox  # the test's own view of the served store
    writer: str  # a bearer token for every inbox

    def post(self, inbox: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        url = f"{self.base}/v1/inboxes/{inbox}/deliveries"
        return httpx.post(url, content=body, headers=headers, timeout=10)

    def refusals(self) -> Counter[tuple[str, str]]:
        """``oncebox_webhook_refusals_total`` by (inbox, reason), as /metrics shows it."""
        auth = {"Authorization": f"Bearer {self.writer}"}
        text = httpx.get(f"{self.base}/metrics", headers=auth, timeout=10).text
        found: Counter[tuple[str, str]] = Counter()
        for line in text.splitlines():
            if line.startswith("oncebox_webhook_refusals_total{"):
                labels, value = line.split("{", 1)[1].split("} ")
                named = dict(part.split("=") for part in labels.split(","))
                found[(named["inbox"].strip('"'), named["reason"].strip('"'))] = int(float(value))
        return found

    def stored(self) -> dict[str, Any]:
        """Everything each inbox keeps: records, duplicates, quarantine, dead letters."""
        return {name: self.box.stats(name) for name in ("hooks", "gh", "st", "plain")}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hooks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hooks]:
    where = tmp_path_factory.mktemp("webhooks")
    databases: Iterator[str] | None = None
    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        databases = fresh_database(server, request.getfixturevalue("pg_template"))
        url = next(databases)
    else:
        url = f"sqlite:///{where / 'hooks.db'}"
    config = where / "oncebox.toml"
    config.write_text(CONFIG)
    with pytest.MonkeyPatch.context() as env:
        for name, value in ENV.items():
            env.setenv(name, value)
        box = oncebox.open(url, config=config)
    writer = box.create_token("writer", ["*"], ["read", "write"]).secret
    try:
        # One worker: the refusal counters are each process's own.
        config_env = {"ONCEBOX_CONFIG": str(config), **ENV}
        with serving(url, "--workers", "1", env=config_env) as served:
            yield Hooks(served.base, box, writer)
    finally:
        box.close()
        if databases is not None:
            next(databases, None)


def standard(secret: bytes, msg_id: str, stamp: int, body: bytes) -> dict[str, str]:
    signature = sign_standard_webhooks(secret, msg_id, stamp, body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": signature}


def decided(response: httpx.Response, status: int, verdict: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    answer: dict[str, Any] = response.json()
    assert answer["verdict"] == verdict and answer["may_ack"] is True
    return answer


def test_standard_webhooks_rotation_replay_and_redelivery(hooks: Hooks) -> None:
    msg_id = "msg_" + uuid.uuid4().hex[:24]
    now = int(time.time())
    body = b'{"type": "invoice.paid", "attempt": 1, "data": {"amount": 2432232314}}'
    first = standard(standard_secret(SW_NEW), msg_id, now, body)
    stranger = standard(SW_STRANGER, msg_id, now, body)["webhook-signature"]
    # Several signatures, one of them ours: any match with any configured secret will do.
    first["webhook-signature"] = f"v1a,bm90IG91cnM= {stranger} {first['webhook-signature']}"
    answer = decided(hooks.post("hooks", body, first), 201, "accepted")
    assert answer["identity"] == msg_id
    decided(hooks.post("hooks", body, first), 200, "duplicate")  # a replay: the same request
    # The sender's retry: a new attempt, a new time, signed with the other secret.
    retry = body.replace(b'"attempt": 1', b'"attempt": 2')
    resent = standard(standard_secret(SW_OLD), msg_id, now + 1, retry)
    decided(hooks.post("hooks", retry, resent), 200, "duplicate")
    record = hooks.box.record("hooks", msg_id)
    assert record is not None and record.seen_count == 3
    assert signature_of(record) == {
        "scheme": "standard-webhooks",
        "signed_at": now,
        "key_signed": True,
    }
    assert SW_NEW.encode() not in (record.signature or "").encode()


def test_github_documented_vector_is_keyed_by_its_delivery(hooks: Hooks) -> None:
    headers = {"X-Hub-Signature-256": GH_SIGNATURE, "X-GitHub-Delivery": GH_DELIVERY}
    answer = decided(hooks.post("gh", GH_BODY, headers), 201, "accepted")
    assert answer["identity"] == GH_DELIVERY
    decided(hooks.post("gh", GH_BODY, headers), 200, "duplicate")
    # The same delivery id over other bytes, signed: first write wins, the newcomer is
    # quarantined with its signature recorded.
    other = b"Hello, World?"
    resigned = {**headers, "X-Hub-Signature-256": sign_github(GH_SECRET.encode(), other)}
    conflict = decided(hooks.post("gh", other, resigned), 200, "conflict")
    listed = httpx.get(
        f"{hooks.base}/v1/inboxes/gh/quarantine",
        headers={"Authorization": f"Bearer {hooks.writer}"},
        timeout=10,
    ).json()
    [row] = [q for q in listed if q["id"] == conflict["quarantine_id"]]
    assert row["signature"] == {"scheme": "github", "signed_at": None, "key_signed": False}
    assert row["original"]["signature"] == row["signature"]


def test_stripe_event_id_is_the_identity(hooks: Hooks) -> None:
    event = f"evt_{uuid.uuid4().hex[:24]}"
    body = json.dumps({"id": event, "object": "event", "type": "charge.succeeded"}).encode()
    now = int(time.time())
    headers = {"Stripe-Signature": sign_stripe(ST_SECRET.encode(), now, body)}
    answer = decided(hooks.post("st", body, headers), 201, "accepted")
    assert json.loads(answer["identity"]) == [event]
    decided(hooks.post("st", body, headers), 200, "duplicate")  # a replay inside 300 s
    # A signed delivery the codec refuses is a dead letter like any other, signature kept.
    broken = b'{"id": "evt_broken", "id": "evt_twice"}'
    signed = {"Stripe-Signature": sign_stripe(ST_SECRET.encode(), now, broken)}
    rejected = hooks.post("st", broken, signed)
    assert rejected.status_code == 422 and rejected.json()["reason"] == "duplicate_member"
    [letter] = hooks.box.dead_letters("st", reason="duplicate_member")
    assert signature_of(letter) == {"scheme": "stripe", "signed_at": now, "key_signed": False}


def test_a_missing_bad_or_stale_signature_is_401_and_stores_nothing(hooks: Hooks) -> None:
    now = int(time.time())
    body = b'{"type": "x", "attempt": 1}'
    bad_json = b'{"not json'  # would be a dead letter, had it been verified
    sw = standard(standard_secret(SW_NEW), "msg_refused", now, body)
    gh = {"X-Hub-Signature-256": sign_github(b"not the secret", body), "X-GitHub-Delivery": "g"}
    cases = [
        ("hooks", body, {}, "missing_signature"),  # refused from the head
        ("hooks", body, {k: v for k, v in sw.items() if k != "webhook-signature"},
         "missing_signature"),
        ("hooks", bad_json, standard(SW_STRANGER, "msg_refused", now, bad_json), "bad_signature"),
        ("hooks", body + b" ", sw, "bad_signature"),  # other bytes under the signature
        ("hooks", body, {**sw, "webhook-id": "msg_other"}, "bad_signature"),
        ("hooks", body, standard(standard_secret(SW_NEW), "m", now - 301, body), "stale_signature"),
        ("hooks", body, standard(standard_secret(SW_NEW), "m", now + 400, body), "stale_signature"),
        ("hooks", body, {**sw, "webhook-timestamp": f"0{now}"}, "bad_signature_header"),
        ("gh", bad_json, {**gh, "X-Hub-Signature-256": sign_github(b"x", bad_json)},
         "bad_signature"),
        ("gh", GH_BODY, {"X-Hub-Signature-256": GH_SIGNATURE}, "missing_signature"),
        ("st", bad_json, {"Stripe-Signature": sign_stripe(b"x", now, bad_json)}, "bad_signature"),
        ("st", body, {"Stripe-Signature": sign_stripe(ST_SECRET.encode(), now - 400, body)},
         "stale_signature"),
        ("st", body, {"Stripe-Signature": f"t={now},v0={'0' * 64}"}, "bad_signature"),
    ]  # fmt: skip
    before, counted = hooks.stored(), hooks.refusals()
    for inbox, sent, headers, reason in cases:
        response = hooks.post(inbox, sent, headers)
        assert response.status_code == 401, (inbox, reason, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["reason"] == reason, (inbox, headers, response.text)
    assert hooks.stored() == before
    # Stored nowhere, but counted for operators, head refusals and body refusals alike.
    after = hooks.refusals()
    for inbox, _, _, reason in cases:
        after[(inbox, reason)] -= 1
    assert after == counted


def test_bearer_tokens_still_deliver_and_bodies_are_bounded(hooks: Hooks) -> None:
    bearer = {"Authorization": f"Bearer {hooks.writer}", "Oncebox-Key": "operator-resend-1"}
    decided(hooks.post("gh", b"resent by hand", bearer), 201, "accepted")
    record = hooks.box.record("gh", "operator-resend-1")
    assert record is not None and record.signature is None  # ours, not the sender's
    # A token is checked as a token: a bad one is not retried as a signature.
    github = {"X-Hub-Signature-256": GH_SIGNATURE, "X-GitHub-Delivery": GH_DELIVERY}
    wrong = {**github, "Authorization": "Bearer obx_unknown"}
    assert hooks.post("gh", GH_BODY, wrong).status_code == 401
    # Without a token, a body past the inbox codec's bound signed by a stranger: 401,
    # nothing stored.
    before = hooks.stored()
    big = b'{"pad": "' + b"x" * HOOKS_MAX + b'"}'
    forged = standard(SW_STRANGER, "msg_big", int(time.time()), big)
    assert hooks.post("hooks", big, forged).json()["reason"] == "bad_signature"
    # And an inbox without a webhook takes no signature at all, refused from the head.
    plain = hooks.post("plain", GH_BODY, github)
    assert plain.status_code == 401 and "reason" not in plain.json()
    assert hooks.stored() == before


def test_a_bearer_delivery_without_its_key_is_refused_as_on_any_keyed_inbox(
    hooks: Hooks,
) -> None:
    """A token's delivery takes its key from Oncebox-Key, on a webhook inbox as on any
    other: without one, a 400 that stores nothing, not a dead letter per resend."""
    bearer = {"Authorization": f"Bearer {hooks.writer}"}
    before = hooks.stored()
    for inbox in ("gh", "hooks", "plain"):  # keyed, json by the key; plain: the control
        refused = hooks.post(inbox, b'{"n": 1}', bearer)
        assert refused.status_code == 400, (inbox, refused.text)
        assert refused.json()["type"].endswith("missing-key")
    assert hooks.stored() == before


README = (Path(__file__).parent.parent / "docs" / "webhooks.md").read_text("utf-8")


def test_the_readmes_curl_example_works_as_written(hooks: Hooks) -> None:
    if not (shutil.which("curl") and shutil.which("openssl")):
        pytest.skip("the README's example needs curl and openssl")
    [block] = [
        b.split("```", 1)[0] for b in README.split("```sh\n") if "webhook-signature: v1," in b
    ]
    script = block.replace("http://127.0.0.1:8080", hooks.base)
    answers = []
    for _ in range(2):
        ran = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30, check=True)
        answers.append(json.loads(ran.stdout))
    assert [a["verdict"] for a in answers] == ["accepted", "duplicate"]
    assert answers[0]["identity"] == "msg_p5jXN8AQM9LWM0D4loKWxJek"


def _block(fence: str, marker: str) -> str:
    """The README's one ``fence`` block holding ``marker``, as written."""
    [found] = [b.split("```", 1)[0] for b in README.split(f"```{fence}\n")[1:] if marker in b]
    return found


def test_the_readmes_webhook_example_runs_as_written(tmp_path: Path) -> None:
    """Issue 19, item 7: the inboxes, the server block and the sender's block of
    "Signed webhooks", each as written, in a directory of their own: ``serve`` starts
    on the documented default store, and the sender's request is accepted."""
    if not (shutil.which("curl") and shutil.which("openssl")):
        pytest.skip("the README's example needs curl and openssl")
    (tmp_path / "oncebox.toml").write_text(_block("toml", '"HOOK_OLD", "HOOK_NEW"'))
    port = str(free_port())  # the one change: a port of its own, not 8080
    server = _block("sh", "export HOOK_OLD=").replace("8080", port)
    sender = _block("sh", "webhook-signature: v1,").replace("8080", port)
    env = {k: v for k, v in os.environ.items() if k not in ("ONCEBOX_DB", "ONCEBOX_CONFIG")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(["bash", "-c", server], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "oncebox serve did not start"
            time.sleep(0.2)
        answers = []
        for _ in range(2):
            ran = subprocess.run(
                ["bash", "-c", sender], capture_output=True, timeout=30, check=True, env=env
            )
            answers.append(json.loads(ran.stdout))
        assert [a["verdict"] for a in answers] == ["accepted", "duplicate"]
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already, if it failed
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    assert (tmp_path / "oncebox.db").exists()  # the documented default store
