"""Peers: oncebox against what a user would run instead, measured in one run on 127.0.0.1.

Every side gets the same events: random UUID keys with ~215-byte payloads (oncebox's
``json-event`` side gets bench/synthetic.py's ``json_body(i)`` with the key as its
``notification_id``). Each side ingests N events batched (1,000 at a time), the same N
again (all duplicates), then ``--single-n`` new events one at a time into the same store
(so every side holds N before them), and those again. The sides:

* naive: the inbox a user would write, Python's ``sqlite3``, WAL, ``synchronous=FULL``,
  ``(key TEXT PRIMARY KEY, sha BLOB, payload TEXT)``, ``executemany(INSERT OR IGNORE)``
  in one transaction per batch (or per event); the SHA-256 is computed in the timed loop;
* redis: Redis 7 ``SET key payload NX``, ``appendonly yes``, ``appendfsync always``, per
  event and pipelined 1,000 (redis-py);
* nats: NATS JetStream, file storage, dedup by ``Nats-Msg-Id`` with a one-hour duplicate
  window; sync publish per message and async publish with 1,000 in flight (nats-py);
* keyed, json-event: oncebox on the embedded SQLite store, ``ingest`` per event and
  ``ingest_batch`` of 1,000.

redis-server and nats-server come from Debian's packages (installed with apt-get if
missing), run on free ports with their data in the run's temp dir, and are stopped at the
end, also on error (and killed with this process by PR_SET_PDEATHSIG). Every pass checks
its outcome (all new, then all duplicates) from the sides' own answers. The targets of
issue 12 are printed beside the ratios, never asserted.

    .venv/bin/python bench/peers.py                       # N=100,000, --single-n 20,000
    .venv/bin/python bench/peers.py --n 20000 --single-n 2000 --sides naive,keyed,redis
    .venv/bin/python bench/peers.py --json > peers.json   # tables on stderr, JSON on stdout
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol, TextIO

import oncebox
from synthetic import json_body

Event = tuple[str, bytes]  # (key, payload)
PAYLOAD_BYTES = 215
SIDES = ("naive", "keyed", "json-event", "redis", "nats")
HOW = {  # side: (label, batched, one at a time)
    "naive": ("naive sqlite3 inbox", "1,000 per tx", "1 per tx"),
    "keyed": ("oncebox keyed", "ingest_batch 1,000", "ingest"),
    "json-event": ("oncebox json-event", "ingest_batch 1,000", "ingest"),
    "redis": ("redis SET NX, fsync always", "pipelined 1,000", "per event"),
    "nats": ("nats JetStream Msg-Id", "async, 1,000 in flight", "sync per message"),
}
# Issue 12's targets: (what, numerator, denominator, at least). Printed, never asserted.
TARGETS = [
    ("batched first pass >= 0.5x naive",
     ("keyed", "batched", "first"), ("naive", "batched", "first"), 0.5),
    ("batched first pass >= 1.5x NATS async",
     ("keyed", "batched", "first"), ("nats", "batched", "first"), 1.5),
    ("duplicate pass >= 0.5x naive duplicate pass",
     ("keyed", "batched", "dup"), ("naive", "batched", "dup"), 0.5),
    ("one per tx >= 0.7x naive per event",
     ("keyed", "single", "first"), ("naive", "single", "first"), 0.7),
    ("one per tx >= Redis appendfsync always per event",
     ("keyed", "single", "first"), ("redis", "single", "first"), 1.0),
    ("json-event batched >= 0.3x naive",
     ("json-event", "batched", "first"), ("naive", "batched", "first"), 0.3),
]
NATS_SUBJECT = "peers.in"


def log(message: str) -> None:
    print(f"[peers] {message}", file=sys.stderr, flush=True)


# -- the events ------------------------------------------------------------------------------
def make_events(count: int) -> list[Event]:
    """Random UUID keys; a JSON payload of exactly PAYLOAD_BYTES with random filler."""
    events = []
    for i in range(count):
        key = str(uuid.uuid4())
        fill = PAYLOAD_BYTES - len(json.dumps({"key": key, "seq": i, "data": ""}))
        body = json.dumps({"key": key, "seq": i, "data": os.urandom(fill).hex()[:fill]})
        events.append((key, body.encode()))
    return events


def json_events(events: list[Event], start: int) -> list[Event]:
    """The same keys as json-event bodies: synthetic.json_body with the key as its id."""
    return [(key, json_body(i).replace(f'"n-{i:010d}"'.encode(), f'"{key}"'.encode()))
            for i, (key, _) in enumerate(events, start)]


# -- the sides -------------------------------------------------------------------------------
class Side(Protocol):
    def run(self, events: list[Event], batch: int) -> tuple[float, int]:
        """Time one pass (batch 1: one at a time); return seconds and how many were new."""
        ...

    def close(self) -> None: ...


class Naive:
    INSERT = "INSERT OR IGNORE INTO inbox (key, sha, payload) VALUES (?, ?, ?)"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path)
        mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise SystemExit(f"{path}: no WAL ({mode})")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE inbox (key TEXT PRIMARY KEY, sha BLOB, payload TEXT)")

    def run(self, events: list[Event], batch: int) -> tuple[float, int]:
        conn, sha256, before = self.conn, hashlib.sha256, self.conn.total_changes
        started = time.perf_counter()
        for j in range(0, len(events), batch):
            rows = [(key, sha256(body).digest(), body.decode()) for key, body in
                    events[j:j + batch]]
            with conn:  # BEGIN ... COMMIT (or ROLLBACK)
                conn.executemany(self.INSERT, rows)
        return time.perf_counter() - started, conn.total_changes - before

    def close(self) -> None:
        self.conn.close()


class Box:
    def __init__(self, path: Path, codec: str) -> None:
        self.keyed = codec == "keyed"
        self.inbox = "k" if self.keyed else "j"
        self.box = oncebox.open(f"sqlite:///{path}",
                                inboxes=[oncebox.InboxSpec(self.inbox, codec=codec)])

    def run(self, events: list[Event], batch: int) -> tuple[float, int]:
        box, inbox, delivery = self.box, self.inbox, oncebox.Delivery
        if self.keyed:
            def make(key: str, body: bytes) -> oncebox.Delivery:
                return delivery(body=body, key=key)
        else:
            def make(key: str, body: bytes) -> oncebox.Delivery:
                return delivery(body=body)
        decisions: list[oncebox.Decision] = []
        started = time.perf_counter()
        if batch == 1:
            ingest = box.ingest
            decisions = [ingest(inbox, make(key, body)) for key, body in events]
        else:
            for j in range(0, len(events), batch):
                decisions += box.ingest_batch(inbox, [make(k, b) for k, b in events[j:j + batch]])
        seconds = time.perf_counter() - started
        return seconds, sum(d.verdict == oncebox.Verdict.ACCEPTED for d in decisions)

    def close(self) -> None:
        self.box.close()


class Redis:
    def __init__(self, port: int) -> None:
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=port)
        self.client.ping()

    def run(self, events: list[Event], batch: int) -> tuple[float, int]:
        client, results = self.client, []
        started = time.perf_counter()
        if batch == 1:
            set_nx = client.set
            results = [set_nx(key, body, nx=True) for key, body in events]
        else:
            for j in range(0, len(events), batch):
                pipe = client.pipeline(transaction=False)
                for key, body in events[j:j + batch]:
                    pipe.set(key, body, nx=True)
                results += pipe.execute()
        return time.perf_counter() - started, sum(bool(r) for r in results)

    def close(self) -> None:
        self.client.close()


class Nats:
    def __init__(self, port: int, in_flight: int) -> None:
        import nats
        from nats.js.api import StorageType

        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(f"nats://127.0.0.1:{port}"))
        self.js = self.nc.jetstream(publish_async_max_pending=in_flight)
        self.loop.run_until_complete(self.js.add_stream(
            name="PEERS", subjects=[NATS_SUBJECT], storage=StorageType.FILE,
            duplicate_window=3600.0))

    def run(self, events: list[Event], batch: int) -> tuple[float, int]:
        return self.loop.run_until_complete(self._run(events, batch))

    async def _run(self, events: list[Event], batch: int) -> tuple[float, int]:
        js = self.js
        started = time.perf_counter()
        if batch == 1:
            acks = [await js.publish(NATS_SUBJECT, body, headers={"Nats-Msg-Id": key})
                    for key, body in events]
        else:  # publish_async waits while publish_async_max_pending acks are outstanding
            futures = [await js.publish_async(NATS_SUBJECT, body, headers={"Nats-Msg-Id": key})
                       for key, body in events]
            acks = await asyncio.gather(*futures)
        return time.perf_counter() - started, sum(not ack.duplicate for ack in acks)

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()


# -- servers: Debian's packages, free ports, the run's temp dir, stopped at exit --------------
def ensure_installed(binary: str) -> str:
    """The server's path; apt-get installs the Debian package of that name if missing."""
    def find() -> str | None:
        return shutil.which(binary) or next(
            (p for p in (f"/usr/sbin/{binary}", f"/usr/bin/{binary}") if Path(p).exists()), None)

    if (found := find()) is None:
        log(f"installing {binary} from Debian's packages")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", binary]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, check=True)
        if (found := find()) is None:
            raise SystemExit(f"{binary}: not found after apt-get install {binary}")
    return found


def server_version(path: str) -> str:
    text = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"v=?(\d+\.\d+\.\d+)", text)
    return match.group(1) if match else text.strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process: SIGKILL when this benchmark dies, however it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def server(argv: list[str], port: int, log_path: Path) -> Iterator[None]:
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[0]} did not start (exit {proc.returncode}):\n"
                                 f"{log_path.read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def open_side(name: str, tmp: Path, batch: int, bins: dict[str, str]) -> Iterator[Side]:
    with contextlib.ExitStack() as stack:
        side: Side
        if name == "naive":
            side = Naive(tmp / "naive.db")
        elif name in ("keyed", "json-event"):
            side = Box(tmp / f"{name}.db", name)
        else:
            port, data = free_port(), tmp / name
            data.mkdir()
            argv = ([bins["redis"], "--bind", "127.0.0.1", "--port", str(port), "--dir",
                     str(data), "--appendonly", "yes", "--appendfsync", "always",
                     "--save", "", "--daemonize", "no"] if name == "redis" else
                    [bins["nats"], "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(data)])
            stack.enter_context(server(argv, port, tmp / f"{name}.log"))
            side = Redis(port) if name == "redis" else Nats(port, batch)
        stack.callback(side.close)
        yield side


def measure(name: str, side: Side, first: list[Event], extra: list[Event], batch: int,
            rates: dict[tuple[str, str, str], float]) -> None:
    """Batched N, again, then one at a time: single-n new events, and again."""
    for mode, events, size in (("batched", first, batch), ("single", extra, 1)):
        for step in ("first", "dup"):
            seconds, new = side.run(events, size)
            want = len(events) if step == "first" else 0
            if new != want:
                raise SystemExit(f"{name} {mode} {step}: {new} of {len(events)} were new, "
                                 f"expected {want}")
            rates[(name, mode, step)] = len(events) / seconds
            log(f"{name:10} {mode:7} {step:5} {len(events):>8,} in {seconds:7.2f}s "
                f"= {len(events) / seconds:>9,.0f} ev/s")


# -- output ----------------------------------------------------------------------------------
def table(out: TextIO, header: Sequence[str], rows: list[Sequence[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(),
              file=out)


def report(out: TextIO, figures: dict[str, Any]) -> None:
    meta = figures["meta"]
    print(f"\noncebox peers benchmark on 127.0.0.1: Python {meta['python']}, sqlite3's SQLite "
          f"{meta['sqlite3']}, redis-server {meta['redis']}, nats-server {meta['nats']}, "
          f"redis-py {meta['redis_py']}, nats-py {meta['nats_py']}, {meta['cpus']} CPUs", file=out)
    print(f"load average (1, 5, 15 min) {meta['load_before']} before, {meta['load_after']} "
          f"after; wall time {meta['wall_seconds']:.0f}s; files in {meta['dir']}", file=out)
    print(f"events: random UUID keys, {PAYLOAD_BYTES}-byte payloads (json-event: json_body "
          f"with the key as notification_id, {meta['json_bytes']} bytes on average)", file=out)
    print(f"batched passes: N={meta['n']:,}; one at a time: --single-n={meta['single_n']:,} new "
          f"keys after the batched passes (every side holds N before them)", file=out)
    print("durability: sqlite sides WAL + synchronous=FULL; redis appendonly yes, appendfsync "
          "always (one fsync per event-loop write);", file=out)
    print(f"  nats-server {meta['nats']} file store: acks before any fsync (2.9 syncs every 2 "
          "min and has no sync_interval option)", file=out)
    rows = []
    for r in figures["rates"]:
        label, batched, single = HOW[r["side"]]
        rows.append([label, batched if r["mode"] == "batched" else single,
                     "duplicates" if r["pass"] == "dup" else "first", f"{r['n']:,}",
                     f"{r['events_per_s']:,.0f}",
                     "" if r["vs_naive"] is None else f"{r['vs_naive']:.2f}"])
    print("", file=out)
    table(out, ["side", "how", "pass", "n", "ev/s", "x naive"], rows)
    print("", file=out)
    table(out, ["target (issue 12)", "ratio", "at least", "met"],
          [[t["target"], "-" if t["ratio"] is None else f"{t['ratio']:.2f}", f"{t['at_least']}",
            "-" if t["met"] is None else ("yes" if t["met"] else "no")]
           for t in figures["targets"]])


def figures_of(rates: dict[tuple[str, str, str], float]) -> dict[str, Any]:
    listed = []
    for (side, mode, step), rate in rates.items():
        naive = rates.get(("naive", mode, step))
        listed.append({"side": side, "mode": mode, "pass": step, "n": 0, "events_per_s": rate,
                       "vs_naive": None if naive is None else rate / naive})
    targets = []
    for what, top, bottom, at_least in TARGETS:
        ratio = rates[top] / rates[bottom] if top in rates and bottom in rates else None
        targets.append({"target": what, "ratio": ratio, "at_least": at_least,
                        "met": None if ratio is None else ratio >= at_least})
    return {"rates": listed, "targets": targets}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="events per batched pass")
    p.add_argument("--single-n", type=int, default=20_000,
                   help="events per one-at-a-time pass (each commits and fsyncs on its own)")
    p.add_argument("--batch", type=int, default=1_000,
                   help="per transaction, pipeline or in flight")
    p.add_argument("--sides", default=",".join(SIDES), help=f"any of {','.join(SIDES)}")
    p.add_argument("--dir", default=None, help="where to make the temp dir (default: system)")
    p.add_argument("--json", action="store_true", help="JSON on stdout, tables on stderr")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    sides = [s for s in args.sides.split(",") if s]
    if unknown := set(sides) - set(SIDES):
        raise SystemExit(f"unknown side(s): {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: servers get stopped
    started, load_before = time.perf_counter(), os.getloadavg()
    bins = {"redis": ensure_installed("redis-server"), "nats": ensure_installed("nats-server")}
    n, single_n = args.n, min(args.single_n, args.n)
    first, extra = make_events(n), make_events(single_n)
    json_first, json_extra = json_events(first, 0), json_events(extra, n)
    rates: dict[tuple[str, str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="oncebox-peers-", dir=args.dir) as tmp:
        log(f"working in {tmp}")
        for name in sides:
            with open_side(name, Path(tmp), args.batch, bins) as side:
                if name == "json-event":
                    measure(name, side, json_first, json_extra, args.batch, rates)
                else:
                    measure(name, side, first, extra, args.batch, rates)
    figures = figures_of(rates)
    for r in figures["rates"]:
        r["n"] = n if r["mode"] == "batched" else single_n
    figures["meta"] = {
        "python": sys.version.split()[0], "sqlite3": sqlite3.sqlite_version,
        "redis": server_version(bins["redis"]), "nats": server_version(bins["nats"]),
        "redis_py": version("redis"), "nats_py": version("nats-py"), "cpus": os.cpu_count(),
        "n": n, "single_n": single_n, "batch": args.batch, "payload_bytes": PAYLOAD_BYTES,
        "json_bytes": round(sum(len(b) for _, b in json_first) / max(n, 1)),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": time.perf_counter() - started, "dir": args.dir or tempfile.gettempdir(),
        "oncebox": str(Path(oncebox.__file__).parent), "sides": sides,
    }
    report(sys.stderr if args.json else sys.stdout, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
