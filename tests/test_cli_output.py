"""The CLI for people and for scripts (issue 23, item 4): tables on a terminal, the JSON of
before when piped or with --json; ingest's count on stderr; `quarantine show`'s diff.

In process through click's runner; whether standard output is a terminal is the one
function :func:`oncebox.surfaces.cli.output.on_terminal`, set here. The real terminal
(a pty) and a real pipe are in tests/test_cli_terminal.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import oncebox
from oncebox import Delivery
from oncebox.surfaces.cli import cli, output
from oncebox.surfaces.cli.output import tally

FRAMES = [
    ("rec1-1", "H1|1|Kakuma1|MED|3|86|#89"),
    ("rec1-1", "H1|1|Kakuma1|MED|3|86|#89"),  # the same again: a duplicate
    ("rec1-1", "H1|1|Kakuma1|MED|9|86|#95"),  # headcount 3 -> 9: a conflict
    ("rec1-2", "H1|2|Kakuma1|MED|3|86|#00"),  # a bad checksum: rejected
]
LINES = "".join(json.dumps({"frame_id": k, "frame": f}) + "\n" for k, f in FRAMES)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    result = CliRunner().invoke(cli, ["--db", url, "ingest", "ussd"], input=LINES)
    assert result.exit_code == 0, result.output
    return url


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "on_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "160")


def invoke(db: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


READS = [
    ("stats",),
    ("inboxes",),
    ("records", "ussd"),
    ("record", "1"),
    ("lookup", "ussd", "rec1-1"),
    ("quarantine", "list"),
    ("quarantine", "show", "1"),
    ("dead-letters",),
    ("dead-letters", "show", "1"),
    ("token", "list"),
    ("consumers", "list"),
    ("triage", "ussd"),
    ("forwarding", "list"),
    ("work", "list"),
]


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_piped_or_with_json_every_read_prints_the_same_json(db: str, args: tuple[str]) -> None:
    piped = invoke(db, *args).stdout
    json.loads(piped)  # JSON, whole
    assert invoke(db, *args, "--json").stdout == piped  # the command's own --json
    assert invoke(db, "--json", *args).stdout == piped  # the global one


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_on_a_terminal_every_read_prints_for_a_person(
    db: str, args: tuple[str], terminal: None
) -> None:
    shown = invoke(db, *args).stdout
    with pytest.raises(ValueError):
        json.loads(shown)
    # --json: JSON on a terminal too, the same as piped
    piped = json.loads(invoke(db, *args, "--json").stdout)
    assert json.loads(invoke(db, "--json", *args).stdout) == piped


def test_a_table_names_its_columns_and_counts_in_iso_time(db: str, terminal: None) -> None:
    stats = invoke(db, "stats", "ussd").stdout
    for heading in ("accepted", "duplicate", "conflict", "rejected", "dead letters"):
        assert heading in stats
    assert "bad_checksum 1" in stats
    letters = invoke(db, "dead-letters").stdout
    assert "bad_checksum" in letters and "H1|2|Kakuma1|MED|3|86|#00" in letters
    assert "T" in letters.splitlines()[2] and "Z" in letters  # 2030-01-15T08:00:00Z
    tokens = CliRunner().invoke(cli, ["--db", db, "token", "create", "t1", "--inbox", "ussd"])
    assert tokens.exit_code == 0
    listed = invoke(db, "token", "list").stdout
    created = json.loads(invoke(db, "token", "list", "--json").stdout)[0]["created_at"]
    assert created.endswith("Z")  # ISO 8601 in the JSON ...
    assert created[:16] in listed  # ... and in the table


def test_quarantine_show_puts_the_two_side_by_side_with_what_changed(
    db: str, terminal: None
) -> None:
    shown = invoke(db, "quarantine", "show", "1").stdout
    [headcount] = [line for line in shown.splitlines() if "headcount" in line]
    assert "3" in headcount and "9" in headcount and "3 -> 9" in headcount
    [need] = [line for line in shown.splitlines() if line.lstrip("│ ").startswith("need")]
    assert "->" not in need  # a field that agrees is not marked
    listed = invoke(db, "quarantine", "list").stdout
    assert "headcount 3 -> 9" in listed


def test_quarantine_show_as_json_adds_the_diff_to_what_it_printed(db: str) -> None:
    shown = json.loads(invoke(db, "quarantine", "show", "1", "--json").stdout)
    assert shown["diff"] == [{"field": "headcount", "old": 3, "new": 9, "text": "3 -> 9"}]
    assert shown["fields"]["headcount"] == 9 and shown["original"]["fields"]["headcount"] == 3
    assert list(shown)[-1] == "diff"  # every key of before, in its order, then the diff


def test_the_fields_agreeing_quarantine_show_gives_the_bytes_that_differ(
    tmp_path: Path, terminal: None
) -> None:
    url = f"sqlite:///{tmp_path / 'bytes.db'}"
    box = oncebox.open(url)
    box.ingest("ussd", Delivery(b"H1|3|Kakuma1|WAT|12|69|#1a", key="rec3"))
    box.ingest("ussd", Delivery(b"H1|3|Kakuma1|WAT|12|69|#1A", key="rec3"))  # the case only
    box.close()
    shown = invoke(url, "quarantine", "show", "1").stdout
    assert "The fields agree; the bytes differ from byte 25:" in shown
    assert "original  …WAT|12|69|#1[a]" in shown and "newcomer  …WAT|12|69|#1[A]" in shown
    assert json.loads(invoke(url, "quarantine", "show", "1", "--json").stdout)["diff"] == []


def test_long_values_are_cut_and_control_characters_spelled_out(
    tmp_path: Path, terminal: None
) -> None:
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    box = oncebox.open(url)
    hostile = "H1|1|K\x1b[2J\x1b]0;pwned\x07|MED|3|86|#00" + "x" * 300
    box.ingest("ussd", Delivery(hostile.encode(), key="evil"))
    box.close()
    shown = invoke(url, "dead-letters").stdout
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in shown
    assert "…" in shown and "x" * 300 not in shown
    whole = invoke(url, "dead-letters", "show", "1").stdout
    assert "\x1b" not in whole and "\\x1b]0;pwned\\x07" in whole


def test_an_empty_listing_says_so_on_a_terminal_and_is_an_empty_array_piped(
    db: str, terminal: None
) -> None:
    assert invoke(db, "quarantine", "list", "--status", "kept").stdout.strip() == "none"
    assert json.loads(invoke(db, "quarantine", "list", "--status", "kept", "--json").stdout) == []


def test_triage_keeps_its_formats(db: str, terminal: None) -> None:
    assert invoke(db, "triage", "ussd", "--format", "csv").stdout.startswith("site,need,")
    assert json.loads(invoke(db, "triage", "ussd", "--format", "json").stdout)["headcount"] == 3
    table = invoke(db, "triage", "ussd").stdout
    assert "Kakuma1" in table and "every arrival headcount 6" in table


def test_ingest_ends_with_its_count_on_stderr_and_keeps_stdout_decisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'count.db'}"
    for flags in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["--db", url, *flags, "ingest", "ussd"], input=LINES)
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["verdict"] for line in result.stdout.splitlines()] == (
            ["accepted", "duplicate", "conflict", "rejected"]
            if not flags
            else ["duplicate", "duplicate", "conflict", "rejected"]
        )
        assert result.stderr.splitlines()[-1] == (
            "ingested 4: 1 accepted, 1 duplicate, 1 conflict, 1 rejected (bad_checksum 1)"
            if not flags
            else "ingested 4: 0 accepted, 2 duplicate, 1 conflict, 1 rejected (bad_checksum 1)"
        )


def test_the_count_line_says_rejections_by_reason_most_first() -> None:
    verdicts = {"accepted": 1_100, "duplicate": 90, "conflict": 4, "rejected": 10}
    reasons = {
        "rejected:bad_field": 3,
        "rejected:bad_checksum": 7,
        "conflict:same_identity_different_content": 4,
    }
    assert tally(verdicts, reasons) == (
        "ingested 1,204: 1,100 accepted, 90 duplicate, 4 conflict, "
        "10 rejected (bad_checksum 7, bad_field 3)"
    )
    assert tally({}, {}) == "ingested 0: 0 accepted, 0 duplicate, 0 conflict, 0 rejected"
