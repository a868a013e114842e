"""Whole numbers as clients write them in a query, a header or an argument: ASCII digits.

``str.isdigit()`` is not that test: it also takes superscripts (``"²"``) and other
scripts' digits, which ``int()`` refuses or reads as another number, so a value checked
by ``isdigit()`` and then read by ``int()`` was an internal error (a 500, exit 70)."""

from __future__ import annotations


def whole(text: str, most: int = 18) -> int | None:
    """``text`` as a number if it is 1 to ``most`` ASCII digits, else None. Eighteen
    digits by default: any such number fits a signed 64-bit column."""
    if 0 < len(text) <= most and text.isascii() and text.isdigit():
        return int(text)
    return None
