"""Forwarding, exactly once in effect through faults and kills (issue 22, item 7).

oncebox A (``oncebox serve``) takes ``--clients`` (16) clients' deliveries; its dispatcher
(``oncebox forward``, or with ``--dispatch-in serve`` the one inside A's server) sends each
accepted record to oncebox B, a real ``oncebox serve`` whose ``json`` inbox takes Standard
Webhooks, through a fault proxy in this process (reliability/forward_proxy.py) that, at
random (``--seed``):

- answers 500 without passing the request on;
- holds the request past A's timeout, then passes it on (B commits, A hears nothing);
- passes it on and drops B's answer, closing the connection (B committed);
- otherwise passes it on and B's answer back.

The proxy also checks every request's signature with the official ``standardwebhooks``
package, as a receiver written with it would. Killed with SIGKILL and restarted at once,
each a random time after it is up again (a dispatcher: once it has sent a request): A's
dispatcher 2 to 6 seconds, B's server 5 to 10, and with ``--kill-a`` (or ``--dispatch-in
serve``, where A's server is the dispatcher) A's server 4 to 10. A client resends the
same delivery until A answers it, as an at-least-once sender does, and counts it
accepted on a 201, or on a 200 duplicate (A committed it, its answer was lost). When the
clients stop, the kills stop; once A's outbox is empty the campaign compares: A's
records must be the deliveries its clients were told were accepted, and each A record's
idempotency key must be in exactly one B record (B's records carry A's document, the key
in it), none missing. B's inbox applies each record once (I3), so B's records are its
apply count. ``--backend postgres`` puts A and B in a throwaway PostgreSQL server
(tests/pgcluster.py, unix socket under /tmp), stopped and wiped after; with
``--kill-pg`` that server runs durable and its postmaster is killed with SIGKILL 5 to 12
seconds after it is up again, and started again on the same socket and port
(reliability/forward_victims.py), while A takes deliveries and the dispatcher forwards.

Controls, which must fail:

- ``--control new-id``: the proxy gives each attempt a new ``webhook-id`` (re-signed, so
  B accepts it): B keeps resends as new records, some A records twice;
- ``--control early-ack``: the proxy answers 200 to some requests without passing them
  on, as a dispatcher that marked a forward done before its answer would: some A
  records never reach B.

``--destination redis-stream`` puts a real redis-server's stream where B was
(reliability/forward_redis.py): A's ``redis-stream`` destination, a byte-level fault
proxy that refuses connections, drops answers and holds them past the timeout, and
Redis itself killed with SIGKILL 5 to 10 s after it answers again (its append-only file
fsynced before each answer, so nothing it answered is lost). Each A record's key must be
in exactly one stream entry. Its control, ``--control short-marker``, gives the marker a
life of 1 ms, as a stream with no dedup would have: a resent revision is added again.

    .venv/bin/python reliability/forward.py                       # 60 s of load
    .venv/bin/python reliability/forward.py --backend postgres --kill-a
    .venv/bin/python reliability/forward.py --backend postgres --kill-pg
    .venv/bin/python reliability/forward.py --dispatch-in serve --seconds 30
    .venv/bin/python reliability/forward.py --control new-id --seconds 30
    .venv/bin/python reliability/forward.py --destination redis-stream --kill-a
    .venv/bin/python reliability/forward.py --destination redis-stream --control short-marker
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "reliability"))

import forward_redis  # noqa: E402
import oncebox  # noqa: E402
from forward_proxy import SECRET, Proxy  # noqa: E402
from forward_victims import STARTED, Postmaster, Process, again  # noqa: E402
from serveproc import ONCEBOX, free_port  # noqa: E402

A_CONFIG = """
[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.b]
url = "http://127.0.0.1:{proxy}/v1/inboxes/hooks/deliveries"
sign = {{ scheme = "standard-webhooks", secret_env = "HOOK_SECRET" }}
timeout = "1s"
max_in_flight = 16
retry = ["0s", {retries}]
circuit_cooldown = "1s"
"""
B_CONFIG = """
[inboxes.hooks]
codec = "json"
webhook = { scheme = "standard-webhooks", secret_env = "HOOK_SECRET" }
"""
ENV = {**os.environ, "HOOK_SECRET": SECRET}
os.environ["HOOK_SECRET"] = SECRET  # this process opens A's store with A's configuration


@contextlib.contextmanager
def stores(backend: str, work: Path, durable: bool) -> Iterator[tuple[str, str, Any]]:
    """A's and B's store URLs and their server: SQLite files in ``work`` (no server), or
    two databases of a throwaway PostgreSQL server (or the one ``ONCEBOX_TEST_PG``
    names), dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{work / 'a.db'}", f"sqlite:///{work / 'b.db'}", None
        return
    from pgcluster import throwaway_server

    with throwaway_server("oncebox-fwd-", durable=durable) as server:
        names = [f"fwd_{side}_{uuid.uuid4().hex[:8]}" for side in "ab"]
        a_url, b_url = (server.create_database(name) for name in names)
        try:
            yield a_url, b_url, server
        finally:
            for name in names:
                with contextlib.suppress(Exception):
                    server.drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--control", choices=["none", "new-id", "early-ack", "short-marker"],
                        default="none")  # fmt: skip
    parser.add_argument("--destination", choices=["oncebox", "redis-stream"], default="oncebox",
                        help="where A forwards: oncebox B, or a Redis stream")  # fmt: skip
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite",
                        help="A's and B's stores")  # fmt: skip
    parser.add_argument("--kill-a", action="store_true", help="kill A's server too")
    parser.add_argument("--kill-pg", action="store_true",
                        help="kill the PostgreSQL server too (--backend postgres)")  # fmt: skip
    parser.add_argument("--dispatch-in", choices=["forward", "serve"], default="forward",
                        help="A's dispatcher: `oncebox forward`, or inside A's server")  # fmt: skip
    args = parser.parse_args()
    if args.control != "none" and (args.control == "short-marker") != (
        args.destination == "redis-stream"
    ):
        parser.error(f"--control {args.control} does not go with --destination {args.destination}")
    if args.kill_pg and args.backend != "postgres":
        parser.error("--kill-pg goes with --backend postgres")
    if args.destination == "redis-stream" and shutil.which("redis-server") is None:
        raise SystemExit("redis-server not found: apt-get install redis-server")
    work = Path(tempfile.mkdtemp(prefix="oncebox-forward-"))
    try:
        with stores(args.backend, work, durable=args.kill_pg) as (a_url, b_url, server):
            try:
                report = campaign(args, work, a_url, b_url, server)
            finally:
                for proc in STARTED:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))
    ok = (report["lost"] == 0 and report["twice_or_more"] == 0
          and report["b_records"] == report["a_accepted"]
          and report["a_records_not_told"] == 0 and report["told_not_in_a"] == 0)  # fmt: skip
    print("exactly once in effect" if ok else "NOT exactly once")
    sys.exit(0 if ok else 1)


def campaign(
    args: argparse.Namespace, work: Path, a_url: str, b_url: str, server: Any
) -> dict[str, Any]:
    rng = random.Random(args.seed + 1)  # the proxy's
    a_port, b_port, proxy_port = free_port(), free_port(), free_port()
    to_redis = args.destination == "redis-stream"
    retries = ", ".join(['"1s"'] * 62)
    if to_redis:
        ttl = "0.001s" if args.control == "short-marker" else "30d"
        a_config = forward_redis.CONFIG.format(
            proxy=proxy_port, retries=retries, stream=forward_redis.STREAM, marker_ttl=ttl
        )
    else:
        (work / "b.toml").write_text(B_CONFIG)
        a_config = A_CONFIG.format(proxy=proxy_port, retries=retries)
    (work / "a.toml").write_text(a_config)
    a_env = {**ENV, "ONCEBOX_DB": a_url, "ONCEBOX_CONFIG": str(work / "a.toml")}
    b_env = {**ENV, "ONCEBOX_DB": b_url, "ONCEBOX_CONFIG": str(work / "b.toml")}
    serve = [*ONCEBOX, "serve", "--workers", "1", "--log-format", "off", "--port"]
    in_serve = args.dispatch_in == "serve"

    box = oncebox.open(a_url, config=work / "a.toml")
    secret = box.create_token("clients", ["*"], ["write"]).secret
    if to_redis:
        proxy: Any = forward_redis.FaultProxy(b_port, rng)
        sent = proxy.passed
        b = Process(forward_redis.server_command(b_port, work), ENV,
                    lambda: int(forward_redis.answers(b_port)))  # fmt: skip
        forward_redis.wait_up(b_port, b.proc)
    else:
        proxy = Proxy(f"http://127.0.0.1:{b_port}", rng, args.control)
        sent = lambda: proxy.done["verified"] + proxy.done["unverified"]  # noqa: E731
    ready, stop = threading.Event(), threading.Event()
    threading.Thread(target=proxy.run, args=(proxy_port, ready, stop), daemon=True).start()
    ready.wait()
    a_command = [*serve, str(a_port), *([] if in_serve else ["--no-forward"])]
    a = Process(a_command, a_env, f"http://127.0.0.1:{a_port}/healthz")
    if not to_redis:
        b = Process([*serve, str(b_port)], b_env, f"http://127.0.0.1:{b_port}/healthz")
    victims = []
    if not in_serve:
        sending = Process([*ONCEBOX, "forward", "--poll", "0.1"], a_env, sent)
        victims.append((sending, "dispatcher", 2.0, 6.0))  # up: it has sent a request
    if in_serve or args.kill_a:
        victims.append((a, "A (dispatcher inside)" if in_serve else "A", 4.0, 10.0))
    victims.append((b, "Redis" if to_redis else "B", 5.0, 10.0))
    postmaster = Postmaster(server) if args.kill_pg else None
    if postmaster is not None:
        victims.append((postmaster, "PostgreSQL", 5.0, 12.0))
    kills: Counter[str] = Counter()
    told: set[str] = set()
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    load_over = threading.Event()

    def client(k: int) -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{a_port}", headers=headers,
                          timeout=30) as http:  # fmt: skip
            n = 0
            while not load_over.is_set():
                key, heard = f"c{k}-{n}", ""
                while True:  # the same delivery until A answers it
                    try:
                        got = http.post("/v1/inboxes/payments/deliveries",
                                        content=f"pay {k}.{n}",
                                        headers={"Oncebox-Key": key})  # fmt: skip
                    except httpx.ConnectError:
                        heard = "connection refused"  # A down
                    except httpx.TransportError:
                        heard = "answer lost"  # A killed with the request in it
                    else:
                        if got.status_code in (200, 201):
                            break
                        heard = f"answered {got.status_code}"
                    with lock:
                        seen[f"resent after {heard}"] += 1
                    time.sleep(0.2 if heard == "connection refused" else 0.05)
                with lock:
                    seen[f"{got.status_code} {got.json()['verdict']}"] += 1
                    told.add(key)
                n += 1

    clients = [threading.Thread(target=client, args=(k,), daemon=True)
               for k in range(args.clients)]  # fmt: skip
    for thread in clients:
        thread.start()
    began = time.monotonic()
    when = random.Random(args.seed)  # the kills' own draws: the proxy's race with them
    due: list[float | None] = [None] * len(victims)  # drawn once the victim is up
    watched = [a, *(v[0] for v in victims if v[0] is not a)]
    while time.monotonic() - began < args.seconds:
        time.sleep(0.05)
        for i, (victim, name, low, high) in enumerate(victims):
            victim.supervise()
            if due[i] is None and victim.up():
                due[i] = time.monotonic() + when.uniform(low, high)
            elif (at := due[i]) is not None and time.monotonic() >= at:
                victim.kill()
                kills[name] += 1
                due[i] = None
    load_over.set()
    for thread in clients:
        thread.join()
    drained = time.monotonic()

    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        [standing] = again(lambda: box.forwarding("b"))
        if standing.backlog == 0:
            break
        for each in watched:
            each.supervise()
        time.sleep(0.5)
    drained = time.monotonic() - drained
    for victim, *_ in victims:
        if victim is not b or not to_redis:
            victim.stop()
    if not args.kill_a and not in_serve:
        a.stop()
    stop.set()
    [standing] = again(lambda: box.forwarding("b"))
    keys, identities = again(lambda: all_keys(box, "payments"))
    box.close()
    if to_redis:
        carried = forward_redis.carried(b_port)
        b.stop()
    else:
        b_box = oncebox.open(b_url, config=work / "b.toml")
        carried = Counter(json.loads(c)["idempotency_key"] for c in all_contents(b_box, "hooks"))
        b_box.close()
    return {
        "destination": args.destination,
        "backend": args.backend,
        "dispatch_in": args.dispatch_in,
        "kill_a": args.kill_a or in_serve,
        "control": args.control,
        "seconds": args.seconds,
        "clients": args.clients,
        "a_accepted": len(keys),
        "clients_told_accepted": len(told),
        "a_records_not_told": len(identities - told),
        "told_not_in_a": len(told - identities),
        "b_records": sum(carried.values()),
        "lost": len(keys - set(carried)),
        "twice_or_more": sum(1 for k in keys if carried[k] > 1),
        "a_backlog_left": standing.backlog,
        "a_dead": standing.dead,
        "drain_seconds": round(drained),
        "kills": dict(kills),
        "exited_on_their_own": sum(getattr(each, "exits", 0) for each in watched),
        "clients_heard": dict(seen),
        "proxy": {**({} if to_redis else {"unverified": 0}), **proxy.done},
        **({"postgres": postmaster.figures()} if postmaster is not None else {}),
    }


def all_keys(box: oncebox.Oncebox, inbox: str) -> tuple[set[str], set[str]]:
    """The idempotency keys of an inbox's records, and their identities."""
    keys, identities, after = set(), set(), 0
    while True:
        page = box.feed(inbox, after=after, limit=1000)
        keys |= {e.idempotency_key for e in page.entries}
        identities |= {e.identity or "" for e in page.entries}
        if page.next_after == after:
            return keys, identities
        after = page.next_after


def all_contents(box: oncebox.Oncebox, inbox: str) -> list[bytes]:
    found, after = [], 0
    while True:
        page = box.feed(inbox, after=after, limit=1000)
        found += [e.content or b"" for e in page.entries]
        if page.next_after == after:
            return found
        after = page.next_after


if __name__ == "__main__":
    main()
