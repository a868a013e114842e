"""Forwarding end to end (issue 22): oncebox A, a real ``oncebox serve``, forwards what it
accepts to oncebox B, another real ``oncebox serve`` whose inbox takes Standard Webhooks
signed with the shared secret; B dedups every resend by its ``webhook-id`` with no other
configuration. The API (``/v1/forwarding``), the metrics and the CLI are driven as a user
would; ``oncebox forward`` is killed with SIGKILL mid-stream and nothing is lost or
doubled at B; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import oncebox
from forward_receiver import SECRET
from oncebox import ForwardFilter, ForwardStatus
from serveproc import ONCEBOX, Served, serving

pytestmark = pytest.mark.slow  # real servers and dispatchers as processes

A_CONFIG = """
[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.b]
url = "{b}/v1/inboxes/hooks/deliveries"
sign = {{ scheme = "standard-webhooks", secret_env = "HOOK_SECRET" }}
retry = ["0s", "1s", "1s", "1s"]
max_in_flight = 8

[inboxes.payments.forward.nowhere]
url = "http://127.0.0.1:9/hooks"
retry = ["0s"]
circuit_failures = 1000  # every attempt fails: all 20 die, the circuit kept closed
"""
B_CONFIG = """
[inboxes.hooks]
codec = "json"
webhook = { scheme = "standard-webhooks", secret_env = "HOOK_SECRET" }
"""
ENV = {"HOOK_SECRET": SECRET}


@pytest.fixture
def urls(shared_url: str, tmp_path: Path) -> tuple[str, str]:
    """Two stores: A's (the backend under test) and B's (SQLite, a receiver apart)."""
    return shared_url, f"sqlite:///{tmp_path / 'b.db'}"


@pytest.fixture
def pair(
    urls: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Served, Served, str, Path]]:
    a_url, b_url = urls
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    (tmp_path / "b.toml").write_text(B_CONFIG)
    with serving(
        b_url, "--workers", "1", env={**ENV, "ONCEBOX_CONFIG": str(tmp_path / "b.toml")}
    ) as b:
        a_config = tmp_path / "a.toml"
        a_config.write_text(A_CONFIG.format(b=b.base))
        box = oncebox.open(a_url, config=a_config)
        try:
            secret = box.create_token("ops", ["*"], ["write", "read", "operator"]).secret
        finally:
            box.close()
        env = {**ENV, "ONCEBOX_CONFIG": str(a_config)}
        with serving(a_url, "--workers", "2", env=env) as a:
            yield a, b, secret, a_config


def cli(a_url: str, config: Path, *args: str) -> object:
    done = subprocess.run(
        [*ONCEBOX, "--db", a_url, "--config", str(config), *args],
        capture_output=True, text=True, env={**ENV, "PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def b_records(b_url: str, tmp_path: Path) -> list[str]:
    box = oncebox.open(b_url, config=tmp_path / "b.toml")
    try:
        return sorted(str(e.identity) for e in box.feed("hooks", limit=1000).entries)
    finally:
        box.close()


def test_a_forwards_to_b_once_in_effect_and_operators_see_it_all(
    pair: tuple[Served, Served, str, Path], urls: tuple[str, str], tmp_path: Path
) -> None:
    a, _, secret, config = pair
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=a.base, headers=headers, timeout=30) as http:
        for n in range(20):
            answer = http.post("/v1/inboxes/payments/deliveries", content=f"pay {n}",
                               headers={"Oncebox-Key": f"p-{n}"})  # fmt: skip
            assert answer.status_code in (200, 201), answer.text
        deadline = time.monotonic() + 60
        while True:
            [b_dest] = [d for d in http.get("/v1/forwarding").json()["destinations"]
                        if d["name"] == "b"]  # fmt: skip
            if b_dest["backlog"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert b_dest["backlog"] == 0 and b_dest["state"] == "closed"
        assert (
            b_dest["success_rate"] == 1.0
            and b_dest["settings"]["sign"]["secret"] == "env HOOK_SECRET"
        )
        keys = sorted(e["idempotency_key"] for e in http.get(
            "/v1/inboxes/payments/feed", params={"limit": 100}).json()["entries"])  # fmt: skip
        assert b_records(urls[1], tmp_path) == keys  # B holds exactly A's, once each
        delivered = http.get("/v1/forwarding/b/deliveries", params={"status": "delivered"}).json()
        assert len(delivered["deliveries"]) == 20
        one = http.get(f"/v1/forwarding/deliveries/{delivered['deliveries'][0]['id']}").json()
        assert one["attempts_made"][0]["status"] in (200, 201)

        # The destination that refuses every connection: its forwards die, and an
        # operator sends them again, one and then all, by filter; each in the log.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dead = http.get("/v1/forwarding/nowhere/deliveries", params={"status": "dead"}).json()
            if len(dead["deliveries"]) == 20:
                break
            time.sleep(0.2)
        assert len(dead["deliveries"]) == 20
        paused = http.post("/v1/forwarding/nowhere/pause").json()
        assert paused["state"] == "paused" and paused["paused_by"] == "ops"
        first = dead["deliveries"][0]["id"]
        again = http.post(f"/v1/forwarding/deliveries/{first}/retry")
        assert again.status_code == 200 and again.json()["status"] == "failed"
        bulk = http.post("/v1/forwarding/nowhere/retry", json={"status": "dead"}).json()
        assert bulk == {"destination": "nowhere", "retried": 19}
        listed = cli(urls[0], config, "forwarding", "list")
        assert isinstance(listed, list)
        assert {d["name"]: d["backlog"] for d in listed} == {"b": 0, "nowhere": 20}
        assert http.post("/v1/forwarding/deliveries/999999/retry").status_code == 404
        assert http.post(f"/v1/forwarding/deliveries/{delivered['deliveries'][0]['id']}/retry"
                         ).status_code == 409  # fmt: skip
        resumed = cli(urls[0], config, "forwarding", "resume", "nowhere", "--actor", "cli:ops")
        assert isinstance(resumed, dict) and resumed["state"] in ("closed", "open")
        metrics = http.get("/metrics").text
        assert 'oncebox_forward_backlog{destination="b",inbox="payments"} 0.0' in metrics
        assert 'oncebox_forward_attempts_total{destination="b",outcome="delivered"} 20.0' in metrics
        assert "oncebox_forward_oldest_seconds" in metrics
        assert 'oncebox_forward_dead{destination="b",inbox="payments"} 0.0' in metrics
        assert "oncebox_forward_latency_seconds_bucket" in metrics
    box = oncebox.open(urls[0], config=config)
    try:
        entries = box.log_entries(1, 100_000)
    finally:
        box.close()
    actors = [
        (e.step, json.loads(e.state).get("actor"))
        for e in entries
        if e.step in ("forward_pause", "forward_resume", "forward_retry")
    ]
    assert actors == [
        ("forward_pause", "ops"),
        ("forward_retry", "ops"),
        ("forward_retry", "ops"),
        ("forward_resume", "cli:ops"),
    ]


KILLED_CONFIG = """
[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.b]
url = "{b}/v1/inboxes/hooks/deliveries"
sign = {{ scheme = "standard-webhooks", secret_env = "HOOK_SECRET" }}
timeout = "1s"
rate = "10/s"
retry = ["0s", "1s", "1s", "1s", "1s", "1s"]
max_in_flight = 8
"""


def forwarder(a_url: str, config: Path) -> subprocess.Popen[str]:
    """``oncebox forward``: A's dispatchers alone, as their own process."""
    return subprocess.Popen(
        [*ONCEBOX, "--db", a_url, "--config", str(config), "forward", "--poll", "0.1"],
        stdout=subprocess.PIPE, text=True, env={**ENV, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_a_forwarder_killed_mid_stream_loses_nothing_and_b_has_each_record_once(
    urls: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_url, b_url = urls
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    (tmp_path / "b.toml").write_text(B_CONFIG)
    b_env = {**ENV, "ONCEBOX_CONFIG": str(tmp_path / "b.toml")}
    with serving(b_url, "--workers", "1", env=b_env) as b:
        config = tmp_path / "a.toml"
        config.write_text(KILLED_CONFIG.format(b=b.base))
        box = oncebox.open(a_url, config=config)
        secret = box.create_token("ops", ["*"], ["write", "read"]).secret
        a_env = {**ENV, "ONCEBOX_CONFIG": str(config)}
        with (
            serving(a_url, "--workers", "1", "--no-forward", env=a_env) as a,
            httpx.Client(base_url=a.base, timeout=30,
                         headers={"Authorization": f"Bearer {secret}"}) as http,
        ):  # fmt: skip

            def ingest(numbers: range) -> None:
                for n in numbers:
                    answer = http.post("/v1/inboxes/payments/deliveries", content=f"pay {n}",
                                       headers={"Oncebox-Key": f"p-{n}"})  # fmt: skip
                    assert answer.status_code == 201, answer.text

            def backlog() -> int:
                [dest] = http.get("/v1/forwarding").json()["destinations"]
                return int(dest["backlog"])

            ingest(range(40))
            time.sleep(0.5)
            assert backlog() == 40  # --no-forward: the server sends nothing itself
            first = forwarder(a_url, config)
            deadline = time.monotonic() + 60
            while len(b_records(b_url, tmp_path)) < 5:
                assert time.monotonic() < deadline and first.poll() is None
                time.sleep(0.05)
            first.kill()  # SIGKILL, with claims held and requests in flight
            first.wait()
            assert first.returncode == -9
            ingest(range(40, 60))  # and more accepted while no dispatcher runs
            assert 0 < backlog() <= 60

            second = forwarder(a_url, config)  # takes over once the dead one's leases run out
            deadline = time.monotonic() + 120
            while backlog() and time.monotonic() < deadline:
                time.sleep(0.2)
            second.terminate()  # SIGTERM: it finishes what is in flight, then reports
            out, _ = second.communicate(timeout=60)
            assert second.returncode == 0 and backlog() == 0
            report = json.loads(out)
            assert report["delivered"] >= 1 and "dead" not in report

            keys = sorted(e.idempotency_key for e in box.feed("payments", limit=1000).entries)
            delivered = box.forwards(
                ForwardFilter("b", ForwardStatus.DELIVERED), limit=1000
            )  # fmt: skip
        box.close()
    assert len(keys) == 60 and len(delivered) == 60
    b_has = b_records(b_url, tmp_path)
    assert b_has == keys  # none lost, none twice: each record once in effect at B
