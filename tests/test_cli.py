"""End to end through the command line: each test's first command a real process, the
rest the same entry point in this process (tests/clirun.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clirun import oncebox_in
from conftest import SESSION
from helpers import event_body
from oncebox.formats.ussd_h1 import make_frame

pytestmark = pytest.mark.slow  # every test runs the oncebox command as a process


def run(tmp_path: Path, *args: str, stdin: bytes = b"", ok: bool = True) -> Any:
    oncebox = oncebox_in(tmp_path, "--db", f"sqlite:///{tmp_path / 'cli.db'}")
    result = oncebox(*args, stdin=stdin, text=False)
    if ok:
        assert result.returncode == 0, result.stderr.decode()
    return result


def lines_of(result: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def frames_ndjson(frames: list[tuple[str, str]]) -> bytes:
    return b"".join(json.dumps({"frame_id": f, "frame": t}).encode() + b"\n" for f, t in frames)


def test_ingest_prints_one_decision_per_line(tmp_path: Path) -> None:
    stream = frames_ndjson(SESSION + SESSION) + b"H1|garbage\n"
    decisions = lines_of(run(tmp_path, "ingest", "ussd", "-", stdin=stream))
    assert [d["verdict"] for d in decisions] == ["accepted"] * 3 + ["duplicate"] * 3 + ["rejected"]
    for decision in decisions:
        assert {"verdict", "reason", "may_ack", "identity", "witness"} <= decision.keys()
        assert decision["may_ack"] is True
    triage = json.loads(run(tmp_path, "triage", "ussd").stdout)
    assert triage["headcount"] == 23


def test_ingest_from_a_file_with_small_batches(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_bytes(b"\n".join(event_body(f"n-{i}") for i in range(25)) + b"\n")
    decisions = lines_of(run(tmp_path, "ingest", "listing", str(path), "--batch", "7"))
    assert [d["verdict"] for d in decisions] == ["accepted"] * 25
    again = lines_of(run(tmp_path, "ingest", "listing", str(path)))
    assert {d["verdict"] for d in again} == {"duplicate"}


def test_large_file_ingests_with_progress_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "big.ndjson"
    padding = "p" * 400
    path.write_bytes(
        b"".join(event_body(f"n-{i}", payload={"pad": padding}) + b"\n" for i in range(3000))
    )
    assert path.stat().st_size > 1_000_000
    result = run(tmp_path, "ingest", "listing", str(path))
    assert len(lines_of(result)) == 3000
    assert b"Traceback" not in result.stderr


def test_quarantine_list_and_resolve(tmp_path: Path) -> None:
    conflict = make_frame(1, "Kakuma1", "MED", 9, 86)
    run(tmp_path, "ingest", "ussd", stdin=frames_ndjson([*SESSION, ("rec1", conflict)]))
    [row] = json.loads(run(tmp_path, "quarantine", "list").stdout)
    assert row["content"] == {"text": conflict} and row["status"] == "open"
    assert row["original"]["content"] == {"text": SESSION[0][1]}
    resolved = json.loads(
        run(
            tmp_path,
            "quarantine",
            "resolve",
            str(row["id"]),
            "accept",
            "--note",
            "confirmed by phone",
        ).stdout
    )
    assert resolved["status"] == "accepted"
    assert json.loads(run(tmp_path, "quarantine", "list").stdout) == []
    assert json.loads(run(tmp_path, "triage", "ussd").stdout)["headcount"] == 29


def test_dead_letters_stats_and_evict(tmp_path: Path) -> None:
    run(tmp_path, "ingest", "listing", stdin=b'{"schema_version": true}\n')
    [letter] = json.loads(run(tmp_path, "dead-letters", "--inbox", "listing").stdout)
    assert letter["reason"] == "missing_field"
    [stats] = json.loads(run(tmp_path, "stats", "listing").stdout)
    assert stats["verdicts"] == {"rejected": 1} and stats["dead_letters"] == 1
    evicted = json.loads(run(tmp_path, "evict").stdout)
    assert {e["inbox"] for e in evicted} == {"ussd", "listing", "feed"}


def test_config_file_declares_inboxes(tmp_path: Path) -> None:
    (tmp_path / "oncebox.toml").write_text(
        '[inboxes.sms]\ncodec = "ussd-h1"\napply = "triage"\nretention = "90d"\n'
    )
    run(tmp_path, "ingest", "sms", stdin=frames_ndjson(SESSION))
    [inbox] = json.loads(run(tmp_path, "inboxes").stdout)
    assert inbox["name"] == "sms" and inbox["retention_seconds"] == 90 * 86400


def test_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    cases = [
        ("ingest", "nope"),
        ("ingest", "ussd", str(tmp_path / "missing.ndjson")),
        ("quarantine", "resolve", "99", "keep", "--note", "x"),
    ]
    for args in cases:
        result = run(tmp_path, *args, ok=False)
        assert result.returncode != 0
        err = result.stderr.decode()
        assert err.startswith("oncebox: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
    (tmp_path / "bad.toml").write_text("[inboxes.x]\ncodec = 'ussd-h1'\nretention = '1h'\n")
    result = run(tmp_path, "--config", str(tmp_path / "bad.toml"), "stats", ok=False)
    assert result.returncode != 0 and "72h floor" in result.stderr.decode()


def test_demo_json_is_deterministic_and_tells_both_stories(tmp_path: Path) -> None:
    first = run(tmp_path, "demo", "--json").stdout
    assert first == run(tmp_path, "demo", "--json").stdout
    result = json.loads(first)
    ussd, listing = result["ussd"], result["listing"]
    assert [s["verdict"] for s in ussd["verdicts"]] == (
        ["accepted"] * 3
        + ["duplicate"] * 3
        + ["accepted", "accepted", "duplicate", "accepted"]
        + ["conflict", "rejected", "rejected"]
    )
    assert (ussd["headcount"], ussd["headcount_without_dedup"]) == (23, 46)
    assert [s["outcome"] for s in listing["verdicts"]] == [
        "committed",
        "duplicate",
        "accepted",
        "accepted",
        "superseded",
        "failed",
        "failed",
        "applied",
        "conflict",
        "accepted",
        "accepted",
        "rejected",
        "applied",
        "applied",
    ]
    assert listing["records"] == 5 and len(listing["work_keys"]) == 3
    assert listing["clean_keys"] == 3
    assert sorted(set(listing["primary_key_generations"])) == [1, 2, 3]
    assert listing["verdicts"][4]["step"] == "the generation-2 completion"
    feed = result["feed"]
    assert (feed["rows"], feed["checkpoints"], feed["chain_verified"]) == (5, 9, True)
    assert [s["reason"] or s["verdict"] for s in feed["verdicts"]] == [
        "expired_lease",
        "accepted",
        "stale_token",
        "accepted",
        "duplicate",
        "accepted",
        "duplicate",
        "accepted",
        "accepted",
        "duplicate",
    ]
    human = run(tmp_path, "demo").stdout.decode()
    assert "headcount 23 (without dedup it would be 46)" in human


def test_an_id_beyond_64_bits_is_a_usage_error_not_an_internal_one(tmp_path: Path) -> None:
    """Ids and pages of the operator commands are 64-bit in both stores: a larger one is
    refused like any other bad value (exit 2), never an internal error (exit 70)."""
    run(tmp_path, "ingest", "ussd", stdin=frames_ndjson([("a-1", "H1|1|K1|MED|3|86|#00")]))
    huge = str(2**63)
    cases = [
        ("dead-letters", "--after", huge),
        ("dead-letters", "show", huge),
        ("dead-letters", "replay", huge),
        ("dead-letters", "archive", huge, "--note", "x"),
        ("dead-letters", "bulk", "archive", "--inbox", "ussd", "--note", "x", "--after", huge),
        ("quarantine", "list", "--after", huge),
        ("quarantine", "show", huge),
        ("quarantine", "resolve", huge, "keep", "--note", "x"),
        ("quarantine", "bulk-resolve", "ussd", "keep", "--note", "x", "--after", huge),
        ("records", "ussd", "--after", huge),
        ("record", huge),
        ("forwarding", "deliveries", "hook", "--after", huge),
        ("forwarding", "show", huge),
        ("forwarding", "retry", huge),
        ("token", "list", "--after", huge),
    ]
    for args in cases:
        result = run(tmp_path, *args, ok=False)
        err = result.stderr.decode()
        assert result.returncode == 2, (args, err)
        assert "internal error" not in err and str(2**63 - 1) in err, (args, err)
