"""Differential checker for speed rounds: the code before and after must agree on everything.

A speed round (issue 24) may change how fast oncebox decides, never what it decides or
stores. This plays the same seeded histories through two source trees and compares
everything observable: every decision (as its dict) and every error (type and message),
the library's log lines, then every table of the store row by row, the log's entries,
``verify``, a checkpoint and inclusion and consistency proofs.

Each side runs in its own subprocess with ``PYTHONPATH=<side>/src`` (the two never share
a module), on a fresh store per history, under a ``ManualClock``; the histories are in
reliability/_differential_history.py and the player in reliability/_differential_play.py.
A side is a directory (a checkout, or its ``src``) or a git revision of this repository,
exported with ``git archive REV src``. PostgreSQL runs on a throwaway server on a unix
socket (or ``ONCEBOX_TEST_PG``), a fresh database per history and side.

    .venv/bin/python reliability/differential.py --before 8ac9c74 --after HEAD
    .venv/bin/python reliability/differential.py --before main --after /work/wt-x \\
        --backend sqlite-file --histories 50 --seed 7

With ``--cross SIDE`` it plays one side's code on two backends instead (by default
SQLite file and PostgreSQL) and compares what oncebox promises is the same on both: every
decision and error, with the ids each store allocates compared as a one-to-one renaming
(reliability/_differential_cross.py says exactly what is normalised, and why).

    .venv/bin/python reliability/differential.py --cross HEAD --histories 40 --steps 150

Exit status: 0 when both sides agree on every backend, 1 on any difference (the first
ones are printed: backend, history, step, what differed), 2 when the harness itself
failed (a side crashed, or the two sides were given different histories).

Two things are held still rather than compared, both only on PostgreSQL: when each
migration was applied (the database's own clock), and the order in which an eviction
pass's ``UPDATE`` / ``DELETE ... RETURNING`` hands its rows to the engine, which
PostgreSQL does not fix (the player sorts them; reliability/_differential_play.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from _differential_cross import compare_cross
from _differential_dump import figures, outcomes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLAYER = HERE / "_differential_play.py"
BACKENDS = ("sqlite-file", "sqlite-memory", "postgres")


def source_of(side: str, into: Path, repo: Path) -> Path:
    """The ``src`` directory of a side: a directory as given, else ``git archive REV src``."""
    given = Path(side)
    for candidate in (given / "src", given):
        if (candidate / "oncebox" / "__init__.py").is_file():
            return candidate.resolve()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", side, "src"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip()
        broken(f"{side!r} is neither a source tree nor a revision of {repo}: {why}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def broken(why: str) -> NoReturn:
    """The harness cannot compare: exit 2, never 1 (which says the sides differ)."""
    print(f"harness broken: {why}", file=sys.stderr)
    raise SystemExit(2)


def revision_name(side: str, repo: Path) -> str:
    """The side as given, with its commit where it is a revision (for the report)."""
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", side],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{side} ({found.stdout.strip()})" if found.returncode == 0 else side


@contextlib.contextmanager
def postgres(needed: bool) -> Iterator[str | None]:
    """The admin URL of a throwaway server (stopped afterwards), when PostgreSQL is run."""
    if not needed:
        yield None
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from pgcluster import throwaway_server

    with throwaway_server("oncebox-diff-pg-") as server:
        yield server.url("postgres")


def play(
    src: Path, side: str, backend: str, args: argparse.Namespace, work: Path, admin: str | None
) -> subprocess.Popen[bytes]:
    """One side's player on one backend; with ``--cross``, picking rows by content."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE)])}
    env.pop("ONCEBOX_CRASH_AT", None)
    command = [
        sys.executable,
        str(PLAYER),
        "--backend",
        backend,
        "--side",
        side,
        "--seed",
        str(args.seed),
        "--histories",
        str(args.histories),
        "--steps",
        str(args.steps),
        "--out",
        str(work / f"{backend}-{side}.json"),
    ]
    if admin:
        command += ["--pg-admin", admin]
    if args.cross:
        command.append("--cross")
    err = (work / f"{backend}-{side}.stderr").open("wb")
    return subprocess.Popen(command, env=env, stdout=err, stderr=err, cwd=work)


Difference = tuple[str, Any, Any]


def differences(a: Any, b: Any, path: str = "") -> Iterator[Difference]:
    """Where two JSON values differ (a path), and what each side has there, in the order
    they were dumped (a decision's verdict before its detail, a log entry's state before
    its hash)."""
    if type(a) is not type(b):
        yield path, a, b
    elif isinstance(a, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                yield f"{path}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>")
            else:
                yield from differences(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from differences(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            yield f"{path} (length)", len(a), len(b)
    elif a != b:
        yield path, a, b


def first_difference(a: Any, b: Any) -> Difference | None:
    return next(differences(a, b), None)


def _said_first(a: Any, b: Any, most: int = 3) -> str | None:
    """The first few differences of a value, or None when there is none."""
    found = list(itertools.islice(differences(a, b), most + 1))
    if not found:
        return None
    said = "; ".join(_said(diff) for diff in found[:most])
    return said + ("; ..." if len(found) > most else "")


def compare(before: dict[str, Any], after: dict[str, Any], backend: str) -> list[str]:
    """Every difference between two dumps, one line each (steps first, then the end)."""
    found: list[str] = []
    for number, (a, b) in enumerate(zip(before["histories"], after["histories"], strict=True)):
        if a["plan"] != b["plan"]:
            broken(f"history {number} was not the same calls on both sides")
        where = f"{backend} history {number}"
        for step, (x, y) in enumerate(zip(a["steps"], b["steps"], strict=True)):
            said = _said_first(x, y)
            if said:
                found.append(f"{where} step {step}: {said}")
        if backend == "postgres" and not (a["eviction_order_fixed"] and b["eviction_order_fixed"]):
            broken(f"{where}: a side's eviction order could not be held still (see the player)")
        for part in ("log", "verify", "checkpoint", "proofs"):
            said = _said_first(a[part], b[part], most=1)
            if said:
                found.append(f"{where} at the end, {part}: {said}")
        for table in sorted(set(a["tables"]) | set(b["tables"])):
            old, new = a["tables"].get(table), b["tables"].get(table)
            if table == "schema_version":
                new = _without_newer_migrations(old, new)
            found += _table_differences(where, table, old, new)
    return found


def _without_newer_migrations(before: Any, after: Any) -> Any:
    """``after``'s schema_version without the rows of migrations newer than any the
    side before ships: a round may add a migration (a function rewritten, an index),
    whose bookkeeping row is no decision, stored record or log entry; what it changes
    shows in every other table. A migration both sides ship is compared as any row."""
    if before is None or after is None or "version" not in before["columns"]:
        return after
    at = before["columns"].index("version")
    known = max((row[at] for row in before["rows"]), default=0)
    return {**after, "rows": [row for row in after["rows"] if row[at] <= known]}


def _table_differences(where: str, table: str, a: Any, b: Any) -> list[str]:
    if a is None or b is None:
        return [f"{where} table {table}: only {'after' if a is None else 'before'} has it"]
    if a["columns"] != b["columns"]:
        gone = [c for c in a["columns"] if c not in b["columns"]]
        new = [c for c in b["columns"] if c not in a["columns"]]
        what = f"only before {gone}, only after {new}" if gone or new else "in another order"
        return [f"{where} table {table}: columns differ: {what}"]
    rows_a, rows_b = a["rows"], b["rows"]
    if rows_a == rows_b:
        return []
    listed_a = {json.dumps(r) for r in rows_a}
    listed_b = {json.dumps(r) for r in rows_b}
    only_a = [r for r in rows_a if json.dumps(r) not in listed_b]
    only_b = [r for r in rows_b if json.dumps(r) not in listed_a]
    line = f"{where} table {table}: {len(rows_a)} rows before, {len(rows_b)} after"
    line += f"; {len(only_a)} only before, {len(only_b)} only after"
    columns = a["columns"]
    paired = {json.dumps(r[0]): r for r in only_b if r}
    for row in only_a[:1]:
        other = paired.get(json.dumps(row[0])) if row else None
        if other is not None:  # the same first column (the id, mostly): what changed in it
            changed = [
                f"{c} {_short(x, 80)} before / {_short(y, 80)} after"
                for c, x, y in zip(columns, row, other, strict=True)
                if x != y
            ]
            return [f"{line}\n      {columns[0]}={_short(row[0], 80)}: " + "; ".join(changed)]
    for label, rows in (("before", only_a), ("after", only_b)):
        if rows:
            shown = dict(zip(columns, rows[0], strict=True))
            line += f"\n      first only {label}: {_short(shown, 400)}"
    return [line]


def _said(diff: tuple[str, Any, Any]) -> str:
    path, a, b = diff
    return f"{path or '(whole value)'}: before {_short(a)} / after {_short(b)}"


def _short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + "\n\n".join(__doc__.split("\n\n")[3:7]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--before", help="a directory or a git revision")
    parser.add_argument("--after", help="a directory or a git revision")
    parser.add_argument(
        "--cross",
        metavar="SIDE",
        help="instead: this directory or revision on two backends, compared with each other",
    )
    parser.add_argument(
        "--backend",
        help=f"comma-separated, of {', '.join(BACKENDS)} (default: all; with --cross, "
        "two of them, default sqlite-file,postgres)",
    )
    parser.add_argument("--histories", type=int, default=20, help="per backend (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="the histories' seed (default 1)")
    parser.add_argument("--steps", type=int, default=70, help="calls per history (default 70)")
    parser.add_argument("--show", type=int, default=10, help="differences printed per backend")
    parser.add_argument("--repo", type=Path, default=ROOT, help="where revisions are looked up")
    parser.add_argument("--keep", type=Path, help="keep the dumps in this directory")
    args = parser.parse_args(argv)
    # Stopped from outside: leave as from an interrupt, the sides and the server stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    default = "sqlite-file,postgres" if args.cross else ",".join(BACKENDS)
    backends = [b.strip() for b in (args.backend or default).split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"unknown backend {unknown}: choose from {', '.join(BACKENDS)}")
    if args.cross and (args.before or args.after or len(set(backends)) != 2):
        parser.error("--cross takes one side and two backends, without --before or --after")
    if args.cross and "sqlite-memory" in backends:  # its reopen steps are not reopens
        parser.error("--cross plays the same calls on both: sqlite-memory cannot reopen")
    if not args.cross and not (args.before and args.after):
        parser.error("--before and --after are both needed (or --cross)")
    work = Path(tempfile.mkdtemp(prefix="oncebox-differential-"))
    try:
        if args.cross:
            return cross(args, backends, work)
        sides = {
            side: source_of(getattr(args, side), work / side, args.repo)
            for side in ("before", "after")
        }
        print(f"before: {revision_name(args.before, args.repo)}  {sides['before']}")
        print(f"after:  {revision_name(args.after, args.repo)}  {sides['after']}")
        print(f"seed {args.seed}, {args.histories} histories of {args.steps} calls per backend")
        differences = 0
        with postgres("postgres" in backends) as admin:
            for backend in backends:
                differences += run_backend(backend, sides, args, work, admin)
        keep_dumps(work, args.keep)
        print("IDENTICAL" if not differences else f"DIFFERENT: {differences} differences")
        return 1 if differences else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def finished(
    children: dict[tuple[str, str], subprocess.Popen[bytes]], work: Path, srcs: dict[str, Path]
) -> list[dict[str, Any]]:
    """The dumps of players started as {(backend, side): child}, once all have ended."""
    try:
        codes = {run: child.wait() for run, child in children.items()}
    finally:  # interrupted: no side left running (the server stops on the way out)
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    for (backend, side), code in codes.items():
        if code != 0:
            err = (work / f"{backend}-{side}.stderr").read_text(errors="replace")
            broken(f"the {side} side failed on {backend} (exit {code}):\n{err[-3000:]}")
    dumps = []
    for backend, side in children:
        dump = json.loads((work / f"{backend}-{side}.json").read_text())
        if not Path(dump["oncebox"]).is_relative_to(srcs[side]):
            broken(f"the {side} side ran the oncebox at {dump['oncebox']}, not {srcs[side]}")
        dumps.append(dump)
    return dumps


def run_backend(
    backend: str, sides: dict[str, Path], args: argparse.Namespace, work: Path, admin: str | None
) -> int:
    started = time.monotonic()
    children = {
        (backend, side): play(src, side, backend, args, work, admin) for side, src in sides.items()
    }
    before, after = finished(children, work, sides)
    found = compare(before, after, backend)
    histories, deliveries, steps = figures(before)
    tables = sum(len(h["tables"]) for h in before["histories"])
    print(
        f"{backend}: {histories} histories, {deliveries} deliveries, {steps} steps, "
        f"{tables} tables compared: {len(found)} differences "
        f"({time.monotonic() - started:.0f} s)"
    )
    print("  " + ", ".join(f"{name} {n}" for name, n in sorted(outcomes(before).items())))
    for line in found[: args.show]:
        print(f"  {line}")
    if len(found) > args.show:
        print(f"  ... and {len(found) - args.show} more")
    return len(found)


def cross(args: argparse.Namespace, backends: list[str], work: Path) -> int:
    """``--cross``: one side on two backends, compared with each other."""
    src = source_of(args.cross, work / "cross", args.repo)
    print(f"cross: {revision_name(args.cross, args.repo)}  {src}")
    print(f"seed {args.seed}, {args.histories} histories of {args.steps} calls on each of "
          f"{' and '.join(backends)}")  # fmt: skip
    started = time.monotonic()
    with postgres("postgres" in backends) as admin:
        children = {(b, "cross"): play(src, "cross", b, args, work, admin) for b in backends}
        first, second = finished(children, work, {"cross": src})
    try:
        found = list(compare_cross(first, second, (backends[0], backends[1])))
    except ValueError as exc:
        broken(str(exc))
    histories, deliveries, steps = figures(first)
    print(
        f"{histories} histories, {deliveries} deliveries, {steps} steps on each: "
        f"{len(found)} differences ({time.monotonic() - started:.0f} s)"
    )
    for backend, dump in zip(backends, (first, second), strict=True):
        print(f"  {backend}: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes(dump).items())))
    for line in found[: args.show]:
        print(f"  {line}")
    if len(found) > args.show:
        print(f"  ... and {len(found) - args.show} more")
    keep_dumps(work, args.keep)
    print("THE SAME ON BOTH" if not found else f"DIFFERENT: {len(found)} differences")
    return 1 if found else 0


def keep_dumps(work: Path, keep: Path | None) -> None:
    """Copy a run's dumps to ``--keep``'s directory, where one was given."""
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        for dump in work.glob("*.json"):
            shutil.copy(dump, keep / dump.name)


if __name__ == "__main__":
    sys.exit(main())
