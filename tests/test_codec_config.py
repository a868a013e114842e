"""Codecs configured in TOML and InboxSpec, and end to end through the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clirun import Oncebox, oncebox_in
from oncebox import ConfigError, InboxSpec
from oncebox.engine.config import load_config
from oncebox.formats import codec_settings

README = (Path(__file__).parent.parent / "docs" / "codecs.md").read_text("utf-8")
FIXTURES = Path(__file__).parent / "fixtures" / "sp_api"
SECRET = "whsec_" + "c3ludGhldGljLXN0YW5kYXJkLXdlYmhvb2tzLWtleQ=="
ENV = {"ONCEBOX_HOOK_SECRET": SECRET, "ONCEBOX_GITHUB_SECRET": "gh-synthetic-secret"}


def readme_config() -> str:
    """The README's example configuration for keyed and json inboxes."""
    match = re.search(r"```toml\n(# keyed and json inboxes.*?)```", README, re.DOTALL)
    assert match, "README lost its keyed/json example config"
    return match.group(1)


def test_the_readme_example_config_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "oncebox.toml").write_text(readme_config())
    _, specs = load_config(tmp_path / "oncebox.toml")
    codecs = {spec.name: spec.configured_codec() for spec in specs}
    assert {name: c.name for name, c in codecs.items()} == {
        "queue": "keyed",
        "hooks": 'json{"identity":"key","witness_ignore":["/attempt","/delivered_at"]}',
        "orders": 'json{"identity":["/order/id","/event"],"witness_ignore":["/delivered_at"]}',
        "github": "keyed",
        "amazon": "sp-api-listing",
    }
    assert codec_settings(codecs["hooks"])["webhook"] == {
        "scheme": "standard-webhooks",
        "secrets": "env ONCEBOX_HOOK_SECRET",
        "tolerance_seconds": 300,
    }
    assert codec_settings(codecs["orders"])["fields"] == {"site": "/site", "headcount": "/count"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "oncebox.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[inboxes.a]\ncodec = "json"\nidentiy = ["/id"]\n',
            "unknown setting.*identiy.*did you mean identity",
        ),
        (
            '[inboxes.a]\ncodec = "ussd-h1"\nretension = "30d"\n',
            "inboxes.a: unknown key 'retension' \\(did you mean retention\\?\\)",
        ),
        ('stor = "sqlite:///x.db"\n', "unknown key 'stor' \\(did you mean store\\?\\)"),
        ('[inboxes.a]\ncodec = "json"\nidentity = "/id"\n', "list of JSON Pointers"),
        (
            '[inboxes.a]\ncodec = "feed"\nwebhook = { scheme = "github", secret = "x" }\n',
            "takes no webhook",
        ),
        (
            '[inboxes.a]\ncodec = "keyed"\nwebhook = { scheme = "stripe", secret = "x" }\n',
            "sends no message id",
        ),
        (  # every signed event would be a missing_key dead letter, retried for days
            '[inboxes.a]\ncodec = "json"\nidentity = "key"\n'
            'webhook = { scheme = "stripe", secret = "x" }\n',
            "sends no message id",
        ),
        (
            '[inboxes.a]\ncodec = "keyed"\n'
            'webhook = { scheme = "github", secret_env = "NO_SUCH_V" }\n',
            "NO_SUCH_V not set",
        ),
    ],
)
def test_bad_codec_configuration_fails_at_load(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        load_config(write(tmp_path, toml))
    assert "inboxes" in str(refused.value) or "inbox a" in str(refused.value)


def test_webhook_identity_defaults_follow_the_scheme() -> None:
    def name(scheme: str, **settings: Any) -> str:
        spec = InboxSpec(
            "h",
            codec="json",
            settings=settings,
            webhook={"scheme": scheme, "secret": "whsec_" + "a" * 32},
        )
        return spec.configured_codec().name

    assert name("standard-webhooks") == name("github") == 'json{"identity":"key"}'
    assert name("stripe") == 'json{"identity":["/id"]}'
    assert name("stripe", identity=["/data/object/id"]) == 'json{"identity":["/data/object/id"]}'
    assert name("github", identity="content") == "json"


def test_an_inbox_spec_never_shows_its_webhook_secret() -> None:
    spec = InboxSpec("h", codec="keyed", webhook={"scheme": "github", "secret": "hunter2-xyz"})
    assert "hunter2" not in repr(spec)
    assert "hunter2" not in json.dumps(codec_settings(spec.configured_codec()))


# -- end to end: oncebox ingest with NDJSON, oncebox inboxes ---------------------------------
CONFIG = """
[inboxes.orders]
codec = "json"
identity = ["/id"]
witness_ignore = ["/attempt"]
fields = { site = "/site", need = "/need", headcount = "/count", pri = "/pri" }
apply = "triage"

[inboxes.hooks]
codec = "keyed"
webhook = { scheme = "standard-webhooks", secret_env = "ONCEBOX_HOOK_SECRET" }

[inboxes.amazon]
codec = "sp-api-listing"
apply = "generation"
expected_application_id = "amzn1.sellerapps.app.5f0c2d4e-8b1a-4c3e-9d7f-2a6b8e0c4f19"
expected_subscription_id = [
    "d3b07384-5c2a-4f1e-8a9b-3c4d5e6f7a80", "7e2f9a41-0c8d-4b6e-a35f-9d1c7b2e4a66",
]
"""


def cli(tmp_path: Path) -> Oncebox:
    """The test's ``oncebox``: its first command a process, the rest in this one."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    return oncebox_in(tmp_path, "--db", url, env={**os.environ, **ENV})


def oncebox(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    result = cli(tmp_path)(*args, stdin=stdin, text=False)
    assert result.returncode == 0, result.stderr.decode()
    return result


def decisions(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


@pytest.mark.slow
def test_json_and_sp_api_inboxes_through_the_cli(tmp_path: Path) -> None:
    write(tmp_path, CONFIG)
    frames = [
        {"id": "s1-1", "site": "K1", "need": "MED", "count": 3, "pri": 86, "attempt": 1},
        {"id": "s1-2", "site": "K2", "need": "SHE", "count": 8, "pri": 71, "attempt": 1},
    ]
    first = b"".join(json.dumps(f).encode() + b"\n" for f in frames)
    resent = b"".join(json.dumps({**f, "attempt": 2}).encode() + b"\n" for f in frames)
    assert [
        d["verdict"] for d in decisions(oncebox(tmp_path, "ingest", "orders", "-", stdin=first))
    ] == [
        "accepted",
        "accepted",
    ]
    again = decisions(
        oncebox(tmp_path, "ingest", "orders", "-", stdin=resent + b'{"site": "K1"}\n')
    )
    assert [d["verdict"] for d in again] == ["duplicate", "duplicate", "rejected"]
    assert again[2]["reason"] == "missing_identity"
    assert json.loads(oncebox(tmp_path, "triage", "orders").stdout)["headcount"] == 11

    lines = b"".join(
        json.dumps(json.loads((FIXTURES / name).read_text())).encode() + b"\n"
        for name in (
            "status_change.sqs.json",
            "issues_change.sqs.json",
            "status_change.eventbridge.json",
        )
    )
    amazon = decisions(oncebox(tmp_path, "ingest", "amazon", "-", stdin=lines))
    assert [d["verdict"] for d in amazon] == ["accepted", "accepted", "duplicate"]

    shown = {i["name"]: i for i in json.loads(oncebox(tmp_path, "inboxes").stdout)}
    assert shown["orders"]["codec"] == 'json{"identity":["/id"],"witness_ignore":["/attempt"]}'
    assert shown["orders"]["settings"]["identity"] == ["/id"]
    assert shown["hooks"]["settings"] == {
        "max_bytes": 1_048_576,  # what a Standard Webhooks sender sends
        "webhook": {
            "scheme": "standard-webhooks",
            "secrets": "env ONCEBOX_HOOK_SECRET",
            "tolerance_seconds": 300,
        },
    }
    assert shown["amazon"]["settings"]["expected_subscription_id"][0].startswith("d3b07384")
    assert SECRET not in oncebox(tmp_path, "inboxes").stdout.decode()


@pytest.mark.slow
def test_a_changed_pointer_set_is_refused_by_the_cli(tmp_path: Path) -> None:
    write(tmp_path, CONFIG)
    oncebox(tmp_path, "evict")  # a command that writes declares the inboxes
    write(tmp_path, CONFIG.replace('identity = ["/id"]', 'identity = ["/id", "/site"]'))
    result = cli(tmp_path)("inboxes", text=False)
    assert result.returncode != 0 and "cannot switch" in result.stderr.decode()
