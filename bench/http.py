"""HTTP benchmark: oncebox's API against its own ceilings, all in one run on SQLite.

The server is the product's stack (``create_app`` on uvicorn through ``server.run``, as
``oncebox serve`` runs it) in a process of its own, so client and server do not share a
GIL; the store is a SQLite file (WAL, ``synchronous=FULL``, as oncebox always opens it).
Cases:

* **no-op**: ``--clients`` concurrent clients POST a small body to ``/bench/noop``, a
  route added only to this benchmark's app instance (not part of the product API): the
  same uvicorn, FastAPI and middleware (body bound, latency metric), a raw-request
  handler like the delivery route's, matched right after it; no auth and no store. The
  framework's own ceiling.
* **single**: the same clients POST ``--n`` distinct json-event deliveries one by one to
  ``/v1/inboxes/listing/deliveries`` (bearer token, group commit). Every answer must be
  201 ``accepted``.
* **webhook, bearer** and **webhook, signed**: the same clients POST ``--n`` distinct
  deliveries each to a ``json`` inbox that declares a Standard Webhooks sender, first
  with the bearer token and an ``Oncebox-Key``, then as the sender would, with no token
  and a ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` each (signed
  before the clock starts): what verifying a signature costs against a token.
* **raw commit**: the disk's rate of one commit per event through the same SQLite library
  (APSW, WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``; one ``INSERT`` per transaction),
  in this process. Single ingest above it means group commit shares commits.
* **batched HTTP**: ``--batch-n`` deliveries as NDJSON batches of ``--batch`` (1,000) to
  ``/v1/inboxes/listing/batch`` from ``--batch-clients`` concurrent clients.
* **batched library**: the same deliveries through ``box.ingest_all`` (what the batch
  route calls), ``--batch`` per call, from ``--batch-clients`` threads at once, in this
  process, on a fresh store: the same concurrency, so the two p99s compare.
* **N workers**: with ``--workers N`` (default: the CPUs; 1 skips it), no-op and single
  again, same clients and counts, against a server of N worker processes (``oncebox serve
  --workers N``: SO_REUSEPORT sockets, a group commit each) on a fresh store; printed with
  how many answers each worker gave, and the ratio to the one-worker single rate.

``--sync-delay-ms D`` makes every fsync at least D ms slower, for the server's store, the
raw commits and the library alike, through an APSW VFS (``bench/slowdisk.py``): an emulated
slower disk, for machines whose own disk syncs faster than an HTTP request is served
(there no HTTP ingest can beat one raw commit per event). The default (0) is this disk.

The client is a minimal HTTP/1.1 keep-alive client on asyncio streams (one connection per
client), so that the client is not what limits the figures. Latency is per request, from
the client's send to the end of the response. Targets are printed beside the figures;
nothing here asserts on a timing.

    .venv/bin/python bench/http.py                      # defaults, a few minutes
    .venv/bin/python bench/http.py --n 2000 --batch-n 10000    # quick
    .venv/bin/python bench/http.py --json > http.json   # table on stderr, JSON on stdout
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import apsw

import oncebox
import slowdisk
import turns
from oncebox.formats.webhooks import sign_standard_webhooks, standard_secret
from synthetic import json_body

HOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # Standard Webhooks' test secret
INBOXES = [
    oncebox.InboxSpec("listing", codec="json-event", apply="generation"),
    oncebox.InboxSpec(
        "hooks", codec="json", webhook={"scheme": "standard-webhooks", "secret": HOOK_SECRET}
    ),
]
INBOX = "listing"
NDJSON = "application/x-ndjson"
DELIVERIES = "/v1/inboxes/{inbox}/deliveries"

# Targets from the issue: printed beside the figures, never asserted.
TARGET_SINGLE_VS_NOOP = 0.8  # single-message ingest >= 0.8 x the no-op ceiling (issue 12)
TARGET_SINGLE_VS_RAW = 1.0  # ... and above one-commit-per-event (group commit works)
TARGET_P99_MS = 50.0  # single-message p99 latency
TARGET_BATCH_VS_LIBRARY = 0.5  # batched HTTP >= 0.5 x the library's batched rate
TARGET_BATCH_P99_VS_LIBRARY = 2.0  # a batch's p99 <= 2 x the library's, same concurrency
TARGET_WORKERS_VS_ONE = 1.0  # --workers N single deliveries above one worker's (issue 12)
GENERAL_ROUTE = False  # --general-route: the servers run without the hot route
TURNS: Path | None = None  # --turns: where the servers time their write turns


# -- an emulated slower disk (bench/slowdisk.py) ---------------------------------------
def store_url(path: Path | str, delay_ms: float) -> str:
    return f"sqlite:///{path}" + (f"?vfs={slowdisk.NAME}" if delay_ms else "")


# -- the server process --------------------------------------------------------------------
def serve_child(
    db: str, delay_ms: float, workers: int, general: bool = False, turns_in: str | None = None
) -> None:
    """The child: the product app plus a no-op route, on uvicorn, on a free port, in
    ``workers`` processes (as ``oncebox serve --workers`` runs them); ``general``: the
    delivery route through the framework's router, as before the hot route."""
    # Run as a script, this file's folder is first on sys.path, and this file (http.py)
    # would shadow the standard library's http package that uvicorn and starlette import.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.modules.pop("http", None)

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from oncebox.surfaces.http import create_app, server
    from oncebox.surfaces.http.hotroute import HotRoute

    def make_app() -> FastAPI:  # in each worker, after the fork
        box = oncebox.open(store_url(db, delay_ms), inboxes=INBOXES)
        app = create_app(box)
        if general:  # the middleware stack is built at the first request, not yet
            app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoute]
        # Registered while referenced: kept as long as the app is.
        app.state.slow = slowdisk.SlowSync(delay_ms / 1000) if delay_ms else None

        async def noop(request: Request) -> JSONResponse:
            body = await request.body()  # already read (and bounded) by the app's middleware
            return JSONResponse({"verdict": "noop", "may_ack": True, "size": len(body)}, 201)

        # This module's annotations are strings, and Request is not among its globals:
        # unresolved, FastAPI would read ``request`` as a required query parameter and
        # answer every no-op request 422 through the validation error handler.
        noop.__annotations__ = {"request": Request, "return": JSONResponse}
        app.add_api_route("/bench/noop", noop, methods=["POST"], include_in_schema=False)
        # Routes are matched in order: the no-op goes right after the delivery route, so
        # that finding it costs what finding that route costs (at the end it would cost more).
        routes = app.router.routes
        after = next(i for i, route in enumerate(routes) if _holds_deliveries(route))
        noop_route = routes.pop()
        routes.insert(after + 1, noop_route)
        # The gate's head check walks its own list of routes to find what a body needs:
        # there too right after the delivery route (missing, it would walk them all).
        gate = app.state.gate.routes
        gate.insert(
            1 + next(i for i, route in enumerate(gate) if _holds_deliveries(route)), noop_route
        )
        return app

    if turns_in:  # before the fork: every worker times its own turns
        turns.record(Path(turns_in))
    # As `oncebox serve` runs it: one process, or N workers on SO_REUSEPORT sockets.
    server.run_workers(make_app, workers, port=0, ready=lambda port: print(port, flush=True))


def _holds_deliveries(route: Any) -> bool:
    """The delivery route, or (FastAPI 0.165 and later) the included router holding it."""
    if getattr(route, "path", None) == DELIVERIES:
        return True
    inner = getattr(route, "original_router", None)
    return inner is not None and any(getattr(r, "path", None) == DELIVERIES for r in inner.routes)


@contextlib.contextmanager
def server(db: Path, log: Path, delay_ms: float, workers: int = 1) -> Iterator[int]:
    command = [sys.executable, __file__, "--_serve", str(db), "--sync-delay-ms", str(delay_ms)]
    command += ["--general-route"] if GENERAL_ROUTE else []
    command += ["--turns-in", str(TURNS)] if TURNS else []
    with log.open("w") as err:
        child = subprocess.Popen(
            [*command, "--workers", str(workers)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line.isdigit():
            raise SystemExit(f"the server did not start:\n{log.read_text()}")
        port = int(line)
        asyncio.run(wait_ready(port, workers))
        yield port
    finally:
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


async def wait_ready(port: int, workers: int = 1) -> None:
    """Until ``workers`` distinct processes have answered /healthz (a worker that does not
    listen yet gets no connection)."""
    deadline = time.monotonic() + 30
    seen: set[str] = set()
    while True:
        try:
            conn = await Conn.open(port)
            status, _ = await conn.request("GET", "/healthz", b"", {})
            conn.close()
            if status == 200:
                seen.add(conn.worker)
                if len(seen) >= workers:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the server did not answer /healthz")
        await asyncio.sleep(0.05)


# -- a minimal HTTP/1.1 keep-alive client --------------------------------------------------
class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.worker = ""  # the server process that answered last (Oncebox-Worker)

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "oncebox-worker":
                self.worker = value.strip()
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Run:
    """What one case measured: the rate in items (deliveries or requests) per second."""

    name: str
    requests: int
    items: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    statuses: dict[int, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)  # answers per server process

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    @property
    def request_rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, p: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def figures(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "latencies_ms"}
        out.update(
            rate=round(self.rate, 1),
            requests_per_s=round(self.request_rate, 1),
            p50_ms=self.percentile(50),
            p99_ms=self.percentile(99),
        )
        return out


async def load(
    name: str,
    port: int,
    path: str,
    bodies: Sequence[bytes],
    headers: dict[str, str] | list[dict[str, str]],
    clients: int,
    per_body: int = 1,
    check: Any = None,
) -> Run:
    """``clients`` connections send ``bodies`` between them, each as soon as the last
    answer came; the clock runs from the first send to the last answer. ``headers`` is
    one set for all, or a list with each body's own."""
    conns = [await Conn.open(port) for _ in range(min(clients, len(bodies)))]
    own = headers if isinstance(headers, list) else None
    work = iter(enumerate(bodies))
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    workers: dict[str, int] = {}
    problems: list[str] = []

    async def client(conn: Conn) -> None:
        for index, body in work:  # one event loop: next() is never contended
            sent = time.perf_counter()
            sending = own[index] if own is not None else headers
            assert isinstance(sending, dict)
            status, answer = await conn.request("POST", path, body, sending)
            latencies.append((time.perf_counter() - sent) * 1000)
            statuses[status] = statuses.get(status, 0) + 1
            workers[conn.worker] = workers.get(conn.worker, 0) + 1
            if check is not None and len(problems) < 3:
                problem = check(status, answer)
                if problem:
                    problems.append(problem)

    started = time.perf_counter()
    await asyncio.gather(*(client(conn) for conn in conns))
    seconds = time.perf_counter() - started
    for conn in conns:
        conn.close()
    if problems:
        raise SystemExit(f"{name}: unexpected answers: {problems}")
    return Run(name, len(bodies), len(bodies) * per_body, seconds, latencies, statuses, workers)


def expect_noop(status: int, answer: bytes) -> str | None:
    if status != 201 or json.loads(answer).get("verdict") != "noop":
        return f"{status} {answer[:200]!r}"
    return None


def expect_accepted(status: int, answer: bytes) -> str | None:
    if status != 201 or json.loads(answer).get("verdict") != "accepted":
        return f"{status} {answer[:200]!r}"
    return None


def expect_batch_accepted(status: int, answer: bytes) -> str | None:
    if status != 200:
        return f"{status} {answer[:200]!r}"
    verdicts = {d["verdict"] for d in json.loads(answer)["decisions"]}
    return None if verdicts == {"accepted"} else f"verdicts {verdicts}"


async def metric(port: int, headers: dict[str, str], name: str) -> float | None:
    conn = await Conn.open(port)
    head = {k: v for k, v in headers.items() if k == "Authorization"}
    status, text = await conn.request("GET", "/metrics", b"", head)
    conn.close()
    if status != 200:
        return None
    for line in text.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "_total "):
            return float(line.split()[-1])
    return None


# -- in-process cases ------------------------------------------------------------------------
def raw_commits(path: Path, n: int, delay_ms: float) -> Run:
    """One INSERT per BEGIN IMMEDIATE ... COMMIT, WAL, synchronous=FULL, through APSW."""
    conn = apsw.Connection(str(path), vfs=slowdisk.NAME if delay_ms else None)
    conn.set_busy_timeout(30_000)
    if str(conn.execute("PRAGMA journal_mode=WAL").get).lower() != "wal":
        raise SystemExit(f"{path}: cannot switch to WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    bodies = [json_body(i) for i in range(n)]
    latencies = []
    started = time.perf_counter()
    for body in bodies:
        t = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO events (body) VALUES (?)", (body,))
        conn.execute("COMMIT")
        latencies.append((time.perf_counter() - t) * 1000)
    seconds = time.perf_counter() - started
    conn.close()
    return Run("raw commit per event", n, n, seconds, latencies)


def library_batched(
    path: Path, start: int, n: int, batch: int, delay_ms: float, clients: int
) -> Run:
    """The library's batches from ``clients`` threads at once: the concurrency the HTTP
    batches are sent with, so that their latencies compare (one writer means a batch
    waits for the others either way)."""
    box = oncebox.open(store_url(path, delay_ms), inboxes=INBOXES)
    chunks = [
        [oncebox.Delivery(json_body(i)) for i in range(s, min(s + batch, start + n))]
        for s in range(start, start + n, batch)
    ]
    latencies: list[float] = []

    def one(chunk: list[oncebox.Delivery]) -> None:
        t = time.perf_counter()
        decisions = box.ingest_all(INBOX, chunk)
        latencies.append((time.perf_counter() - t) * 1000)
        if {d.verdict.value for d in decisions} != {"accepted"}:
            raise SystemExit("library batch: not all accepted")

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, chunks))
    seconds = time.perf_counter() - started
    box.close()
    return Run(f"batched library, {clients} threads", len(chunks), n, seconds, latencies)


# -- the run -------------------------------------------------------------------------------
def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="single-message requests")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients")
    parser.add_argument("--raw-n", type=int, default=2_000, help="raw one-commit-per-event rows")
    parser.add_argument("--batch-n", type=int, default=100_000, help="deliveries sent batched")
    parser.add_argument("--batch", type=int, default=1_000, help="deliveries per batch")
    parser.add_argument("--batch-clients", type=int, default=4, help="clients sending batches")
    parser.add_argument("--warmup", type=int, default=1_000, help="untimed requests first")
    parser.add_argument("--dir", help="where the store files go (default: a temp dir)")
    parser.add_argument(
        "--sync-delay-ms",
        type=float,
        default=0.0,
        help="emulate a slower disk: every fsync takes this much longer (default 0)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="also run no-op and single deliveries on a server of this many worker processes "
        "(default: the CPUs; 1 skips it)",
    )
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    parser.add_argument(
        "--general-route",
        action="store_true",
        help="deliveries through the framework's router, without the hot route (as before)",
    )
    parser.add_argument(
        "--turns",
        action="store_true",
        help="time every write turn in the servers, and print for each single-delivery case "
        "how long the write lock was held and waited for, and the servers' CPU a request "
        "(bench/turns.py)",
    )
    parser.add_argument("--turns-in", help=argparse.SUPPRESS)
    parser.add_argument("--_serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global GENERAL_ROUTE
    GENERAL_ROUTE = args.general_route
    if args._serve:
        serve_child(
            args._serve, args.sync_delay_ms, args.workers, args.general_route, args.turns_in
        )
        return 0
    slow = slowdisk.SlowSync(args.sync_delay_ms / 1000) if args.sync_delay_ms else None

    table: TextIO = sys.stderr if args.json else sys.stdout
    work = Path(tempfile.mkdtemp(prefix="oncebox-http-bench-", dir=args.dir))
    global TURNS
    TURNS = work / "turns" if args.turns else None
    try:
        result = run(args, work, table)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if slow is not None:
        slow.unregister()
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def run(args: argparse.Namespace, work: Path, out: TextIO) -> dict[str, Any]:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    db = work / "server.db"
    secret = new_store(db)
    auth = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    batch_headers = {"Authorization": f"Bearer {secret}", "Content-Type": NDJSON}
    load_before = os.getloadavg()
    say(
        f"oncebox HTTP benchmark: SQLite (WAL, synchronous=FULL) in {work}, "
        f"{os.cpu_count()} CPUs, {args.clients} clients"
    )
    if args.sync_delay_ms:
        say(f"emulated slower disk: every fsync {args.sync_delay_ms:g} ms longer (all cases)")

    # Ids: warm-up, singles, HTTP batches, library batches never collide.
    warm_ids = range(0, args.warmup)
    single_ids = range(10_000_000, 10_000_000 + args.n)
    batch_start = 20_000_000
    library_start = 40_000_000

    runs: dict[str, Run] = {}
    with server(db, work / "server.log", args.sync_delay_ms) as port:
        say(f"server: uvicorn on 127.0.0.1:{port} (pid of its own)")

        async def http_cases() -> None:
            noop_body = json_body(0)
            warm = [noop_body] * args.warmup
            await load("warm", port, "/bench/noop", warm, auth, args.clients)
            runs["noop"] = await load(
                "no-op",
                port,
                "/bench/noop",
                [noop_body] * args.n,
                auth,
                args.clients,
                check=expect_noop,
            )
            say(line(runs["noop"]))
            bodies = [json_body(i) for i in warm_ids]
            warm_run = await load(
                "warm", port, f"/v1/inboxes/{INBOX}/deliveries", bodies, auth, args.clients
            )
            traced = Traced(warm_run)
            transactions = await metric(port, auth, "oncebox_group_commit_transactions")
            delivered = await metric(port, auth, "oncebox_group_commit_deliveries")
            bodies = [json_body(i) for i in single_ids]
            runs["single"] = await load(
                "single",
                port,
                f"/v1/inboxes/{INBOX}/deliveries",
                bodies,
                auth,
                args.clients,
                check=expect_accepted,
            )
            say(line(runs["single"]))
            traced.say(runs["single"], say)
            after_tx = await metric(port, auth, "oncebox_group_commit_transactions")
            after_del = await metric(port, auth, "oncebox_group_commit_deliveries")
            if None not in (transactions, delivered, after_tx, after_del):
                assert transactions is not None and after_tx is not None
                assert delivered is not None and after_del is not None
                commits = after_tx - transactions
                per = (after_del - delivered) / commits if commits else 0.0
                group["transactions"] = commits
                group["per_transaction"] = round(per, 1)
                say(f"  group commit: {commits:.0f} transactions, {per:.1f} deliveries each")
            for name, ids, signed in (
                ("webhook, bearer", range(30_000_000, 30_000_000 + args.n), False),
                ("webhook, signed", range(50_000_000, 50_000_000 + args.n), True),
            ):
                bodies = [json_body(i) for i in ids]
                each = [webhook_headers(i, json_body(i), signed, auth) for i in ids]
                runs[name] = await load(
                    name,
                    port,
                    "/v1/inboxes/hooks/deliveries",
                    bodies,
                    each,
                    args.clients,
                    check=expect_accepted,
                )
                say(line(runs[name]))
            share = ratio(runs["webhook, signed"].rate, runs["webhook, bearer"].rate)
            say(f"  signed / bearer: {share:.2f}")
            batches = [
                b"\n".join(
                    json_body(i) for i in range(s, min(s + args.batch, batch_start + args.batch_n))
                )
                + b"\n"
                for s in range(batch_start, batch_start + args.batch_n, args.batch)
            ]
            runs["batched_http"] = await load(
                "batched HTTP",
                port,
                f"/v1/inboxes/{INBOX}/batch",
                batches,
                batch_headers,
                args.batch_clients,
                per_body=args.batch,
                check=expect_batch_accepted,
            )
            runs["batched_http"].items = args.batch_n
            say(line(runs["batched_http"]))

        group: dict[str, float] = {}
        asyncio.run(http_cases())

    if args.workers > 1:
        many = work / "workers.db"
        many_auth = {**auth, "Authorization": f"Bearer {new_store(many)}"}
        with server(many, work / "workers.log", args.sync_delay_ms, args.workers) as port:
            say(f"server: {args.workers} worker processes on 127.0.0.1:{port} (a fresh store)")
            asyncio.run(worker_cases(args, port, many_auth, runs, say))

    runs["batched_library"] = library_batched(
        work / "library.db",
        library_start,
        args.batch_n,
        args.batch,
        args.sync_delay_ms,
        args.batch_clients,
    )
    say(line(runs["batched_library"]))
    runs["raw"] = raw_commits(work / "raw.db", args.raw_n, args.sync_delay_ms)
    say(line(runs["raw"]))

    noop, single, raw = runs["noop"], runs["single"], runs["raw"]
    http_batch, lib_batch = runs["batched_http"], runs["batched_library"]
    p99 = single.percentile(99) or 0.0
    # With workers, the same two ratios again for serve's default (one worker per CPU):
    # single against that server's own no-op, and against one worker's single rate.
    many_workers = []
    if "single_workers" in runs:
        many_single = runs["single_workers"]
        many_workers = [
            (
                f"single / no-op, {args.workers} workers",
                ratio(many_single.rate, runs["noop_workers"].rate),
                TARGET_SINGLE_VS_NOOP,
                ">=",
            ),
            (
                f"single, {args.workers} workers / 1 worker",
                ratio(many_single.rate, single.rate),
                TARGET_WORKERS_VS_ONE,
                ">",
            ),
            (
                f"single p99, {args.workers} workers (ms)",
                many_single.percentile(99) or 0.0,
                TARGET_P99_MS,
                "<",
            ),
        ]
    targets = [
        ("single / no-op", ratio(single.rate, noop.rate), TARGET_SINGLE_VS_NOOP, ">="),
        *many_workers,
        ("single / raw commit per event", ratio(single.rate, raw.rate), TARGET_SINGLE_VS_RAW, ">"),
        ("single p99 latency (ms)", p99, TARGET_P99_MS, "<"),
        (
            "batched HTTP / batched library",
            ratio(http_batch.rate, lib_batch.rate),
            TARGET_BATCH_VS_LIBRARY,
            ">=",
        ),
        (
            "batch p99, HTTP / library",
            ratio(http_batch.percentile(99) or 0.0, lib_batch.percentile(99) or 0.0),
            TARGET_BATCH_P99_VS_LIBRARY,
            "<=",
        ),
    ]
    say("")
    say(f"{'target':34} {'figure':>9}  {'wanted':>9}  met")
    checks = []
    for label, figure, wanted, op in targets:
        met = {
            ">=": figure >= wanted,
            ">": figure > wanted,
            "<": figure < wanted,
            "<=": figure <= wanted,
        }[op]
        shown = f"{op} {wanted:g}"
        say(f"{label:34} {figure:9.2f}  {shown:>9}  {'yes' if met else 'NO'}")
        checks.append(
            {"target": label, "figure": round(figure, 3), "wanted": f"{op} {wanted}", "met": met}
        )
    load_after = os.getloadavg()
    say(f"load average before {fmt_load(load_before)}, after {fmt_load(load_after)}")
    return {
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "cpus": os.cpu_count(),
        "runs": {key: value.figures() for key, value in runs.items()},
        "group_commit": group,
        "targets": checks,
        "load_before": load_before,
        "load_after": load_after,
    }


def webhook_headers(i: int, body: bytes, signed: bool, auth: dict[str, str]) -> dict[str, str]:
    """Delivery ``i``'s headers: a bearer token and its key, or as its sender signs it."""
    if not signed:
        return {**auth, "Oncebox-Key": f"msg_{i}"}
    now = int(time.time())
    secret = standard_secret(HOOK_SECRET)
    return {
        "Content-Type": "application/json",
        "webhook-id": f"msg_{i}",
        "webhook-timestamp": str(now),
        "webhook-signature": sign_standard_webhooks(secret, f"msg_{i}", now, body),
    }


def new_store(path: Path) -> str:
    """A fresh store with the bench inbox; the secret of a token for it."""
    box = oncebox.open(f"sqlite:///{path}", inboxes=INBOXES)
    secret = box.create_token("bench", ["*"], ["read", "write"]).secret
    box.close()
    return secret


async def worker_cases(
    args: argparse.Namespace,
    port: int,
    auth: dict[str, str],
    runs: dict[str, Run],
    say: Any,
) -> None:
    """No-op and single deliveries again, on the N-worker server, same clients and ids."""
    noop_body = json_body(0)
    await load("warm", port, "/bench/noop", [noop_body] * args.warmup, auth, args.clients)
    name = f"no-op, {args.workers} workers"
    runs["noop_workers"] = await load(
        name, port, "/bench/noop", [noop_body] * args.n, auth, args.clients, check=expect_noop
    )
    say(line(runs["noop_workers"]))
    path = f"/v1/inboxes/{INBOX}/deliveries"
    bodies = [json_body(i) for i in range(args.warmup)]
    traced = Traced(await load("warm", port, path, bodies, auth, args.clients))
    bodies = [json_body(i) for i in range(10_000_000, 10_000_000 + args.n)]
    name = f"single, {args.workers} workers"
    runs["single_workers"] = await load(
        name, port, path, bodies, auth, args.clients, check=expect_accepted
    )
    say(line(runs["single_workers"]))
    say(f"  answered by: {runs['single_workers'].workers}")
    traced.say(runs["single_workers"], say)


class Traced:
    """With --turns: the write turns and server CPU of the run that starts right after
    ``warm`` (whose answers name the server's worker processes)."""

    def __init__(self, warm: Run) -> None:
        self.pids = [int(pid) for pid in warm.workers if pid.isdigit()]
        self.start = time.monotonic()
        self.cpu = turns.cpu(self.pids) if TURNS and self.pids else None

    def say(self, run: Run, say: Any) -> None:
        if TURNS is None or self.cpu is None:
            return
        for text in turns.turns(TURNS, self.start, time.monotonic()):
            say(text)
        say(turns.cpu_line(self.cpu, turns.cpu(self.pids), run.requests))


def line(run: Run) -> str:
    p50, p99 = run.percentile(50), run.percentile(99)
    lat = f"p50 {p50:8.2f} ms  p99 {p99:8.2f} ms" if p50 is not None and p99 is not None else ""
    unit = "deliveries/s" if run.items != run.requests else "req/s"
    extra = f"  ({run.request_rate:,.1f} req/s)" if run.items != run.requests else ""
    return f"{run.name:22} {run.rate:12,.1f} {unit:13} {lat}{extra}"


def fmt_load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
