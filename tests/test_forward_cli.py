"""Forwarding from the command line (issue 22), as a user runs it (the first command of
a test a real process, the rest the same entry point in this process, tests/clirun.py):
``oncebox forward --once`` sends what is due, ``oncebox forwarding ...`` lists, shows,
pauses, resumes and sends again; bad input is one clear line and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clirun import BARE, Oncebox

pytestmark = pytest.mark.slow  # the command line as processes

CONFIG = """
[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.nowhere]
url = "http://127.0.0.1:9/hooks"
retry = ["0s"]
"""


@pytest.fixture
def run(tmp_path: Path) -> Any:
    config = tmp_path / "a.toml"
    config.write_text(CONFIG)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    oncebox = Oncebox(tmp_path, "--db", url, "--config", str(config), env=BARE)

    def run(*args: str, ok: bool = True, stdin: str = "", raw: bool = False) -> Any:
        done = oncebox(*args, stdin=stdin)
        if not ok:
            assert done.returncode != 0 and done.stdout == ""
            return done.stderr
        assert done.returncode == 0, done.stderr
        return done.stdout if raw else json.loads(done.stdout)

    return run


def test_the_cli_sends_lists_shows_pauses_and_sends_again(run: Any) -> None:
    lines = "".join(json.dumps({"body": f"pay {n}", "key": f"p-{n}"}) + "\n" for n in range(3))
    run("ingest", "payments", stdin=lines, raw=True)
    sent = run("forward", "--once")
    assert sent["dead"] == 3  # the connection refused and the schedule had one try
    [standing] = run("forwarding", "list")
    assert standing["name"] == "nowhere" and standing["dead"] == 3
    assert standing["backlog"] == 0 and standing["success_rate"] == 0.0
    dead = run("forwarding", "deliveries", "nowhere", "--status", "dead")
    assert [f["status"] for f in dead] == ["dead"] * 3
    shown = run("forwarding", "show", str(dead[0]["id"]))
    [attempt] = shown["attempts_made"]
    assert attempt["outcome"] == "dead" and attempt["error"]
    assert shown["record_id"] == 1 and shown["attempts"] == 1

    paused = run("forwarding", "pause", "nowhere", "--actor", "ops")
    assert paused["state"] == "paused" and paused["paused_by"] == "ops"
    again = run("forwarding", "retry", str(dead[0]["id"]))
    assert again["status"] == "failed"  # due now, on a fresh schedule
    assert run("forwarding", "retry-all", "nowhere") == {"destination": "nowhere", "retried": 2}
    assert set(run("forward", "--once")) == {"dispatcher"}  # paused: nothing sent
    assert run("forwarding", "list")[0]["backlog"] == 3  # held back while paused
    resumed = run("forwarding", "resume", "nowhere")
    assert resumed["state"] != "paused"
    assert run("forward", "--once")["dead"] == 3

    # Bad input: one line on standard error, a failing exit status.
    assert "nowhere-else" in run("forwarding", "pause", "nowhere-else", ok=False)
    assert "no forward 999" in run("forwarding", "retry", "999", ok=False)
    assert "'pending'" in run("forwarding", "deliveries", "nowhere", "--status", "x", ok=False)
    assert "ledger" in run("forward", "--destination", "ledger", ok=False)


def test_forward_without_destinations_says_so(tmp_path: Path) -> None:
    done = Oncebox(tmp_path, "--db", f"sqlite:///{tmp_path / 'b.db'}", env=BARE)("forward")
    assert done.returncode == 2 and "no inbox forwards anywhere" in done.stderr
