"""What docs/cli.md says of `oncebox dead-letters --format ndjson`: piped into `oncebox
ingest`, it delivers the inbox's dead letters again, all of them (as many as the HTTP
`/dead-letters/lines` route and the console's download give), and an export that stops at
`--limit` says so on stderr instead of leaving the rest out unsaid."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import oncebox
from oncebox import Delivery
from oncebox.surfaces.cli import cli

REFUSED = 150  # more than a listing's page of 100


def store(tmp_path: Path) -> str:
    """A store whose ussd inbox holds REFUSED dead letters (a trailer that is no cksum each)."""
    url = f"sqlite:///{tmp_path / 'letters.db'}"
    with oncebox.open(url) as box:
        frames = [Delivery(f"H1|{n}|Kakuma1|MED|3|86|#zz".encode(), key=f"k{n}") for n in
                  range(REFUSED)]  # fmt: skip
        assert {d.verdict for d in box.ingest_all("ussd", frames)} == {"rejected"}
    return url


def export(url: str, *args: str) -> tuple[list[dict[str, object]], str]:
    ran = CliRunner().invoke(
        cli, ["--db", url, "dead-letters", "--inbox", "ussd", "--format", "ndjson", *args]
    )
    assert ran.exit_code == 0, ran.output
    return [json.loads(line) for line in ran.stdout.splitlines()], ran.stderr


def test_the_export_gives_every_dead_letter_by_default(tmp_path: Path) -> None:
    lines, _ = export(store(tmp_path))
    assert [line["dead_letter"] for line in lines] == list(range(1, REFUSED + 1))


def test_an_export_cut_short_by_its_limit_says_where_to_go_on(tmp_path: Path) -> None:
    url = store(tmp_path)
    first, said = export(url, "--limit", "100")
    assert len(first) == 100
    assert "--after 100" in said
    rest, said = export(url, "--after", "100", "--limit", "100")
    assert [line["dead_letter"] for line in rest] == list(range(101, REFUSED + 1))
    assert said == ""
