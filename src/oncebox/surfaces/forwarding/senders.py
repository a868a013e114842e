"""How one attempt is made, per kind of destination: what it sends and what it reports.

Every attempt at a revision carries the same idempotency key (and the same bytes), so a
receiver that dedups by it applies the revision once however often it is sent:

- ``http``: a POST of the revision as JSON, with Standard Webhooks' ``webhook-id`` (the
  key), ``webhook-timestamp`` and, where a secret is configured, ``webhook-signature``
  (made by the specification's own Python library, ``standardwebhooks``), and
  ``Idempotency-Key`` (the key again, for receivers that follow the IETF draft). At most
  the first 1 KiB of the answer is read.
- ``redis-stream``: one Lua script, run atomically by Redis, looks for the key's marker
  and adds the entry only when there is none, setting the marker in the same step: the
  stream holds one entry per revision however often it is sent.
- ``python``: ``module:function`` called with the revision (the JSON document, parsed) in
  a worker thread, outside any store transaction; returning is delivered, raising is a
  failure to retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
import standardwebhooks

from oncebox.engine.destinations import Destination
from oncebox.engine.outbox import ANSWER_HEAD, Claim, Sent
from oncebox.errors import ConfigError

USER_AGENT = "oncebox-forward/1"
# KEYS[1]: the stream, KEYS[2]: the key's marker. ARGV: the key, the body, the marker's
# life in milliseconds. Redis runs a script alone, so no other client's XADD or marker can
# come between the look and the add.
ONCE_INTO_STREAM = """
local seen = redis.call('GET', KEYS[2])
if seen then return seen end
local id = redis.call('XADD', KEYS[1], '*', 'idempotency_key', ARGV[1], 'body', ARGV[2])
redis.call('SET', KEYS[2], id, 'PX', ARGV[3])
return id
"""


class Sender(Protocol):
    async def send(self, claim: Claim) -> Sent: ...

    async def close(self) -> None: ...


def sender_for(destination: Destination) -> Sender:
    if destination.kind == "http":
        return HttpSender(destination)
    if destination.kind == "redis-stream":
        return StreamSender(destination)
    return CallSender(destination)


def retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds: delay-seconds or an HTTP date; None if absent or not
    either (a malformed one is ignored, not obeyed)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value[:9])
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def headers_for(
    claim: Claim, signer: standardwebhooks.Webhook | None, now: float
) -> dict[str, str]:
    """A forward's request headers: the key as ``webhook-id`` and ``Idempotency-Key``,
    this attempt's time, and its signature over ``id.timestamp.body``."""
    stamp = int(now)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": claim.key,
        "webhook-timestamp": str(stamp),
        "idempotency-key": claim.key,
    }
    if signer is not None:
        when = datetime.fromtimestamp(stamp, UTC)
        headers["webhook-signature"] = signer.sign(claim.key, when, claim.body.decode("utf-8"))
    return headers


class HttpSender:
    def __init__(self, destination: Destination) -> None:
        assert destination.url is not None
        self.url = destination.url
        self.timeout = destination.timeout
        self.signer = (
            standardwebhooks.Webhook(destination.secret) if destination.secret is not None else None
        )
        size = destination.max_in_flight
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(destination.timeout),
            limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            follow_redirects=False,
        )

    async def send(self, claim: Claim) -> Sent:
        headers = headers_for(claim, self.signer, time.time())
        start = time.monotonic()
        try:
            # httpx's timeout bounds each connect, write and read alone: a receiver that
            # answers a byte at a time would keep the attempt out past the claim's lease.
            async with asyncio.timeout(self.timeout):
                async with self.client.stream(
                    "POST", self.url, content=claim.body, headers=headers
                ) as got:
                    answer = b""
                    async for chunk in got.aiter_raw():
                        answer += chunk
                        if len(answer) >= ANSWER_HEAD:
                            break
                    waited = retry_after(got.headers.get("retry-after"), time.time())
                    return Sent(claim, got.status_code, time.monotonic() - start,
                                answer[:ANSWER_HEAD], retry_after=waited)  # fmt: skip
        except (httpx.TimeoutException, TimeoutError):
            error = f"timed out after {self.timeout:g}s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Sent(claim, None, time.monotonic() - start, error=error)

    async def close(self) -> None:
        await self.client.aclose()


class StreamSender:
    def __init__(self, destination: Destination) -> None:
        import redis.asyncio

        assert destination.url is not None and destination.stream is not None
        self.stream = destination.stream
        self.marker_ms = str(int(destination.marker_ttl * 1000))
        self.client = redis.asyncio.Redis.from_url(
            destination.url,
            socket_timeout=destination.timeout,
            socket_connect_timeout=destination.timeout,
        )
        self.script = self.client.register_script(ONCE_INTO_STREAM)

    async def send(self, claim: Claim) -> Sent:
        start = time.monotonic()
        marker = f"{self.stream}:oncebox-sent:{claim.key}"
        try:
            entry = await self.script(
                keys=[self.stream, marker], args=[claim.key, claim.body, self.marker_ms]
            )
        except Exception as exc:  # the connection, a timeout, Redis's own error
            return Sent(claim, None, time.monotonic() - start, error=f"{type(exc).__name__}: {exc}",
                        taken=False)  # fmt: skip
        shown = entry if isinstance(entry, bytes) else str(entry).encode()
        return Sent(claim, None, time.monotonic() - start, answer=shown, taken=True)

    async def close(self) -> None:
        await self.client.aclose()


def resolve_call(spec: str) -> Callable[[dict[str, Any]], Any]:
    """The function ``module:function`` names; a clear error when it cannot be found."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"call {spec}: cannot import {module_name}: {exc}") from None
    found = getattr(module, name, None)
    if not callable(found):
        raise ConfigError(f"call {spec}: {module_name} has no function {name}")
    return found  # type: ignore[no-any-return]


class CallSender:
    def __init__(self, destination: Destination) -> None:
        assert destination.call is not None
        self.call = resolve_call(destination.call)
        self.timeout = destination.timeout
        # The destination's own threads, not asyncio's default executor: the dispatcher's
        # claims and settles run there, and calls that hang past the timeout would
        # otherwise take its every thread and stop all forwarding of the process.
        self.threads = ThreadPoolExecutor(
            destination.max_in_flight, thread_name_prefix=f"oncebox-call-{destination.name}"
        )

    async def send(self, claim: Claim) -> Sent:
        start = time.monotonic()
        event = json.loads(claim.body)
        try:
            # Outside any store transaction, in a thread of its own: a function that runs
            # past the timeout is reported failed (and retried) though it may still finish.
            called = asyncio.get_running_loop().run_in_executor(self.threads, self.call, event)
            await asyncio.wait_for(called, self.timeout)
        except TimeoutError:
            return Sent(claim, None, time.monotonic() - start,
                        error=f"timed out after {self.timeout:g}s", taken=False)  # fmt: skip
        except Exception as exc:
            return Sent(claim, None, time.monotonic() - start,
                        error=f"{type(exc).__name__}: {exc}", taken=False)  # fmt: skip
        return Sent(claim, None, time.monotonic() - start, taken=True)

    async def close(self) -> None:
        # Calls still running past their timeout are not waited for (nor any not begun).
        self.threads.shutdown(wait=False, cancel_futures=True)
