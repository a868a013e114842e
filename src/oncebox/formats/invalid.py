"""The one way a codec says no."""

from __future__ import annotations


class Invalid(ValueError):
    """A delivery broke a format rule; ``reason`` names the rule, ``detail`` says where."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
