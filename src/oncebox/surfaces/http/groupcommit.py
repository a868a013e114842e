"""Group commit: concurrent single deliveries to one inbox decided in shared transactions.

One commit (one fsync on SQLite) then holds many requests. Each request still gets its
own decision, and only after the transaction holding it committed: a future is resolved
only when ``ingest_batch`` has returned. ``ingest_batch`` gives the decisions deciding
the deliveries one by one would give (duplicates within the batch included), so the
batching is invisible to clients except in speed.

Per inbox, one flusher at a time: while a batch commits, new arrivals wait and form the
next batch, so the batch size grows with the load by itself. When the inbox is idle, the
first arrival waits up to ``max_wait`` seconds for companions (or until ``max_batch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from oncebox.engine.box import Oncebox
from oncebox.engine.decision import Decision
from oncebox.errors import ApplyError
from oncebox.formats import Delivery

Outcome = Decision | BaseException


@dataclass
class _Lane:
    pending: list[tuple[Delivery, asyncio.Future[Decision]]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    flusher: asyncio.Task[None] | None = None


class GroupCommit:
    def __init__(self, box: Oncebox, *, max_wait: float = 0.002, max_batch: int = 256) -> None:
        self.box = box
        self.max_wait = max_wait
        self.max_batch = max_batch
        self._lanes: dict[str, _Lane] = {}
        # Figures for tests and metrics.
        self.transactions = 0
        self.deliveries = 0
        self.largest = 0
        self.fallbacks = 0
        self._lock = threading.Lock()

    def _count(self, size: int) -> None:
        with self._lock:
            self.transactions += 1
            self.deliveries += size
            self.largest = max(self.largest, size)

    async def submit(self, inbox: str, delivery: Delivery) -> Decision:
        """The delivery's decision, once the transaction that holds it committed."""
        lane = self._lanes.setdefault(inbox, _Lane())
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        lane.pending.append((delivery, future))
        if len(lane.pending) >= self.max_batch:
            lane.wake.set()
        if lane.flusher is None or lane.flusher.done():
            lane.flusher = asyncio.create_task(self._flush(inbox, lane))
        return await future

    async def _flush(self, inbox: str, lane: _Lane) -> None:
        while lane.pending:
            if len(lane.pending) < self.max_batch:
                lane.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lane.wake.wait(), self.max_wait)
            batch = lane.pending[: self.max_batch]
            del lane.pending[: self.max_batch]
            deliveries = [d for d, _ in batch]
            try:
                outcomes = await asyncio.to_thread(self._decide, inbox, deliveries)
            except asyncio.CancelledError:
                # Shutting down: whatever commits meanwhile is not acked, and a resend of
                # it is a duplicate. Nobody waits in vain.
                for _, future in batch + lane.pending:
                    future.cancel()
                lane.pending.clear()
                raise
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():  # the client went away; its decision stands anyway
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _decide(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Outcome]:
        """In a worker thread: one transaction for the lot, else one each.

        An apply step that fails for one delivery rolls the whole batch back; deciding
        the rest one by one keeps one bad request from failing the others. A storage
        error fails every request of the batch: nothing was decided, nothing is acked.
        """
        self._count(len(deliveries))
        try:
            return list(self.box.ingest_batch(inbox, deliveries))
        except ApplyError as exc:
            if len(deliveries) == 1:
                return [exc]
        except Exception as exc:
            return [exc] * len(deliveries)
        with self._lock:
            self.fallbacks += 1
        outcomes: list[Outcome] = []
        for delivery in deliveries:
            self._count(1)
            try:
                outcomes.append(self.box.ingest_batch(inbox, [delivery])[0])
            except Exception as exc:
                outcomes.append(exc)
        return outcomes
