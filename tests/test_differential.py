"""reliability/differential.py, the speed rounds' safety net, must see what it is for.

The same tree on both sides agrees; a copy of ``src`` with one line rewritten (a lease
that runs out at its expiry instant rather than just after it) is reported, with the
history and step where it first shows. SQLite only, a few histories: about 10 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "reliability" / "differential.py"
sys.path.insert(0, str(ROOT / "reliability"))

from _differential_cross import compare_cross  # noqa: E402
from _differential_history import cksum, fingerprint, frame, history  # noqa: E402
from conftest import Server  # noqa: E402
from differential import compare, first_difference  # noqa: E402

FENCE = ROOT / "src" / "oncebox" / "engine" / "fence.py"
EXPIRY_RULE = "    if now > lease.expires_at:\n"


def differential(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--seed", "1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def against_root(after: Path, backends: str, histories: int) -> subprocess.CompletedProcess[str]:
    """This tree before, ``after`` after, on ``backends``."""
    return differential("--before", str(ROOT), "--after", str(after), "--backend", backends,
                        "--histories", str(histories))  # fmt: skip


def copy_of_src(into: Path) -> Path:
    shutil.copytree(ROOT / "src", into / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def test_the_same_tree_on_both_sides_is_identical(tmp_path: Path) -> None:
    copy = copy_of_src(tmp_path / "copy")
    ran = against_root(copy, "sqlite-memory,sqlite-file", histories=2)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "sqlite-memory: 2 histories" in ran.stdout
    assert "sqlite-file: 2 histories" in ran.stdout
    assert ran.stdout.rstrip().endswith("IDENTICAL")


def test_a_lease_expiring_at_its_instant_is_reported(tmp_path: Path) -> None:
    broken = copy_of_src(tmp_path / "broken")
    fence = broken / "src" / "oncebox" / "engine" / "fence.py"
    text = fence.read_text()
    assert text.count(EXPIRY_RULE) == 1, "the fence's expiry rule moved: update this test"
    fence.write_text(text.replace(EXPIRY_RULE, "    if now >= lease.expires_at:\n"))
    ran = against_root(broken, "sqlite-memory", histories=2)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "DIFFERENT" in ran.stdout
    # The first difference names its history and step, and what each side answered.
    first = re.search(r"sqlite-memory history (\d+) step (\d+): (.*)", ran.stdout)
    assert first is not None, ran.stdout
    assert first[3].startswith('.ok.verdict: before "accepted" / after "rejected"; '), first[0]
    assert '.ok.reason: before null / after "expired_lease"' in first[3], first[0]


def test_a_table_or_a_row_only_one_side_has_is_reported(tmp_path: Path) -> None:
    broken = copy_of_src(tmp_path / "broken")
    schema = broken / "src" / "oncebox" / "store" / "sql" / "sqlite" / "schema.sql"
    with schema.open("a") as extra:
        extra.write("CREATE TABLE spare (id INTEGER PRIMARY KEY);\n")
        extra.write("INSERT INTO meta (key, value) VALUES ('spare', 'x');\n")
    ran = against_root(broken, "sqlite-file", histories=1)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "sqlite-file history 0 table spare: only after has it" in ran.stdout
    assert "sqlite-file history 0 table meta: " in ran.stdout
    assert 'first only after: {"key": "spare", "value": "x"}' in ran.stdout


def _dump(versions: list[int], spare: list[list[object]]) -> dict[str, object]:
    """A dump of one history with no steps: its schema_version rows and one table."""
    history = {
        "plan": "p", "steps": [], "eviction_order_fixed": True,
        **{part: None for part in ("log", "verify", "checkpoint", "proofs")},
        "tables": {
            "schema_version": {"columns": ["version", "applied_at"],
                               "rows": [[v, "<not compared>"] for v in versions]},
            "spare": {"columns": ["id"], "rows": spare},
        },
    }  # fmt: skip
    return {"histories": [history]}


def test_a_migration_only_the_side_after_ships_is_its_bookkeeping_alone() -> None:
    """A round may add a migration: its schema_version row, after the last migration the
    side before ships, is not a difference; a row of a migration both ship still is, and
    so is whatever the migration changed in another table."""
    assert compare(_dump([1, 2], [[1]]), _dump([1, 2, 3], [[1]]), "postgres") == []
    assert compare(_dump([1, 2], [[1]]), _dump([1, 3], [[1]]), "postgres") != []
    assert compare(_dump([1, 2, 3], [[1]]), _dump([1, 2], [[1]]), "postgres") != []
    changed = compare(_dump([1, 2], [[1]]), _dump([1, 2, 3], [[2]]), "postgres")
    assert len(changed) == 1 and "table spare" in changed[0], changed


def test_a_side_that_cannot_run_is_a_broken_harness_not_a_difference(tmp_path: Path) -> None:
    broken = copy_of_src(tmp_path / "broken")
    (broken / "src" / "oncebox" / "__init__.py").write_text("raise ImportError('no')\n")
    ran = against_root(broken, "sqlite-memory", histories=1)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "harness broken: the after side failed" in ran.stderr


def test_a_revision_that_does_not_exist_is_refused() -> None:
    ran = differential("--before", "no-such-revision-anywhere", "--after", str(ROOT))
    assert ran.returncode == 2
    assert "neither a source tree nor a revision" in ran.stderr


def test_histories_are_the_same_calls_for_the_same_seed() -> None:
    assert fingerprint(*history(3, 5)) == fingerprint(*history(3, 5))
    assert fingerprint(*history(3, 5)) != fingerprint(*history(4, 5))
    kinds = {step[0] for n in range(10) for step in history(1, n)[1]}
    assert {
        "ingest",
        "batch",
        "all",
        "each",
        "lease",
        "evict",
        "replay",
        "resolve",
        "consume",
        "forward",
        "reconcile",
        "reopen",
        "seal",
        "recover",
    } <= kinds


def test_the_histories_own_cksum_agrees_with_the_codec() -> None:
    """The histories compute their trailers themselves (a broken codec under test must
    not change the calls); they must still be the trailers the codec wants."""
    from oncebox.formats.cksum import cksum as codec_cksum
    from oncebox.formats.ussd_h1 import make_frame

    for n in range(300):
        data = bytes(range(n % 256)) * (n // 50 + 1)
        assert cksum(data) == codec_cksum(data)
    assert frame(1, "Kakuma1", "MED", 3, 86) == make_frame(1, "Kakuma1", "MED", 3, 86)
    assert frame(1, "Kakuma1", "MED", 3, 86).endswith("#89")


@pytest.mark.parametrize(
    ("before", "after", "where"),
    [
        ({"a": [1, 2]}, {"a": [1, 3]}, ".a[1]"),
        ({"a": [1, 2]}, {"a": [1]}, ".a (length)"),
        ({"a": 1}, {"b": 1}, ".a"),
        ({"a": 1}, {"a": "1"}, ".a"),
    ],
)
def test_first_difference_names_the_path(before: object, after: object, where: str) -> None:
    found = first_difference(before, after)
    assert found is not None and found[0] == where
    assert first_difference(before, before) is None


# --cross: one code on SQLite and PostgreSQL. Seed 20's history 1 picks a quarantine row
# at step 22 that the two stores numbered in another order (a pick by id position would
# play other calls from there on); seed 9's history 1 is the shortest found in which one
# seal takes a record's accept and the resolve that revised it (step 43).
SEAL_MIN = "  SELECT id, min(seq) AS seq FROM unnest(%b::bigint[], %b::bigint[]) AS u(seq, id)\n"
SEAL_MIN += "  GROUP BY id\n"
SEAL_ANY = "  SELECT * FROM unnest(%b::bigint[], %b::bigint[]) AS s(seq, id)\n"


def cross(src: Path, pg_server: Server, seed: int, steps: int) -> subprocess.CompletedProcess[str]:
    """``--cross src`` on SQLite file and PostgreSQL (the session's server), 2 histories."""
    played = ["--seed", str(seed), "--histories", "2", "--steps", str(steps)]
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cross", str(src), *played],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ONCEBOX_TEST_PG": pg_server.url("postgres")},
    )


def test_cross_backends_decide_the_same_histories_alike(pg_server: Server) -> None:
    ran = cross(ROOT, pg_server, seed=20, steps=30)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 histories, " in ran.stdout and "0 differences" in ran.stdout
    assert ran.stdout.rstrip().endswith("THE SAME ON BOTH")


def test_cross_reports_a_seal_that_keeps_a_later_position(
    tmp_path: Path, pg_server: Server
) -> None:
    """PostgreSQL's seal as it was: a record sealed with its revision in one seal kept
    whichever position its statement met first; a duplicate's ``log_position`` then
    differed from SQLite's."""
    broken = copy_of_src(tmp_path / "broken")
    queries = broken / "src" / "oncebox" / "store" / "sql" / "postgres" / "queries.sql"
    text = queries.read_text()
    assert text.count(SEAL_MIN) == 2, "the seal's first-position rule moved: update this test"
    queries.write_text(text.replace(SEAL_MIN, SEAL_ANY))
    ran = cross(broken, pg_server, seed=9, steps=50)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "history 1 step 43 [0]: log_position: sqlite-file 13 / postgres 30" in ran.stdout


def test_cross_takes_one_side_and_two_backends_that_reopen() -> None:
    for args in (
        ["--cross", str(ROOT), "--before", str(ROOT)],
        ["--cross", str(ROOT), "--backend", "sqlite-file"],
        ["--cross", str(ROOT), "--backend", "sqlite-memory,postgres"],
        ["--before", str(ROOT)],
    ):
        ran = differential(*args)
        assert ran.returncode == 2 and "error:" in ran.stderr, args


def decision(**facts: object) -> dict[str, object]:
    found: dict[str, object] = {"verdict": "accepted", "may_ack": True, "identity": "k1"}
    found.update({"record_id": 1, "quarantine_id": None, "log_position": 3, **facts})
    return found


def dumps(*steps: list[object]) -> dict[str, object]:
    history = {"plan": "same", "steps": list(steps), "log": [], "verify": {}, "tables": {}}
    return {"histories": [history]}


def test_cross_compares_store_ids_as_a_renaming_and_the_rest_exactly() -> None:
    """Ids each store allocates may differ, one to one; a log position may not."""
    names = ("sqlite-file", "postgres")
    a = dumps([decision(record_id=1), decision(record_id=2)], {"error": "X", "message": "record 2"})
    same = dumps(
        [decision(record_id=5), decision(record_id=9)], {"error": "X", "message": "record 9"}
    )
    assert list(compare_cross(a, same, names)) == []
    swapped = dumps(
        [decision(record_id=5), decision(record_id=5)], {"error": "X", "message": "record 5"}
    )
    found = list(compare_cross(a, swapped, names))
    assert found[0] == (
        "history 0 step 0 [1]: record_id (not the same renaming): sqlite-file 2 / postgres 5"
    )
    moved = dumps([decision(record_id=5, log_position=4), decision(record_id=9)],
                  {"error": "X", "message": "record 9"})  # fmt: skip
    assert list(compare_cross(a, moved, names)) == [
        "history 0 step 0 [0]: log_position: sqlite-file 3 / postgres 4"
    ]
