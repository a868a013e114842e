"""Delivery-history checker: concurrent clients on PostgreSQL under a nemesis.

Method (after Jepsen's queue checker). N client processes deliver their queues at least
once into one PostgreSQL store (a private, durable throwaway server), each recording
every attempt and the outcome it saw in an append-only JSON-lines history. Some
deliveries are redelivered on purpose (30%), some are shared by all clients, some are
conflicts (same identity, other content), some are corrupted in transit and followed by
a valid copy, and the feed deliveries carry lease tokens. Two reconciler workers refresh
the listing inbox's work keys meanwhile. A nemesis thread injects a fault every few
seconds:

- SIGKILL a random client; it is restarted and resumes its queue, sending the attempt
  the kill cut off again (its outcome is indeterminate);
- restart the server with ``pg_ctl stop -m immediate`` (crash recovery on start);
- SIGSTOP a reconciler worker, preferably while it holds a claim, for longer than the
  claim's TTL, then SIGCONT: its completion must come back ``stale``;
- clients run with clocks skewed by up to ten minutes either way (their device times
  are wrong); leases must still be decided by the database clock alone.

At the end the harness waits for the reconcilers to drain, recovers and verifies the
log, and the checker (reliability/_history_check.py) judges the histories against the
final store: lost, duplicated, unexpected, conflicts, indeterminate attempts, lease and
reconciler violations. Every anomaly figure must be 0.

    .venv/bin/python reliability/history.py                      # the full run
    .venv/bin/python reliability/history.py --deliveries 200 --fault-every 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (HERE, ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import oncebox  # noqa: E402
from _history_check import Report, check, lines_of, load_histories, snapshot  # noqa: E402
from _history_client import CLAIM_TTL  # noqa: E402
from pgcluster import PgCluster  # noqa: E402

CLIENT = HERE / "_history_client.py"
SKEW = 600.0  # ten minutes


@dataclass(frozen=True)
class Config:
    clients: int = 8
    deliveries: int = 800  # planned per client, before the valid copies of corrupt frames
    workers: int = 2
    fault_every: float = 3.0  # seconds between faults, on average
    seed: int = 1
    kill_weight: float = 5
    restart_weight: float = 2
    pause_weight: float = 3
    cycle: bool = False  # faults in a fixed order (kill, restart, pause, kill), for tests
    timeout: float = 1800.0


@dataclass
class Faults:
    """What the nemesis did, and what went wrong outside the checker's view."""

    kills: int = 0
    server_restarts: int = 0
    server_down_seconds: list[float] = field(default_factory=list)
    pauses: int = 0
    pauses_holding_claim: int = 0
    skews: list[float] = field(default_factory=list)
    client_crashes: int = 0  # exits the nemesis did not cause
    worker_crashes: int = 0

    @property
    def total(self) -> int:
        return self.kills + self.server_restarts + self.pauses


@dataclass
class Result:
    report: Report
    faults: Faults
    seconds: float
    url: str
    directory: Path

    @property
    def anomalies(self) -> int:
        return self.report.anomalies + self.faults.client_crashes + self.faults.worker_crashes

    def lines(self) -> list[tuple[str, Any]]:
        f = self.faults
        downs = f.server_down_seconds
        down = sum(downs) / len(downs) if downs else 0.0
        skewed = [s for s in f.skews if s]
        fault_lines: list[tuple[str, Any]] = [
            ("faults injected", f.total),
            ("  client SIGKILLs", f.kills),
            ("  PostgreSQL restarts (stop -m immediate)", f"{f.server_restarts} "
             f"(mean {down:.1f} s from stop to ready)"),
            ("  reconciler pauses past the claim TTL", f"{f.pauses} "
             f"({f.pauses_holding_claim} while holding a claim)"),
            ("  clients with skewed clocks", f"{len(skewed)} of {len(f.skews)} "
             f"({', '.join(f'{s:+.0f}s' for s in skewed)})"),
            ("client / worker exits not caused by the nemesis",
             f"{f.client_crashes} / {f.worker_crashes}"),
        ]  # fmt: skip
        lines = lines_of(self.report, fault_lines)
        lines[-1] = ("ANOMALIES", self.anomalies)
        rate = self.report.attempts / self.seconds if self.seconds else 0.0
        return [
            *lines,
            ("wall time", f"{self.seconds:.1f} s ({rate:.0f} delivery attempts per second)"),
        ]


class Harness:
    """Runs the clients and workers, restarts what the nemesis kills, injects faults."""

    def __init__(self, cfg: Config, cluster: PgCluster, url: str, directory: Path) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.url = url
        self.dir = directory
        self.rng = random.Random(cfg.seed)
        self.faults = Faults()
        self.lock = threading.Lock()
        self.clients: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()
        self.done: set[int] = set()
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.stop = threading.Event()
        self.paused: dict[str, threading.Timer] = {}
        self.stderr: list[IO[bytes]] = []
        self.skews = {c: self._skew(c) for c in range(cfg.clients)}
        self.faults.skews = [self.skews[c] for c in range(cfg.clients)]

    def _skew(self, client: int) -> float:
        if client % 4 == 3:
            return 0.0
        return self.rng.choice((SKEW, -SKEW, round(self.rng.uniform(-SKEW, SKEW))))

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        err = (self.dir / f"{name}.err").open("ab")
        self.stderr.append(err)
        return subprocess.Popen(
            [sys.executable, str(CLIENT), *args], stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT
        )

    def start_client(self, c: int) -> None:
        self.clients[c] = self._spawn(
            ["client", "--url", self.url, "--client", str(c), "--seed", str(self.cfg.seed),
             "--deliveries", str(self.cfg.deliveries), "--skew", str(self.skews[c]),
             "--history", str(self.dir / f"client-{c}.jsonl")],
            f"client-{c}",
        )  # fmt: skip

    def start_worker(self, name: str) -> None:
        self.workers[name] = self._spawn(
            ["worker", "--url", self.url, "--name", name, "--stop", str(self.dir / "stop"),
             "--history", str(self.dir / f"{name}.jsonl")],
            name,
        )  # fmt: skip

    # -- the nemesis ----------------------------------------------------------------------
    def nemesis(self) -> None:
        cfg = self.cfg
        kinds = ("kill", "restart", "pause")
        weights = (cfg.kill_weight, cfg.restart_weight, cfg.pause_weight)
        # Every kind in the first three, so that a short run (the suite's) sees each of them.
        order = ("kill", "restart", "pause", "kill")
        n = 0
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * cfg.fault_every):
            if cfg.cycle:
                kind, n = order[n % len(order)], n + 1
            else:
                kind = self.rng.choices(kinds, weights=weights)[0]
            if kind == "kill":
                self.kill_client()
            elif kind == "restart":
                self.restart_server()
            else:
                self.pause_worker()

    def kill_client(self) -> None:
        with self.lock:
            alive = [c for c, p in self.clients.items() if c not in self.done and p.poll() is None]
            if not alive:
                return
            c = self.rng.choice(alive)
            self.killed.add(c)
            self.clients[c].send_signal(signal.SIGKILL)
            self.faults.kills += 1

    def restart_server(self) -> None:
        began = time.monotonic()
        self.cluster.stop("immediate")
        time.sleep(self.rng.uniform(0.2, 1.0))
        self.cluster.start_again()
        self.faults.server_restarts += 1
        self.faults.server_down_seconds.append(time.monotonic() - began)

    def pause_worker(self) -> None:
        """SIGSTOP a worker (holding a claim, if it takes one soon) for longer than the
        claim's TTL; a timer sends SIGCONT, so other faults go on meanwhile."""
        running = [n for n in sorted(self.workers) if n not in self.paused]
        if not running:
            return
        name = self.rng.choice(running)
        proc = self.workers[name]
        if proc.poll() is not None:
            return
        history = self.dir / f"{name}.jsonl"
        deadline = time.monotonic() + 2.0
        holding = False
        while time.monotonic() < deadline:  # catch it holding a claim, if it gets one
            if _last_line(history).startswith('{"t":"ticket"'):
                holding = True
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGSTOP)
        timer = threading.Timer(CLAIM_TTL + self.rng.uniform(0.5, 1.5), self.resume, (name,))
        self.paused[name] = timer
        timer.start()
        self.faults.pauses += 1
        self.faults.pauses_holding_claim += holding

    def resume(self, name: str) -> None:
        timer = self.paused.pop(name, None)
        if timer is not None:
            timer.cancel()
        with contextlib.suppress(OSError):
            self.workers[name].send_signal(signal.SIGCONT)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> None:
        for n in range(self.cfg.workers):
            self.start_worker(f"worker-{n}")
        for c in range(self.cfg.clients):
            self.start_client(c)
        nemesis = threading.Thread(target=self.nemesis, daemon=True)
        nemesis.start()
        deadline = time.monotonic() + self.cfg.timeout
        try:
            while len(self.done) < self.cfg.clients:
                if time.monotonic() > deadline:
                    left = sorted(set(self.clients) - self.done)
                    raise TimeoutError(f"clients {left} did not finish")
                with self.lock:
                    for c, proc in list(self.clients.items()):
                        code = proc.poll()
                        if c in self.done or code is None:
                            continue
                        if code == 0:
                            self.done.add(c)
                            continue
                        if c not in self.killed:
                            self.faults.client_crashes += 1
                        self.killed.discard(c)
                        self.start_client(c)
                for name, proc in list(self.workers.items()):
                    if proc.poll() is not None:
                        self.faults.worker_crashes += 1
                        self.start_worker(name)
                time.sleep(0.05)
        finally:
            self.stop.set()
            nemesis.join()
            for name in list(self.paused):
                self.resume(name)
            if not self.cluster.is_running():
                self.cluster.start_again()
        self.drain()

    def drain(self) -> None:
        """Let the workers refresh every dirty key, then stop them."""
        box = _open(self.url)
        try:
            deadline = time.monotonic() + 120
            while any(k.dirty for k in box.work_keys("listing")) and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            box.close()
        (self.dir / "stop").write_text("")
        for proc in self.workers.values():
            try:
                if proc.wait(timeout=60) != 0:
                    self.faults.worker_crashes += 1
            except subprocess.TimeoutExpired:
                proc.kill()
                self.faults.worker_crashes += 1

    def close(self) -> None:
        for proc in [*self.clients.values(), *self.workers.values()]:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        for err in self.stderr:
            err.close()


def _last_line(path: Path) -> str:
    """The last complete line of a worker's history, read from its end."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = tail.split("\n")
    return lines[-2] if len(lines) >= 2 else ""


def _open(url: str) -> oncebox.Oncebox:
    deadline = time.monotonic() + 60
    while True:
        try:
            return oncebox.open(url)
        except oncebox.StorageUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def judge(url: str, directory: Path) -> Report:
    """Read the final store and the histories and check them."""
    box = _open(url)
    try:
        snap = snapshot(box)
    finally:
        box.close()
    clients, workers = load_histories(directory)
    return check(clients, workers, snap)


def run(cfg: Config, cluster: PgCluster, directory: Path, database: str = "history") -> Result:
    """One run into a fresh database of ``cluster``; histories go to ``directory``."""
    began = time.monotonic()
    url = cluster.create_database(database)
    _open(url).close()  # declare the inboxes once, before anyone races to
    harness = Harness(cfg, cluster, url, directory)
    try:
        harness.run()
    finally:
        harness.close()
    report = judge(url, directory)
    return Result(report, harness.faults, time.monotonic() - began, url, directory)


def render(result: Result, cfg: Config) -> str:
    width = max(len(label) for label, _ in result.lines()) + 2
    head = (
        f"delivery-history check: {cfg.clients} clients x {cfg.deliveries} planned deliveries, "
        f"{cfg.workers} reconciler workers, PostgreSQL (durable), a fault every "
        f"~{cfg.fault_every:g} s, seed {cfg.seed}"
    )
    out = [head, "-" * len(head)]
    for label, value in result.lines():
        shown = json.dumps(value) if isinstance(value, dict) else str(value)
        out.append(f"{label:<{width}}{shown}")
    if result.report.lost_examples:
        out.append("lost, for example: " + "; ".join(result.report.lost_examples))
    return "\n".join(out)


def figures(result: Result) -> dict[str, Any]:
    """The printed lines as one mapping; an indented line is keyed under the line above
    it ("acked ... / checks"), so that labels used twice ("  checks") both stay."""
    out: dict[str, Any] = {}
    parent = ""
    for label, value in result.lines():
        if label.startswith(" "):
            out[f"{parent} / {label.strip()}"] = value
        else:
            parent = label
            out[label] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Config()
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument(
        "--deliveries", type=int, default=defaults.deliveries, help="planned deliveries per client"
    )
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--keep", action="store_true", help="keep the server and histories")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    cfg = Config(
        clients=args.clients,
        deliveries=args.deliveries,
        workers=args.workers,
        fault_every=args.fault_every,
        seed=args.seed,
    )
    base = Path(tempfile.mkdtemp(prefix="oncebox-history-", dir="/tmp"))
    os.chmod(base, 0o755)
    cluster = PgCluster.start(base / "pg", durable=True)
    directory = base / "histories"
    directory.mkdir()
    try:
        result = run(cfg, cluster, directory)
    finally:
        cluster.stop("fast")
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(render(result, cfg))
    if args.json:
        print(json.dumps({"config": asdict(cfg), "figures": figures(result)}, default=str))
    if args.keep:
        print(f"kept: {base}")
    return 0 if result.anomalies == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
