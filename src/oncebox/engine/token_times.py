"""A token's times: when it expires, and when it was last used.

Expiry is given as a duration from now (``30d``, ``12h``) or a time (ISO 8601); either
way it is kept as a time on the server clock, which alone decides whether a token has
expired (the same clock as leases and sessions).

Last used is kept to the minute, not to the request: recording every request would
turn every read into a write. :class:`LastUsed` writes a token's time only when the
kept one is at least :data:`TOUCH_EVERY` old, and remembers in the process what it
wrote, so a burst of requests costs one write; the write itself is conditional, so
processes racing on one token change it once.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from oncebox.engine.inboxes import parse_duration
from oncebox.errors import ConfigError, InvalidOperation
from oncebox.errors import TokenExpired as TokenExpired  # raised where tokens are looked up

TOUCH_EVERY = 60.0  # seconds: last-used is kept to the minute
LONGEST = 10 * 366 * 24 * 3600.0  # an expiry further off than ten years is a typo


def iso(seconds: float | None) -> str | None:
    """A time as ISO 8601 in UTC (milliseconds, ``Z``), as every other time is shown."""
    if seconds is None:
        return None
    shown = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return shown.replace("+00:00", "Z")


def expiry(given: str | None, now: float) -> float | None:
    """When a token asked to expire ``given`` expires: a duration from ``now`` (``30d``,
    ``12h``, ``90m``) or an ISO 8601 time (UTC when it names no offset); None: never.
    Refuses a time already past and one more than ten years off."""
    if given is None or not given.strip():
        return None
    text = given.strip()
    try:
        length = parse_duration(text)
        at = now + length if length is not None else None
    except ConfigError:
        at = _time(text)
    if at is None:
        raise InvalidOperation("a token that never expires is one without --expires")
    if at <= now:
        raise InvalidOperation(f"expiry {text!r} is already past ({iso(at)})")
    if at - now > LONGEST:
        raise InvalidOperation(f"expiry {text!r} is more than ten years away")
    return at


def _time(text: str) -> float:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidOperation(
            f"expiry {text[:40]!r}: give a duration (30d, 12h, 90m) "
            "or an ISO 8601 time (2030-01-15T08:00Z)"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and now >= expires_at


def state(revoked_at: float | None, expires_at: float | None, now: float) -> str:
    """``revoked``, ``expired`` or ``live``: what a listing says of a token."""
    if revoked_at is not None:
        return "revoked"
    return "expired" if expired(expires_at, now) else "live"


class LastUsed:
    """Decides which uses of a token are written (see module); one per process."""

    def __init__(self, every: float = TOUCH_EVERY) -> None:
        self.every = every
        self._written: dict[int, float] = {}  # token id -> server time this process wrote
        self._lock = threading.Lock()

    def due(self, token_id: int, kept: float | None, now: float) -> bool:
        """Whether this use is to be written; a True is taken as the write's promise."""
        if kept is not None and now - kept < self.every:
            return False
        with self._lock:
            written = self._written.get(token_id)
            if written is not None and now - written < self.every:
                return False
            if len(self._written) > 4096:
                self._written.clear()
            self._written[token_id] = now
            return True
