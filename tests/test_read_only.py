"""Read commands read (issue 23, item 3): a mistyped store path is an error and makes no
file; a store made by the library gets no built-in inbox declared into it by ``stats``;
nothing is written. The CLI as a user runs it: each test's first command a process, the
rest in this one (tests/clirun.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import oncebox
from clirun import oncebox_in
from oncebox import Delivery, InboxSpec

pytestmark = pytest.mark.slow  # the command line as processes

SMS = InboxSpec("sms", codec="ussd-h1", apply="triage")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return oncebox_in(cwd)(*args, timeout=60)


def test_a_store_path_that_does_not_exist_is_an_error_for_read_commands(
    tmp_path: Path,
) -> None:
    for command in (["stats"], ["dead-letters"], ["inboxes"], ["quarantine", "list"]):
        done = run("--db", "sqlite:///typo.db", *command, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.startswith("oncebox: error: no store at typo.db")
        assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "typo.db").exists()


def test_read_commands_declare_no_inbox_and_write_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    box = oncebox.open(url, inboxes=[SMS])
    box.ingest("sms", Delivery(b"H1|1|K1|MED|3|86|#00", key="a-1"))
    entries = len(box.log_entries())
    box.close()
    stats = run("--db", url, "stats", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert [s["inbox"] for s in json.loads(stats.stdout)] == ["sms"]
    for command in (["inboxes"], ["dead-letters", "--inbox", "sms"], ["triage", "sms"]):
        assert run("--db", url, *command, cwd=tmp_path).returncode == 0, command
    assert "no inbox named 'ussd'" in run("--db", url, "stats", "ussd", cwd=tmp_path).stderr
    after = oncebox.open(url, inboxes=[], read_only=True)
    try:
        assert [a.name for a in after.inboxes] == ["sms"]  # no ussd, listing, feed
        assert len(after.log_entries()) == entries
    finally:
        after.close()
