"""What a ``python`` destination calls in the tests: it keeps what it was given, and fails
the first time it sees a revision when asked to, or hangs until released."""

from __future__ import annotations

import threading
from typing import Any

received: list[dict[str, Any]] = []
fail_first: set[str] = set()  # idempotency keys to fail once


def take(event: dict[str, Any]) -> None:
    key = event["idempotency_key"]
    if key in fail_first:
        fail_first.discard(key)
        raise RuntimeError(f"not now: {key}")
    received.append(event)


released = threading.Event()  # what ``stall`` waits for


def stall(event: dict[str, Any]) -> None:
    """A function that hangs (a network call without a timeout) until released."""
    released.wait()
