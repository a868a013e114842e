"""The Redis stream side of the forwarding campaign (``reliability/forward.py
--destination redis-stream``).

A's dispatcher sends each accepted record to a real redis-server's stream through the
``redis-stream`` destination's marker script. The server keeps every write in its
append-only file with ``appendfsync always`` (Redis writes and fsyncs it before it
answers), so a SIGKILL loses nothing Redis answered; it is restarted on the same port
and reloads the file, its script cache empty (the dispatcher loads the script again).

Between the two, a fault proxy that speaks no Redis: it copies bytes both ways and, at
random, refuses a connection, drops Redis's answer (Redis ran the script, the dispatcher
hears nothing and sends the revision again), or holds the answer past the dispatcher's
one-second timeout and then closes. A resend must find the marker and add nothing.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import redis

STREAM = "payments"
CONFIG = """
[inboxes.payments]
codec = "keyed"

[inboxes.payments.forward.b]
kind = "redis-stream"
url = "redis://127.0.0.1:{proxy}/0"
stream = "{stream}"
marker_ttl = "{marker_ttl}"
timeout = "1s"
max_in_flight = 16
retry = ["0s", {retries}]
circuit_cooldown = "1s"
"""


def server_command(port: int, work: Path) -> list[str]:
    """A redis-server that fsyncs every write before it answers, on 127.0.0.1 only."""
    (work / "redis").mkdir(exist_ok=True)
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no",
            "--dir", str(work / "redis")]  # fmt: skip


def answers(port: int) -> bool:
    """Whether the server at ``port`` answers a PING (it has loaded its file)."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5,
                         socket_connect_timeout=0.5)  # fmt: skip
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False
    finally:
        client.close()


def wait_up(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("redis-server did not start")
        time.sleep(0.05)


def carried(port: int, stream: str = STREAM) -> Counter[str]:
    """How many of the stream's entries carry each idempotency key (read directly)."""
    client = redis.Redis(host="127.0.0.1", port=port)
    found: Counter[str] = Counter()
    after = "-"
    try:
        while True:
            page = client.xrange(stream, min=after, count=1000)
            found.update(fields[b"idempotency_key"].decode() for _, fields in page)
            if len(page) < 1000:
                return found
            after = "(" + page[-1][0].decode()
    finally:
        client.close()


class FaultProxy:
    """Bytes between the dispatcher and Redis, with faults; counts what it did."""

    def __init__(self, upstream: int, rng: random.Random) -> None:
        self.upstream, self.rng = upstream, rng
        self.done: Counter[str] = Counter()

    def passed(self) -> int:
        """Answers passed back so far: the dispatcher's health (it is sending)."""
        return self.done["answers passed back"]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.rng.random() < 0.03:
            self.done["connections refused"] += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            self.done["connections while Redis was down"] += 1
            writer.close()
            return
        outward = asyncio.ensure_future(self.copy(reader, up_writer))
        try:
            while chunk := await up_reader.read(65536):
                roll = self.rng.random()
                if roll < 0.08:
                    self.done["answers dropped"] += 1
                    return
                if roll < 0.12:
                    self.done["answers held past the timeout"] += 1
                    await asyncio.sleep(1.5)
                    return
                writer.write(chunk)
                await writer.drain()
                self.done["answers passed back"] += 1
        except ConnectionError:
            pass
        finally:
            outward.cancel()
            writer.close()
            up_writer.close()

    @staticmethod
    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def run(self, port: int, ready: threading.Event, stop: threading.Event) -> None:
        async def main() -> None:
            server = await asyncio.start_server(self.handle, "127.0.0.1", port)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.1)
            server.close()

        asyncio.run(main())
