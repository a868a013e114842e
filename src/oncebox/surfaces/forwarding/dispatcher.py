"""A dispatcher: claims due forwards, sends them, and settles what each attempt came to.

One asyncio loop sends every destination's forwards at once, up to each destination's
``max_in_flight`` and ``rate`` (the rate shared out among ``share`` dispatchers: the worker
processes of ``oncebox forward --workers N`` or ``oncebox serve --workers N``). The store
is reached from worker threads: a claim (:meth:`oncebox.Oncebox.claim_forwards`) takes a
lease of the one fence on each forward, for longer than the request may take, and the
answers are settled in batches (:meth:`oncebox.Oncebox.settle_forwards`), each only under
its claim's lease. A dispatcher killed at any point loses nothing: what it held is
claimed again once its leases run out, and sent again under the same idempotency key.

It is woken by what this process seals (:meth:`oncebox.Oncebox.listen`) and otherwise
polls every ``poll`` seconds for what other processes wrote and for retries come due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from oncebox.engine.box import Oncebox
from oncebox.engine.destinations import Destination
from oncebox.engine.outbox import Claim, Sent
from oncebox.engine.reconciler import default_worker_name
from oncebox.logtext import escaped
from oncebox.surfaces.forwarding.senders import Sender, sender_for

logger = logging.getLogger("oncebox.forward")
REGISTRY = CollectorRegistry()  # this process's own: what its dispatchers measured
LATENCY = Histogram(
    "oncebox_forward_latency_seconds",
    "Seconds from sending a forward to its answer, by destination (this process's dispatchers).",
    ["destination"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
CLAIM_MAX = 64  # forwards one claim takes at most


class Bucket:
    """A token bucket: ``rate`` sends a second, up to a second's worth at once."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate) if rate else math.inf
        self.tokens = self.capacity
        self.at = time.monotonic()

    def available(self) -> int:
        if self.rate is None:
            return CLAIM_MAX
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return int(self.tokens)

    def take(self) -> None:
        if self.rate is not None:
            self.tokens -= 1

    def wait(self) -> float:
        """Seconds until one more send is allowed."""
        if self.rate is None or self.tokens >= 1:
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass
class Lane:
    """One destination as this dispatcher sends to it."""

    destination: Destination
    sender: Sender
    bucket: Bucket
    in_flight: int = 0
    quiet_until: float = 0.0  # nothing was due: look again after this (or when woken)
    done: list[Sent] = field(default_factory=list)
    settling: bool = False
    # Batches settled so far: a settle that lands while the lane asks what is due makes
    # the answer stale (a retry may be due at once; on PostgreSQL a claim skips the rows
    # a settling transaction holds), so it may neither quiet the lane nor end ``once``.
    settled: int = 0


class Dispatcher:
    """Sends the forwards of ``only`` (names; every destination by default)."""

    def __init__(
        self,
        box: Oncebox,
        *,
        name: str | None = None,
        only: list[str] | None = None,
        share: int = 1,
        poll: float = 0.25,
    ) -> None:
        self.box = box
        self.name = name or default_worker_name()
        chosen = [box.destination(n) for n in only] if only else box.destinations()
        self.destinations = chosen
        self.share = max(1, share)
        self.poll = poll
        self.outcomes: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, stop: threading.Event, once: bool = False) -> Counter[str]:
        """Send until ``stop`` is set (or, with ``once``, until nothing is due or in
        flight); returns the attempts' outcomes counted."""
        asyncio.run(self._main(stop, once))
        return self.outcomes

    def start(self) -> tuple[threading.Thread, threading.Event]:
        """Run in a thread of its own (inside ``oncebox serve``): the thread, and the event
        that stops it."""
        stop = threading.Event()
        thread = threading.Thread(
            target=self.run, args=(stop,), name="oncebox-forward", daemon=True
        )
        thread.start()
        return thread, stop

    async def _main(self, stop: threading.Event, once: bool) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        lanes = [
            Lane(d, sender_for(d), Bucket(d.rate / self.share if d.rate else None))
            for d in self.destinations
        ]

        def news() -> None:  # from a writing thread: never blocks, never fails it
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._woken, lanes, wake)

        self.box.listen(news)
        try:
            while not stop.is_set():
                wake.clear()
                claimed = 0
                settled = sum(lane.settled for lane in lanes)
                for lane in lanes:
                    claimed += await self._fill(lane, wake)
                busy = any(lane.in_flight or lane.done or lane.settling for lane in lanes)
                if once and not claimed and not busy:
                    if settled == sum(lane.settled for lane in lanes):
                        return
                    continue  # something settled while the lanes asked: ask again
                waits = [lane.bucket.wait() for lane in lanes if lane.bucket.wait() > 0]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), min([self.poll, *waits]))
        finally:
            await self._drain(lanes)

    def _woken(self, lanes: list[Lane], wake: asyncio.Event) -> None:
        for lane in lanes:
            lane.quiet_until = 0.0
        wake.set()

    async def _fill(self, lane: Lane, wake: asyncio.Event) -> int:
        """Claim as many as the lane may send now, and send them."""
        dest = lane.destination
        free = min(dest.max_in_flight - lane.in_flight, lane.bucket.available(), CLAIM_MAX)
        if free <= 0 or time.monotonic() < lane.quiet_until:
            return 0
        settled = lane.settled
        try:
            if not await asyncio.to_thread(self.box.forwards_due, dest.name):
                if lane.settled == settled:
                    lane.quiet_until = time.monotonic() + self.poll
                return 0
            claims = await asyncio.to_thread(self.box.claim_forwards, dest.name, self.name, free)
        except Exception as exc:  # the store is down: try again at the next poll
            logger.warning("forward %s: claim failed: %s", dest.name, escaped(str(exc)))
            lane.quiet_until = time.monotonic() + self.poll
            return 0
        if len(claims) < free and lane.settled == settled:
            lane.quiet_until = time.monotonic() + self.poll  # no more due right now
        for claim in claims:
            lane.bucket.take()
            lane.in_flight += 1
            task = asyncio.create_task(self._attempt(lane, claim, wake))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(claims)

    async def _attempt(self, lane: Lane, claim: Claim, wake: asyncio.Event) -> None:
        try:
            sent = await lane.sender.send(claim)
        except Exception as exc:  # a sender's bug: reported as a failed attempt
            sent = Sent(claim, None, 0.0, error=f"{type(exc).__name__}: {exc}", taken=False)
        LATENCY.labels(lane.destination.name).observe(sent.latency)
        lane.in_flight -= 1
        lane.done.append(sent)
        if not lane.settling:
            lane.settling = True
            task = asyncio.create_task(self._settle(lane))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        wake.set()

    async def _settle(self, lane: Lane) -> None:
        """Settle what came back, in batches, until nothing is waiting."""
        try:
            while lane.done:
                batch, lane.done = lane.done, []
                try:
                    attempts = await asyncio.to_thread(
                        self.box.settle_forwards, lane.destination.name, batch, self.name
                    )
                except Exception as exc:
                    # Not recorded: the claims' leases run out and they are sent again.
                    logger.warning(
                        "forward %s: settling %d attempts failed: %s",
                        lane.destination.name, len(batch), escaped(str(exc)),
                    )  # fmt: skip
                    continue
                self.outcomes.update(a.outcome.value for a in attempts)
                lane.quiet_until = 0.0  # a retry may be due at once, an ordered key's next
                lane.settled += 1
        finally:
            lane.settling = False

    async def _drain(self, lanes: list[Lane]) -> None:
        """Let what is in flight finish and be settled, then close the senders."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for lane in lanes:
            await lane.sender.close()


def alongside(app: Any, box: Oncebox, share: int) -> Any:
    """``app`` with a dispatcher running beside it while it serves (``oncebox serve``):
    started with the server, stopped (what is in flight let finish) when it stops."""
    if not box.destinations():
        return app
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        thread, stop = Dispatcher(box, share=share).start()
        try:
            async with inner(served) as state:
                yield state
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 60.0)

    app.router.lifespan_context = lifespan
    return app
