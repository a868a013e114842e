"""Forwarding, exactly once in effect through faults and kills (issue 22, item 7).

oncebox A (``oncebox serve --no-forward``) takes ``--clients`` (16) clients' deliveries;
its dispatchers (``oncebox forward``) send each accepted record to oncebox B, a real
``oncebox serve`` whose ``json`` inbox takes Standard Webhooks, through a fault proxy in
this process that, at random (``--seed``):

- answers 500 without passing the request on;
- holds the request past A's timeout, then passes it on (B commits, A hears nothing);
- passes it on and drops B's answer, closing the connection (B committed);
- otherwise passes it on and B's answer back.

The proxy also checks every request's signature with the official ``standardwebhooks``
package, as a receiver written with it would. A's dispatcher is killed with SIGKILL and
restarted every 2 to 6 seconds, B's server every 5 to 10. When the clients stop, the
kills stop; once A's outbox is empty the campaign compares A's accepted records with B's:
each A record's idempotency key must be in exactly one B record (B's records carry A's
document, the key in it), and none may be missing. B's inbox applies each record once
(I3), so B's records are its apply count.

Controls, which must fail:

- ``--control new-id``: the proxy gives each attempt a new ``webhook-id`` (re-signed, so
  B accepts it): B keeps resends as new records, some A records twice;
- ``--control early-ack``: the proxy answers 200 to some requests without passing them
  on, as a dispatcher that marked a forward done before its answer would: some A
  records never reach B.

    .venv/bin/python reliability/forward.py                       # 60 s of load
    .venv/bin/python reliability/forward.py --control new-id --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
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
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import standardwebhooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import oncebox  # noqa: E402
from serveproc import ONCEBOX, free_port  # noqa: E402

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example key
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


class Proxy:
    """A's requests to B, through faults; counts what it did and what it verified."""

    def __init__(self, upstream: str, rng: random.Random, control: str) -> None:
        self.upstream = upstream
        self.rng = rng
        self.control = control
        self.done: Counter[str] = Counter()
        self.verifier = standardwebhooks.Webhook(SECRET)
        self.client: httpx.AsyncClient | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                answer = await self.one(path, headers, body)
                if answer is None:
                    writer.close()  # the answer dropped: A hears nothing
                    return
                status, content = answer
                writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, len(content), content))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    async def one(self, path: str, headers: dict[str, str], body: bytes) -> Any:
        try:
            self.verifier.verify(body, headers)
            self.done["verified"] += 1
        except standardwebhooks.webhooks.WebhookVerificationError:
            self.done["unverified"] += 1
        roll = self.rng.random()
        if roll < 0.10:
            self.done["answered 500"] += 1
            return 500, b"{}"
        if self.control == "early-ack" and roll < 0.20:
            self.done["acknowledged, not passed on"] += 1
            return 200, b"{}"
        if self.control == "new-id":
            headers = resigned(headers, body)
        if roll > 0.95:
            self.done["held past the timeout, then passed on"] += 1
            await asyncio.sleep(1.5)
            await self.pass_on(path, headers, body)
            return None
        answer = await self.pass_on(path, headers, body)
        if answer is None:
            self.done["B down"] += 1
            return None
        if roll > 0.85:
            self.done["passed on, answer dropped"] += 1
            return None
        self.done["passed on"] += 1
        return answer

    async def pass_on(self, path: str, headers: dict[str, str], body: bytes) -> Any:
        assert self.client is not None
        sent = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
        try:
            got = await self.client.post(self.upstream + path, content=body, headers=sent)
        except httpx.HTTPError:
            return None
        return got.status_code, got.content

    def run(self, port: int, ready: threading.Event, stop: threading.Event) -> None:
        async def main() -> None:
            self.client = httpx.AsyncClient(timeout=10)
            server = await asyncio.start_server(self.handle, "127.0.0.1", port)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.1)
            server.close()
            await self.client.aclose()

        asyncio.run(main())


def resigned(headers: dict[str, str], body: bytes) -> dict[str, str]:
    """The control's bug: a new message id on every attempt, signed as the sender would."""
    fresh = f"msg_{uuid.uuid4().hex}"
    when = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    signature = standardwebhooks.Webhook(SECRET).sign(fresh, when, body.decode())
    return {**headers, "webhook-id": fresh, "idempotency-key": fresh,
            "webhook-signature": signature}  # fmt: skip


def start(command: list[str], env: dict[str, str], health: str | None = None) -> Any:
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while health is not None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(health, timeout=1).status_code == 200:
                break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"{command} did not start")
        time.sleep(0.1)
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--control", choices=["none", "new-id", "early-ack"], default="none")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="oncebox-forward-"))
    a_url, b_url = f"sqlite:///{work / 'a.db'}", f"sqlite:///{work / 'b.db'}"
    a_port, b_port, proxy_port = free_port(), free_port(), free_port()
    (work / "b.toml").write_text(B_CONFIG)
    retries = ", ".join(['"1s"'] * 62)
    (work / "a.toml").write_text(A_CONFIG.format(proxy=proxy_port, retries=retries))
    a_env = {**ENV, "ONCEBOX_DB": a_url, "ONCEBOX_CONFIG": str(work / "a.toml")}
    b_env = {**ENV, "ONCEBOX_DB": b_url, "ONCEBOX_CONFIG": str(work / "b.toml")}
    serve = [*ONCEBOX, "serve", "--workers", "1", "--log-format", "off", "--port"]
    forward = [*ONCEBOX, "forward", "--poll", "0.1"]

    box = oncebox.open(a_url, config=work / "a.toml")
    secret = box.create_token("clients", ["*"], ["write"]).secret
    proxy = Proxy(f"http://127.0.0.1:{b_port}", rng, args.control)
    ready, stop = threading.Event(), threading.Event()
    threading.Thread(target=proxy.run, args=(proxy_port, ready, stop), daemon=True).start()
    ready.wait()
    a = start([*serve, str(a_port), "--no-forward"], a_env, f"http://127.0.0.1:{a_port}/healthz")
    b = start([*serve, str(b_port)], b_env, f"http://127.0.0.1:{b_port}/healthz")
    dispatcher = start(forward, a_env)
    kills: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    load_over = threading.Event()

    def client(k: int) -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{a_port}", headers=headers,
                          timeout=30) as http:  # fmt: skip
            n = 0
            while not load_over.is_set():
                got = http.post("/v1/inboxes/payments/deliveries", content=f"pay {k}.{n}",
                                headers={"Oncebox-Key": f"c{k}-{n}"})  # fmt: skip
                if got.status_code == 201:
                    accepted["records"] += 1
                    n += 1

    clients = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for thread in clients:
        thread.start()
    began = time.monotonic()
    next_a, next_b = began + rng.uniform(2, 6), began + rng.uniform(5, 10)
    while time.monotonic() - began < args.seconds:
        time.sleep(0.05)
        if time.monotonic() >= next_a:
            dispatcher.send_signal(signal.SIGKILL)
            dispatcher.wait()
            kills["dispatcher"] += 1
            dispatcher = start(forward, a_env)
            next_a = time.monotonic() + rng.uniform(2, 6)
        if time.monotonic() >= next_b:
            b.send_signal(signal.SIGKILL)
            b.wait()
            kills["B"] += 1
            b = start([*serve, str(b_port)], b_env, f"http://127.0.0.1:{b_port}/healthz")
            next_b = time.monotonic() + rng.uniform(5, 10)
    load_over.set()
    for thread in clients:
        thread.join()

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        [standing] = box.forwarding("b")
        if standing.backlog == 0:
            break
        time.sleep(0.5)
    for proc in (dispatcher, a, b):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    stop.set()
    [standing] = box.forwarding("b")
    keys = all_keys(box, "payments")
    box.close()
    b_box = oncebox.open(b_url, config=work / "b.toml")
    carried = Counter(json.loads(c)["idempotency_key"] for c in all_contents(b_box, "hooks"))
    b_box.close()
    shutil.rmtree(work, ignore_errors=True)
    report = {
        "control": args.control,
        "seconds": args.seconds,
        "clients": args.clients,
        "a_accepted": len(keys),
        "clients_told_accepted": accepted["records"],
        "b_records": sum(carried.values()),
        "lost": len(keys - set(carried)),
        "twice_or_more": sum(1 for k in keys if carried[k] > 1),
        "a_backlog_left": standing.backlog,
        "a_dead": standing.dead,
        "kills": dict(kills),
        "proxy": {"unverified": 0, **proxy.done},
    }
    print(json.dumps(report, indent=2))
    ok = report["lost"] == 0 and report["twice_or_more"] == 0 and report["b_records"] == len(keys)
    print("exactly once in effect" if ok else "NOT exactly once")
    sys.exit(0 if ok else 1)


def all_keys(box: oncebox.Oncebox, inbox: str) -> set[str]:
    found, after = set(), 0
    while True:
        page = box.feed(inbox, after=after, limit=1000)
        found |= {e.idempotency_key for e in page.entries}
        if page.next_after == after:
            return found
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
