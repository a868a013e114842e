"""Clocks the store can be given. Only the server clock decides; devices' are recorded."""

from __future__ import annotations


class ManualClock:
    """A server clock that moves only when told to: for tests and the demo."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
