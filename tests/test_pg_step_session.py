"""What a user's apply step sets for its session does not outlive its transaction.

A step's ``tx.execute("SET synchronous_commit = off")`` (not ``SET LOCAL``) changed the
pooled connection for good: a later transaction on it that does not set the level
itself (a batch's seal, an operator's change) would commit without waiting for its
flush and be acknowledged before it is durable; a ``search_path`` or
``statement_timeout`` would reach every inbox's transactions alike. The store resets a
connection's settings (``RESET ALL``, sent with the commit) after a transaction in which
SQL of a user's own ran. Shown with ``statement_timeout``, which the store itself never
sets for a write, so the step can read what it finds."""

from __future__ import annotations

from typing import Any

import pytest

import oncebox
from oncebox import Delivery, InboxSpec

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_a_steps_session_setting_does_not_reach_the_next_transaction(pg_url: str) -> None:
    seen: list[tuple[int, str]] = []

    def step(tx: Any, change: Any) -> None:
        ((pid, timeout),) = tx.execute(
            "SELECT pg_backend_pid(), current_setting('statement_timeout')"
        )
        seen.append((pid, timeout))
        tx.execute("SET statement_timeout = '4321ms'")  # the whole session's, not LOCAL

    box = oncebox.open(pg_url, inboxes=[InboxSpec("k", codec="keyed", apply=step)])
    try:
        for i in range(12):  # the pool hands its connections out in turn: each comes back
            assert box.ingest("k", Delivery(b"x", key=f"k-{i}")).verdict == "accepted"
    finally:
        box.close()
    pids = [pid for pid, _ in seen]
    assert len(set(pids)) < len(pids), "no connection served two transactions"
    first = seen[0][1]
    assert first != "4321ms"
    assert [timeout for _, timeout in seen] == [first] * len(seen)
