"""The fault proxy of the forwarding campaign (reliability/forward.py): A's requests to B
pass through it; it answers 500s, holds requests past A's timeout, drops B's answers, and
checks every signature with the official ``standardwebhooks`` package."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import httpx
import standardwebhooks

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example key


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
