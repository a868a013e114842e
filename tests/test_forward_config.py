"""Forwarding destinations, configured not coded (issue 22, item 1): checked before anything
is stored, unknown keys refused, secrets never shown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import oncebox
from oncebox import ConfigError, InboxSpec
from oncebox.engine.config import load_config
from oncebox.engine.destinations import RETRY_DEFAULT, parse_destinations

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example key
CONFIG = """
store = "sqlite:///{db}"

[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.ledger]
url = "http://127.0.0.1:9000/hooks"
sign = {{ scheme = "standard-webhooks", secret_env = "LEDGER_SECRET" }}
timeout = "30s"
max_in_flight = 16
rate = "50/s"
ordered = "key"
retry = ["0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h"]

[inboxes.payments.forward.audit]
kind = "redis-stream"
url = "redis://:hunter2@127.0.0.1:6379/0"
stream = "payments"

[inboxes.payments.forward.local]
kind = "python"
call = "mypackage.hooks:on_payment"
retry_on = [409]
"""


def test_a_config_declares_destinations_of_each_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_SECRET", SECRET)
    path = tmp_path / "oncebox.toml"
    path.write_text(CONFIG.format(db=tmp_path / "a.db"))
    _, [spec] = load_config(path)
    ledger, audit, local = spec.destinations()
    assert (ledger.kind, ledger.rate, ledger.ordered, ledger.timeout) == ("http", 50.0, True, 30)
    assert ledger.retry == (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
    assert ledger.lease > ledger.timeout  # a claim outlasts the request
    assert (audit.kind, audit.stream) == ("redis-stream", "payments")
    assert (local.kind, local.call, local.retry_on) == ("python", "mypackage.hooks:on_payment",
                                                        frozenset({409}))  # fmt: skip
    assert SECRET[6:] not in repr(spec) and "hunter2" not in repr(spec)
    shown = json.dumps([d.describe() for d in (ledger, audit, local)])
    assert SECRET[6:] not in shown and "hunter2" not in shown
    assert ledger.describe()["sign"] == {
        "scheme": "standard-webhooks",
        "secret": "env LEDGER_SECRET",
    }
    assert audit.describe()["url"] == "redis://:***@127.0.0.1:6379/0"


@pytest.mark.slow  # the command line as processes
def test_oncebox_inboxes_shows_destinations_and_never_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "oncebox.toml"
    path.write_text(CONFIG.format(db=tmp_path / "a.db"))
    env = {"LEDGER_SECRET": SECRET, "PATH": "/usr/bin:/bin"}
    # A read command never makes a store: one that writes (seal) makes it first.
    subprocess.run(
        [sys.executable, "-m", "oncebox", "--config", str(path), "seal"],
        capture_output=True, env=env, check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "oncebox", "--config", str(path), "inboxes"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    [payments] = json.loads(done.stdout)
    assert [d["name"] for d in payments["forward"]] == ["ledger", "audit", "local"]
    assert payments["forward"][0]["retry"] == list(RETRY_DEFAULT)
    assert SECRET[6:] not in done.stdout and "hunter2" not in done.stdout


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"url": "http://x/h", "urll": 1}, "unknown key(s) urll"),
        ({"kind": "smtp"}, "kind must be one of"),
        ({}, "url is required"),
        ({"url": "ftp://x/h"}, "url must be a http or https URL"),
        # URLs the parser or the client cannot take: refused here, not a ValueError here
        # or an endless retry of every forward later.
        ({"url": "http://[::1/h"}, "url must be a http or https URL"),
        ({"url": "http://x:99999/h"}, "url must be a http or https URL"),
        ({"url": "http://x:port/h"}, "url must be a http or https URL"),
        (
            {"kind": "redis-stream", "url": "redis://:pw@[x", "stream": "s"},
            "url must be a redis or rediss or unix URL",
        ),
        ({"url": "http://x/h", "stream": "s"}, "unknown key(s) stream"),
        ({"kind": "redis-stream", "url": "redis://x"}, "stream must name"),
        ({"kind": "python", "call": "nocolon"}, 'call must name a function as "module:function"'),
        ({"url": "http://x/h", "ordered": "yes"}, 'ordered must be "key" or "none"'),
        ({"url": "http://x/h", "rate": "fast"}, "rate is sends per second"),
        ({"url": "http://x/h", "retry": []}, "retry is a list of 1 to 64 delays"),
        ({"url": "http://x/h", "retry": ["soon"]}, "retry: not a duration"),
        ({"url": "http://x/h", "timeout": "0s"}, "timeout must be longer than 0"),
        # A claim's lease is twice the timeout: the fence takes no lease that never ends.
        ({"url": "http://x/h", "timeout": float("inf")}, "timeout must be finite"),
        # TOML's nan and inf, and a number past a double's range: a forward due at nan or
        # inf was never sent again nor dead; a circuit open for inf never probed.
        ({"url": "http://x/h", "timeout": float("nan")}, "timeout must be finite"),
        ({"url": "http://x/h", "retry": ["0s", float("nan")]}, "retry must be finite"),
        ({"url": "http://x/h", "retry": ["0s", float("inf")]}, "retry must be finite"),
        ({"url": "http://x/h", "retry": ["1" + "0" * 400 + "s"]}, "retry must be finite"),
        ({"url": "http://x/h", "circuit_cooldown": float("inf")}, "circuit_cooldown must be"),
        ({"url": "http://x/h", "circuit_cooldown": float("nan")}, "circuit_cooldown must be"),
        (
            {"kind": "redis-stream", "url": "redis://x", "stream": "s", "marker_ttl": float("inf")},
            "marker_ttl must be finite",
        ),
        ({"url": "http://x/h", "max_in_flight": 0}, "max_in_flight must be a whole number"),
        ({"url": "http://x/h", "retry_on": [500]}, "retry_on is a list of 4xx"),
        ({"url": "http://x/h", "sign": {"secret_env": "NOT_SET_ANYWHERE"}}, "is not set"),
        ({"url": "http://x/h", "sign": {"secret": "whsec_!!"}}, "sign:"),
        ({"url": "http://x/h", "sign": {"scheme": "github", "secret": SECRET}}, "the scheme is"),
        ({"url": "http://x/h", "sign": {"secret": SECRET, "tolerance": 3}}, "unknown key(s)"),
    ],
)
def test_a_bad_destination_is_refused_saying_why(table: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_destinations("payments", {"ledger": table}, env={})
    assert says in str(refused.value)
    assert str(refused.value).startswith("inbox payments: forward.ledger: ")
    assert SECRET[6:] not in str(refused.value) and "!!" not in str(refused.value)


def test_a_destination_name_is_the_stores_alone() -> None:
    specs = [
        InboxSpec("a", codec="keyed", forward={"ledger": {"url": "http://x/h"}}),
        InboxSpec("b", codec="keyed", forward={"ledger": {"url": "http://x/h"}}),
    ]
    with pytest.raises(ConfigError, match="destination ledger is already inbox a's"):
        oncebox.open("sqlite:///:memory:", inboxes=specs)


def test_a_config_with_a_bad_destination_fails_to_load(tmp_path: Path) -> None:
    path = tmp_path / "oncebox.toml"
    path.write_text(
        '[inboxes.p]\ncodec = "keyed"\n[inboxes.p.forward.x]\nurl = "http://x"\nmax = 3\n'
    )
    with pytest.raises(ConfigError, match=r"config .*: inbox p: forward.x: unknown key\(s\) max"):
        load_config(path)


def test_every_destination_key_and_default_is_documented() -> None:
    from oncebox.engine import destinations

    page = (Path(__file__).parent.parent / "docs" / "forwarding.md").read_text("utf-8")
    keys = set().union(*destinations._KEYS.values())
    assert {k for k in keys if f"| `{k}` |" not in page} == set()
    assert all(f'"{d}"' in page for d in RETRY_DEFAULT)
    assert f"`{destinations.CIRCUIT_FAILURES}`" in page
    assert f"`{destinations.IN_FLIGHT_DEFAULT}`" in page


def test_a_password_in_an_http_destination_url_is_never_shown(tmp_path: Path) -> None:
    """An http destination's URL may carry a user and password, which the dispatcher
    sends as HTTP basic auth: a credential for the receiver, hidden as a Redis URL's is,
    from ``describe`` and from every token that may read the inbox's forwarding."""
    from fastapi.testclient import TestClient

    from oncebox.surfaces.http import create_app

    url = "https://ledger:hunter3@127.0.0.1:9/hooks?topic=pay"
    spec = InboxSpec("payments", "keyed", forward={"ledger": {"url": url}})
    [ledger] = spec.destinations()
    box = oncebox.open(f"sqlite:///{tmp_path / 'a.db'}", inboxes=[spec])
    try:
        assert ledger.url == url  # what the dispatcher sends to, password and all
        assert ledger.describe()["url"] == "https://ledger:***@127.0.0.1:9/hooks?topic=pay"
        reader = box.create_token("reader", ["payments"], ["read"]).secret
        http = TestClient(create_app(box), headers={"Authorization": f"Bearer {reader}"})
        listed = http.get("/v1/forwarding")
        assert listed.status_code == 200, listed.text
        [shown] = listed.json()["destinations"]
        assert shown["settings"]["url"] == "https://ledger:***@127.0.0.1:9/hooks?topic=pay"
        assert "hunter3" not in listed.text
    finally:
        box.close()
    # A key given as the user name alone is sent as basic auth as well.
    [keyed] = parse_destinations(
        "payments", {"ledger": {"url": "https://sk_4eC39@ledger.example/"}}
    )
    assert keyed.describe()["url"] == "https://***@ledger.example/"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0?password=hunter4", "redis://127.0.0.1:6379/0?password=***"),
        (
            "unix:///run/redis.sock?db=0&password=hunter4&x=1",
            "unix:///run/redis.sock?db=0&password=***&x=1",
        ),
    ],
)
def test_a_password_in_a_redis_urls_query_is_never_shown(url: str, shown: str) -> None:
    # redis-py takes `password` from the query as well (for a unix socket, the usual
    # place): it was shown whole by `describe`, so by `oncebox inboxes`, the console and
    # GET /v1/forwarding to any read token, and in a refusal of the URL.
    [audit] = parse_destinations(
        "payments", {"audit": {"kind": "redis-stream", "url": url, "stream": "s"}}, env={}
    )
    assert audit.url == url and audit.describe()["url"] == shown
    assert "hunter4" not in repr(audit)  # a traceback's or a log's repr shows none either
    with pytest.raises(ConfigError) as refused:
        parse_destinations("payments", {"ledger": {"url": url}}, env={})
    assert "hunter4" not in str(refused.value) and "password=***" in str(refused.value)
