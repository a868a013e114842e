"""Issue 19, item 4's probes against a real ``oncebox serve`` (and ``oncebox triage``):
the figures of RELIABILITY.md's ``## Security (issue 19)`` rows for item 4.

Each probe prints one line. Run on the code before the fix (``git checkout 240cb66 --
src``), it prints the negative control: the forged lines, the trusted header, the
reflected host, the formulas, the writes.

- **conflict**: ``--conflicts`` keyed conflicts whose keys hold a line separator
  (``\\n \\r \\x0b \\x0c \\x1c \\x1d \\x1e \\x85 \\u2028 \\u2029``) and then a forged warning;
  warning lines as ``str.splitlines`` reads stderr, and how many are forged.
- **access**: ``--requests`` requests with such separators percent-encoded in the path
  and U+0085 in the User-Agent, in both log formats; access lines read against requests
  made, and JSON lines that do not parse.
- **forwarded**: ``--requests`` requests from 127.0.0.1 with ``X-Forwarded-For: 6.6.6.6``
  (and a hostile value); lines naming a client other than the peer, by default and with
  ``--forwarded-allow-ips 127.0.0.1`` (whose lines must still be one each).
- **redirect**: ``--requests`` trailing-slash requests with ``Host: evil.example``;
  ``Location`` headers naming a host.
- **csv**: every blank prefix times every formula opener as a triage site, exported by
  ``oncebox triage --format csv``; cells a spreadsheet would run.
- **readyz**: ``--clients`` clients flooding ``/readyz``, then ``/healthz``, for
  ``--seconds`` each, ``--rounds`` times; requests a second and store writes a second (a
  trigger in the store counts them).

    .venv/bin/python reliability/smallones.py               # about a minute
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serveproc import ONCEBOX, Served, closed_within, create_token, serving  # noqa: E402

SPLITTERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
FORGED = "oncebox: conflict quarantined: inbox=k identity=forged record=99 quarantine=99"
CONFIG = '[inboxes.k]\ncodec = "keyed"\n'
COMBINED = re.compile(r'^\S+ - - \[[^\]]+\] "[^"]*" \d{3} \S+ "[^"]*" "[^"]*"$')
TRIAGE = """[inboxes.sessions]
codec = "json"
apply = "triage"
identity = ["/session"]
fields = { site = "/site", need = "/need", headcount = "/count", pri = "/pri" }
"""
BLANKS = ["", "\n", " ", "\t", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x0b", "\x0c", "\x85",
          "\u2028", "\u2029", "\xa0", "\u3000", " \n\x1c\x85 "]  # fmt: skip
OPENERS = ["=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20", "\ufe66", "\ufe62",
           "\ufe63", "\ufe6b"]  # fmt: skip


@contextlib.contextmanager
def served(work: Path, *args: str) -> Iterator[tuple[Served, Path]]:
    """``oncebox serve --workers 1 ARGS`` on a fresh store in ``work``; its stderr file."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "oncebox.toml").write_text(CONFIG)
    url, err = f"sqlite:///{work / 'served.db'}", work / "stderr.log"
    env = {"ONCEBOX_CONFIG": str(work / "oncebox.toml")}
    with err.open("wb") as out, serving(url, "--workers", "1", *args, env=env, stderr=out) as s:
        yield s, err


def raw(s: Served, head: bytes) -> bytes:
    with s.connect() as sock:
        sock.sendall(head + b"Connection: close\r\n\r\n")
        return closed_within(sock, 5)[1]


def stderr_lines(err: Path) -> list[str]:
    return err.read_bytes().decode("utf-8").splitlines()


def access_lines(err: Path) -> list[str]:
    return [x for x in stderr_lines(err) if not x.startswith(("oncebox:", "WARNING:"))]


def conflict(work: Path, count: int) -> None:
    keys = [f"x{n}{SPLITTERS[n % len(SPLITTERS)]}{FORGED}" for n in range(count)]
    with served(work) as (s, err):
        secret = create_token(f"sqlite:///{work / 'served.db'}")
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/x-ndjson"}
        for body in ("a", "b"):
            lines = "\n".join(json.dumps({"body": body, "key": key}) for key in keys)
            httpx.post(f"{s.base}/v1/inboxes/k/batch", content=lines, headers=headers, timeout=60)
    warnings = [x for x in stderr_lines(err) if x.startswith("oncebox: conflict quarantined")]
    forged = sum(x.startswith(FORGED) for x in warnings)
    print(f"conflict: {count} conflicts -> {len(warnings)} warning lines, {forged} forged")


def access(work: Path, count: int) -> None:
    for form in ("combined", "json"):
        with served(work / form, "--log-format", form) as (s, err):
            for n in range(count):
                char = SPLITTERS[n % len(SPLITTERS)].encode()
                path = "".join(f"%{b:02X}" for b in char)
                head = f"GET /v1/inboxes/a{path}b/triage HTTP/1.1\r\nHost: x\r\n".encode()
                raw(s, head + b"User-Agent: agent\xc2\x85forged\r\n")
        lines = access_lines(err)[1:]  # after serving()'s readiness check
        unread = sum(not _reads(form, x) for x in lines)
        print(f"access ({form}): {count} requests -> {len(lines)} lines, {unread} unreadable")


def _reads(form: str, line: str) -> bool:
    """Whether ``line`` is a whole access line of ``form``."""
    if form == "combined":
        return COMBINED.match(line) is not None
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def forwarded(work: Path, count: int) -> None:
    hostile = b'6.6.6.6\xc2\x85forged - - [01/Jan/2030] "GET /x"'
    for name, args in (("default", ()), ("trusted", ("--forwarded-allow-ips", "127.0.0.1"))):
        try:
            with served(work / name, *args) as (s, err):
                for n in range(count):
                    value = b"6.6.6.6" if n % 2 else hostile
                    raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n" % value)
        except AssertionError:
            print(f"forwarded ({name}): oncebox serve has no such option")
            continue
        lines = access_lines(err)[1:]
        believed = sum(not x.startswith("127.0.0.1 ") for x in lines)
        unread = sum(not _reads("combined", x) for x in lines)
        print(f"forwarded ({name}): {count} requests -> {len(lines)} lines, "
              f"{believed} naming the forwarded client, {unread} unreadable")  # fmt: skip


def redirect(work: Path, count: int) -> None:
    targets = ["/healthz/", "/console/", "/v1/inboxes/k/triage/", "/console/triage/?x=1"]
    with served(work) as (s, _):
        hosts = 0
        for n in range(count):
            target = targets[n % len(targets)]
            answer = raw(s, f"GET {target} HTTP/1.1\r\nHost: evil.example\r\n".encode())
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            hosts += b"location: http" in head or b"location: //" in head
    print(f"redirect: {count} trailing-slash requests -> {hosts} Locations naming a host")


def formulas(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "oncebox.toml").write_text(TRIAGE)
    env = {**os.environ, "ONCEBOX_CONFIG": str(work / "oncebox.toml"),
           "ONCEBOX_DB": f"sqlite:///{work / 'triage.db'}"}  # fmt: skip
    sites = [blank + opener + "HYPERLINK(1)" for blank in BLANKS for opener in OPENERS]
    frames = [
        json.dumps({"session": f"s{n}", "site": site, "need": "MED", "count": 1, "pri": 5})
        for n, site in enumerate(sites)
    ]
    subprocess.run([*ONCEBOX, "ingest", "sessions", "-"], input="\n".join(frames).encode(),
                   env=env, check=True, capture_output=True)  # fmt: skip
    out = subprocess.run([*ONCEBOX, "triage", "sessions", "--format", "csv"], env=env,
                         check=True, capture_output=True).stdout.decode()  # fmt: skip
    rows = list(csv.reader(io.StringIO(out)))
    cells = [row[rows[0].index("site")] for row in rows[1:]]
    runs = sum(_formula(cell) for cell in cells)
    print(f"csv: {len(sites)} formula sites -> {len(cells)} cells, {runs} a spreadsheet runs")


def _formula(cell: str) -> bool:
    if cell.startswith("'"):
        return False
    for char in unicodedata.normalize("NFKC", cell):
        if not char.isspace() and char.isprintable():
            return char in "=+-@"
    return False


def flood(work: Path, clients: int, seconds: float, rounds: int) -> None:
    with served(work):
        pass  # the schema, made by the server
    with sqlite3.connect(work / "served.db") as conn:
        conn.executescript(
            "CREATE TABLE probe_writes (n INTEGER NOT NULL); INSERT INTO probe_writes VALUES (0);"
            "CREATE TRIGGER pi AFTER INSERT ON meta WHEN NEW.key = 'ready_probe' "
            "BEGIN UPDATE probe_writes SET n = n + 1; END;"
            "CREATE TRIGGER pu AFTER UPDATE ON meta WHEN NEW.key = 'ready_probe' "
            "BEGIN UPDATE probe_writes SET n = n + 1; END;"
        )
    rates: dict[str, list[float]] = {"/readyz": [], "/healthz": []}
    writes: dict[str, list[float]] = {"/readyz": [], "/healthz": []}
    with served(work) as (s, _):
        for _ in range(rounds):  # alternated: the machine is shared, its load moves
            for route in rates:
                before = _writes(work)
                rates[route].append(_flood(s.base + route, clients, seconds) / seconds)
                writes[route].append((_writes(work) - before) / seconds)
    for route in rates:
        print(f"readyz: {route} x {clients} clients, {rounds} x {seconds:.0f} s: "
              f"{statistics.median(rates[route]):.0f} requests/s (median; "
              f"{min(rates[route]):.0f} to {max(rates[route]):.0f}), "
              f"{statistics.median(writes[route]):.1f} store writes/s")  # fmt: skip


def _writes(work: Path) -> int:
    with sqlite3.connect(work / "served.db") as conn:
        return int(conn.execute("SELECT n FROM probe_writes").fetchone()[0])


def _flood(url: str, clients: int, seconds: float) -> int:
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        with httpx.Client() as http:
            while time.monotonic() < stop:
                http.get(url)
                counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conflicts", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="oncebox-smallones-") as tmp:
        work = Path(tmp)
        conflict(work / "conflict", args.conflicts)
        access(work / "access", args.requests)
        forwarded(work / "forwarded", args.requests)
        redirect(work / "redirect", args.requests)
        formulas(work / "csv")
        flood(work / "readyz", args.clients, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
