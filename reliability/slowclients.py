"""What unauthenticated and slow clients cost a real ``oncebox serve`` (issue 13, item 2).

Starts ``oncebox serve --workers 1`` on a fresh SQLite file on 127.0.0.1 and probes it
over raw sockets, printing one line per probe (the figures of RELIABILITY.md's Security
section):

- **idle uploads**: ``--uploads`` connections each send a delivery head declaring 1 MiB
  (the default bound) and all of the body but its last byte, then idle; the server's RSS
  before and after, and how many were answered and closed. Without a token first, then
  (the negative control) with a live one to the feed inbox, whose bodies the server
  does take in.
- **slow heads**: ``--slow`` connections send a request head one byte a second (and as
  many send nothing at all); seconds until the server closes each (``--cap`` at most).
- **slow bodies**: the same with a complete, authenticated head and a body one byte a
  second.
- **over the bound**: with ``--max-connections B``, B idle connections, then ``--slow``
  more: how many of those were closed within a second, and whether a request is served
  once the held ones go.
- **made-up webhook uploads** (issue 19, item 2): on a ``keyed`` GitHub inbox, for each
  of ``--hook-uploads`` (200 and 1,000) and ``--hook-workers`` (1 and 2), as many
  connections each send a head with ``X-Hub-Signature-256: sha256=00...`` and a
  ``X-GitHub-Delivery`` of their own, declaring 1 MiB, and all of the body but its last
  byte, then idle; the RSS of every server process before, while they idle, and once
  they have gone, and how many were answered 503 (the unverified budget, 32 MiB per
  worker by default).

    .venv/bin/python reliability/slowclients.py                  # ~2 minutes
    .venv/bin/python reliability/slowclients.py --uploads 200 --slow 20
    .venv/bin/python reliability/slowclients.py --only-hooks --hook-uploads 200 1000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serveproc import (  # noqa: E402
    Served,
    closed_within,
    create_token,
    get,
    head,
    rss_bytes,
    serving,
    status_of,
)

DELIVERIES = "/v1/inboxes/listing/deliveries"
BODY = 1_048_576


def settled_rss(pid: int) -> int:
    last = rss_bytes(pid)
    for _ in range(40):
        time.sleep(0.25)
        now = rss_bytes(pid)
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


def idle_uploads(served: Served, count: int, headers: Sequence[str], path: str = DELIVERIES) -> str:
    before = settled_rss(served.proc.pid)
    sockets = []
    for _ in range(count):
        sock = served.connect()
        sock.sendall(head(path, BODY, *headers))
        with contextlib.suppress(OSError):
            sock.sendall(b"x" * (BODY - 1))
        sockets.append(sock)
    after = settled_rss(served.proc.pid)
    answered = closed = 0
    for sock in sockets:
        shut, answer = closed_within(sock, 0.2)
        answered += status_of(answer) is not None
        closed += shut
        sock.close()
    return (
        f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB (+{(after - before) / 2**20:.1f}),"
        f" {answered} answered, {closed} closed by the server"
    )


HOOK_CONFIG = """
[inboxes.gh]
codec = "keyed"
webhook = { scheme = "github", secret = "slowclients-probe-secret" }
"""


def tree_rss(pid: int) -> int:
    """The RSS of a process and all of its descendants (the workers of ``serve``)."""
    total, todo = 0, [pid]
    while todo:
        one = todo.pop()
        with contextlib.suppress(OSError, AssertionError):
            total += rss_bytes(one)
            for task in Path(f"/proc/{one}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


def settled_tree_rss(pid: int) -> int:
    last = tree_rss(pid)
    for _ in range(40):
        time.sleep(0.25)
        now = tree_rss(pid)
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


def hook_uploads(served: Served, count: int) -> str:
    """``count`` idle uploads with made-up GitHub signatures (see the module)."""
    path = "/v1/inboxes/gh/deliveries"
    pid = served.proc.pid
    before = settled_tree_rss(pid)
    sockets = []
    for n in range(count):
        sock = served.connect()
        sock.sendall(head(path, BODY, f"X-Hub-Signature-256: sha256={'0' * 64}",
                          f"X-GitHub-Delivery: probe-{n}-{time.monotonic_ns()}"))  # fmt: skip
        with contextlib.suppress(OSError):
            sock.sendall(b"x" * (BODY - 1))
        sockets.append(sock)
    held = settled_tree_rss(pid)
    busy = 0
    for sock in sockets:
        _, answer = closed_within(sock, 0.05)
        busy += status_of(answer) == 503
        sock.close()
    time.sleep(1.0)  # the server sees each connection go, and lets its body go
    after = settled_tree_rss(pid)
    mib = 2**20
    return (
        f"RSS {before / mib:.1f} -> {held / mib:.1f} MiB (+{(held - before) / mib:.1f}) while "
        f"idle, {after / mib:.1f} MiB (+{(after - before) / mib:.1f}) once gone; "
        f"{busy} answered 503"
    )


def time_to_close(served: Served, count: int, cap: float, prompt: bytes, dribble: bytes) -> str:
    """``count`` connections sending ``prompt`` at once, then ``dribble`` a byte a second,
    and ``count`` silent ones."""
    times: dict[str, list[float]] = {"dribbling": [], "silent": []}
    lock = threading.Lock()

    def one(kind: str) -> None:
        sock = served.connect()
        started = time.monotonic()
        data = dribble if kind == "dribbling" else b""
        shut = False
        if kind == "dribbling" and prompt:
            sock.sendall(prompt)
        for i in range(int(cap)):
            if i < len(data):
                try:
                    sock.send(data[i : i + 1])
                except OSError:
                    shut = True
                    break
            shut, _ = closed_within(sock, 1.0)
            if shut:
                break
        with lock:
            times[kind].append(time.monotonic() - started if shut else float("inf"))
        sock.close()

    threads = [threading.Thread(target=one, args=(kind,)) for kind in times for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    parts = []
    for kind, seconds in times.items():
        done = [s for s in seconds if s != float("inf")]
        if not seconds:
            continue
        figure = (
            f"median {statistics.median(done):.1f} s, max {max(done):.1f} s" if done else "none"
        )
        parts.append(f"{kind}: {len(done)}/{len(seconds)} closed within {cap:g} s ({figure})")
    return "; ".join(parts)


def over_the_bound(served: Served, bound: int, extra: int) -> str:
    held = [served.connect() for _ in range(bound)]
    time.sleep(0.3)
    refused = 0
    for _ in range(extra):
        sock = served.connect()
        shut, _ = closed_within(sock, 1.0)
        refused += shut
        sock.close()
    for sock in held:
        sock.close()
    time.sleep(0.3)
    try:
        served_again = get(f"{served.base}/healthz")[0] == 200
    except OSError:
        served_again = False
    return (
        f"{bound} held, {refused}/{extra} over the bound closed within 1 s; "
        f"served again after: {served_again}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--slow", type=int, default=20)
    parser.add_argument("--cap", type=float, default=40.0, help="seconds a probe waits")
    parser.add_argument("--header-timeout", type=float, default=5.0)
    parser.add_argument("--body-timeout", type=float, default=20.0)
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--hook-uploads", type=int, nargs="*", default=[200, 1000])
    parser.add_argument("--hook-workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--only-hooks", action="store_true", help="the webhook probe only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncebox-slowclients-") as work:
        config = Path(work) / "hooks.toml"
        config.write_text(HOOK_CONFIG)
        for workers in args.hook_workers:
            for count in args.hook_uploads:
                hooks_url = f"sqlite:///{Path(work) / f'hooks-{workers}-{count}.db'}"
                env = {"ONCEBOX_CONFIG": str(config)}
                options = ["--workers", str(workers), "--body-timeout", "60"]
                with serving(hooks_url, *options, env=env) as served:
                    for _ in range(20):
                        get(f"{served.base}/healthz")
                    line = hook_uploads(served, count)
                    print(f"{count} made-up webhook uploads, serve --workers {workers}: {line}",
                          flush=True)  # fmt: skip
        if args.only_hooks:
            return 0
        url = f"sqlite:///{Path(work) / 'served.db'}"
        secret = create_token(url)
        authed = f"Authorization: Bearer {secret}"
        options = [
            "--workers", "1",
            "--header-timeout", str(args.header_timeout),
            "--body-timeout", str(args.body_timeout),
        ]  # fmt: skip
        with serving(url, *options) as served:
            for _ in range(20):
                get(f"{served.base}/healthz")
            print("serve", " ".join(options), flush=True)
            line = idle_uploads(served, args.uploads, [])
            print(f"{args.uploads} idle unauthenticated uploads: {line}", flush=True)
            # To the feed inbox, whose bound (1 MiB) holds them: past listing's 64 KiB,
            # one delivery keeps only a dead letter's head (issue 19, item 5).
            line = idle_uploads(served, args.uploads, [authed], "/v1/inboxes/feed/deliveries")
            print(f"{args.uploads} idle authenticated uploads (control): {line}", flush=True)
            line = time_to_close(served, args.slow, args.cap, b"", head(DELIVERIES, 10))
            print(f"slow heads, a byte a second: {line}", flush=True)
            body = b'{"x": 1}' * 8
            line = time_to_close(
                served, args.slow, args.cap, head(DELIVERIES, len(body), authed), body
            )
            print(f"slow bodies, head at once then a byte a second: {line}", flush=True)
        bound = ["--max-connections", str(args.max_connections), "--header-timeout", "60"]
        with serving(url, "--workers", "1", *bound) as served:
            line = over_the_bound(served, args.max_connections, args.slow)
            print(f"connections over --max-connections: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
