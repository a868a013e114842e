"""Group commit's batching policy, on a stand-in engine (no store, no HTTP).

End-to-end group commit (same decisions as serial delivery under 50 clients) is tested
in test_http.py; here, how requests are grouped into transactions.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

from oncebox.engine.box import Oncebox
from oncebox.formats import Delivery
from oncebox.surfaces.http.groupcommit import GroupCommit

COMMIT_SECONDS = 0.005


class SlowEngine:
    """``ingest_each`` that takes a while, as a commit does, and records batch sizes."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.first_call = threading.Event()

    def ingest_each(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Any]:
        self.sizes.append(len(deliveries))
        self.first_call.set()
        time.sleep(COMMIT_SECONDS)
        return [d.body for d in deliveries]


async def _clients(
    group: GroupCommit, engine: SlowEngine, early: int, late: int, rounds: int
) -> None:
    async def client(name: str) -> None:
        for i in range(rounds):
            body = f"{name}-{i}".encode()
            answer = await group.submit("inbox", Delivery(body=body))
            assert answer == body  # each client gets its own outcome back

    tasks = [asyncio.create_task(client(f"early{i}")) for i in range(early)]
    # The late clients arrive while the first batch is committing.
    while not engine.first_call.is_set():
        await asyncio.sleep(0.0005)
    tasks += [asyncio.create_task(client(f"late{i}")) for i in range(late)]
    await asyncio.gather(*tasks)


def test_clients_that_arrive_during_a_commit_join_the_others_instead_of_taking_turns() -> None:
    engine = SlowEngine()
    group = GroupCommit(cast(Oncebox, engine), max_wait=0.5, max_batch=256)
    asyncio.run(_clients(group, engine, early=4, late=4, rounds=12))
    # The early four alone first; from then on the eight go together, not two half
    # batches taking turns; the late four, one round behind, end alone.
    assert engine.sizes == [4] + [8] * 11 + [4]


def test_a_batch_never_exceeds_max_batch_and_nobody_waits_past_max_wait() -> None:
    engine = SlowEngine()
    group = GroupCommit(cast(Oncebox, engine), max_wait=0.01, max_batch=3)
    started = time.perf_counter()
    asyncio.run(_clients(group, engine, early=5, late=2, rounds=4))
    assert sum(engine.sizes) == 7 * 4 and max(engine.sizes) <= 3
    # 28 deliveries in batches of at most 3, each waiting at most 10 ms: well under 2 s.
    assert time.perf_counter() - started < 2
