"""``oncebox feed`` and ``oncebox consumers`` as real processes (issue 21)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from clirun import oncebox_in
from helpers import event_body
from serveproc import ONCEBOX

pytestmark = pytest.mark.slow  # the command line as processes


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'feed.db'}"


def run(db: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """A test's first command a process, the rest in this one (tests/clirun.py)."""
    return oncebox_in(Path.cwd(), "--db", db)(*args, stdin=stdin, text=False)


def ingest(db: str, *ids: str) -> None:
    lines = b"".join(event_body(i) + b"\n" for i in ids)
    assert run(db, "ingest", "listing", "-", stdin=lines).returncode == 0


def lines(out: bytes) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def ident(entry: dict) -> str:
    return str(json.loads(entry["identity"])[-1])  # source, subscription, notification


def test_feed_prints_ndjson_to_the_end_and_follows(db: str) -> None:
    ingest(db, "n-1", "n-2", "n-3")
    found = lines(run(db, "feed", "listing").stdout)
    assert [ident(e) for e in found] == ["n-1", "n-2", "n-3"]
    rest = lines(run(db, "feed", "listing", "--after", str(found[0]["position"])).stdout)
    assert [ident(e) for e in rest] == ["n-2", "n-3"]
    assert run(db, "feed", "nowhere").returncode == 2
    assert run(db, "feed", "listing", "--from-end").stdout == b""

    follower = subprocess.Popen(
        [*ONCEBOX, "--db", db, "feed", "listing", "--after", str(rest[-1]["position"]), "--follow"],
        stdout=subprocess.PIPE,
    )
    try:
        ingest(db, "n-4")  # another process: the follower polls for it
        assert follower.stdout is not None
        line = follower.stdout.readline()
        assert ident(json.loads(line)) == "n-4"
    finally:
        follower.kill()
        follower.wait()


def test_a_consumer_reads_each_entry_once_across_runs(db: str) -> None:
    ingest(db, "n-1", "n-2")
    made = json.loads(run(db, "consumers", "create", "ledger", "listing").stdout)
    assert made["position"] == 0 and made["inbox"] == "listing"
    first = lines(run(db, "consumers", "read", "ledger", "--limit", "1").stdout)
    assert [ident(e) for e in first] == ["n-1", "n-2"]  # page by page, to the end
    assert run(db, "consumers", "read", "ledger").stdout == b""  # acknowledged: gone
    ingest(db, "n-3")
    again = lines(run(db, "consumers", "read", "ledger").stdout)
    assert [ident(e) for e in again] == ["n-3"]
    [listed] = json.loads(run(db, "consumers", "list").stdout)
    assert listed["name"] == "ledger" and listed["lag_entries"] == 0
    assert listed["position"] == again[0]["position"]
    late = json.loads(run(db, "consumers", "create", "late", "listing", "--start", "end").stdout)
    assert late["lag_entries"] == 0
    assert late["position"] >= again[0]["position"]
    bad = run(db, "consumers", "create", "x", "listing", "--start", "soon")
    assert bad.returncode == 2 and b"beginning, end or a log position" in bad.stderr
    assert run(db, "consumers", "drop", "ledger").returncode == 0
    gone = run(db, "consumers", "show", "ledger")
    assert gone.returncode != 0 and b"no consumer ledger" in gone.stderr


def test_consumers_read_gets_past_a_stretch_of_other_inboxes_entries(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``consumers read`` acknowledged only pages with entries and, without --follow,
    ended at the first empty one: a read that looked at a window of the log holding none
    of its inbox's entries ended there, and every later read looked at the same window
    again, so the entries after a busy stretch of other inboxes were never printed."""
    from oncebox.engine import feed as feeding

    ingest(db, "n-1")  # the test's first command: a process; the rest run in this one
    monkeypatch.setattr(feeding, "SCAN", 5)
    assert run(db, "consumers", "create", "ledger", "listing").returncode == 0
    for n in range(12):  # log entries of another inbox
        assert run(db, "lease", "feed", f"S{n}").returncode == 0
    ingest(db, "n-2")
    printed = lines(run(db, "consumers", "read", "ledger").stdout)
    assert [ident(e) for e in printed] == ["n-1", "n-2"]
    assert run(db, "consumers", "read", "ledger").stdout == b""
