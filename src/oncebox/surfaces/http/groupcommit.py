"""Group commit: concurrent single deliveries to one inbox decided in shared transactions.

One commit (one fsync on SQLite) then holds many requests. Each request still gets its
own decision, and only after the transaction holding it committed: a future is resolved
only when ``ingest_batch`` has returned. ``ingest_batch`` gives the decisions deciding
the deliveries one by one would give (duplicates within the batch included), so the
batching is invisible to clients except in speed.

Per inbox, one flusher at a time, deciding in a worker thread while the event loop goes
on accepting requests, so the batch size grows with the load by itself. A batch waits up
to ``max_wait`` seconds for companions, until as many requests are pending as were in
the system during the last commit (that batch and those that arrived meanwhile; at most
``max_batch``, and ``max_batch`` when nothing is known). Without that wait, clients whose
answers just went out would miss the next batch and the load would settle into two half
batches taking turns: twice the commits for the same work, and measurably slower.

A request may carry the credential the gate admitted it with (a token's :class:`Caller`,
or a webhook's :class:`Sender`). The worker checks them again in the turn that decides
the batch, before anything of it is decided (:func:`oncebox.surfaces.http.auth.in_turn`):
a token revoked since its request's head was checked, or a signed time gone stale while
its body arrived, is refused then, and a refused request is not decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from oncebox.domain import Decision
from oncebox.engine.box import Oncebox
from oncebox.errors import ApplyError
from oncebox.formats import Delivery
from oncebox.surfaces.http.auth import Caller, in_turn
from oncebox.surfaces.http.senders import Sender

Outcome = Decision | BaseException


Credential = Caller | Sender | None


@dataclass(frozen=True)
class _Entry:
    delivery: Delivery
    credential: Credential
    future: asyncio.Future[Decision]


@dataclass
class _Lane:
    pending: list[_Entry] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    flusher: asyncio.Task[None] | None = None
    # Requests in the system during the last commit: how many the next batch waits for.
    concurrency: int = 0


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

    async def submit(
        self, inbox: str, delivery: Delivery, credential: Credential = None
    ) -> Decision:
        """The delivery's decision, once the transaction that holds it committed.

        With a ``credential``, its refusal in the turn instead, and nothing is decided
        for the delivery; a webhook sender's is decided as its signature stands for it.
        ``inbox`` must be a declared inbox.
        """
        lane = self._lanes.get(inbox)
        if lane is None:
            lane = self._lanes[inbox] = _Lane()
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        lane.pending.append(_Entry(delivery, credential, future))
        if lane.flusher is None:
            lane.flusher = asyncio.create_task(self._flush(inbox, lane))
        elif len(lane.pending) >= self._goal(lane):
            lane.wake.set()
        return await future

    def _goal(self, lane: _Lane) -> int:
        return min(self.max_batch, lane.concurrency or self.max_batch)

    async def _flush(self, inbox: str, lane: _Lane) -> None:
        try:
            while lane.pending:
                if len(lane.pending) < self._goal(lane) and self.max_wait > 0:
                    lane.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lane.wake.wait(), self.max_wait)
                batch = lane.pending[: self.max_batch]
                del lane.pending[: self.max_batch]
                await self._run(inbox, batch)
                lane.concurrency = len(batch) + len(lane.pending)
        except asyncio.CancelledError:
            # Shutting down: nobody waits in vain.
            for entry in lane.pending:
                entry.future.cancel()
            lane.pending.clear()
            raise
        finally:
            lane.flusher = None

    async def _run(self, inbox: str, batch: list[_Entry]) -> None:
        work = [(entry.delivery, entry.credential) for entry in batch]
        try:
            outcomes = await asyncio.to_thread(self._decide, inbox, work)
        except asyncio.CancelledError:
            # Whatever commits meanwhile is not acked, and a resend of it is a duplicate.
            for entry in batch:
                entry.future.cancel()
            raise
        for entry, outcome in zip(batch, outcomes, strict=True):
            if entry.future.done():  # the client went away; its decision stands anyway
                continue
            if isinstance(outcome, BaseException):
                entry.future.set_exception(outcome)
            else:
                entry.future.set_result(outcome)

    def _decide(self, inbox: str, work: Sequence[tuple[Delivery, Credential]]) -> list[Outcome]:
        """In a worker thread: admit the requests, then decide the admitted ones."""
        outcomes: list[Outcome | None] = [None] * len(work)
        deliveries = [delivery for delivery, _ in work]
        if any(credential is not None for _, credential in work):
            try:
                checked = in_turn(self.box, [credential for _, credential in work])
            except Exception as exc:  # the store failed: nobody is admitted, nothing decided
                return [exc] * len(work)
            for i, verdict in enumerate(checked):
                if isinstance(verdict, Delivery):
                    deliveries[i] = verdict
                elif verdict is not None:
                    outcomes[i] = verdict
        admitted = [i for i, outcome in enumerate(outcomes) if outcome is None]
        decided = self._ingest(inbox, [deliveries[i] for i in admitted]) if admitted else []
        for i, decision in zip(admitted, decided, strict=True):
            outcomes[i] = decision
        done: list[Outcome] = []
        for outcome in outcomes:
            assert outcome is not None  # each one refused or decided
            done.append(outcome)
        return done

    def _ingest(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Outcome]:
        """One transaction for the lot; a delivery whose apply step fails gets its error
        and the others are decided anyway (``Oncebox.ingest_each``). A storage error
        fails every request of the batch: nothing was decided, nothing is acked."""
        self._count(len(deliveries))
        try:
            outcomes: list[Outcome] = list(self.box.ingest_each(inbox, deliveries))
        except Exception as exc:
            return [exc] * len(deliveries)
        if any(isinstance(outcome, ApplyError) for outcome in outcomes) and len(deliveries) > 1:
            with self._lock:
                self.fallbacks += 1
        return outcomes
