"""The roles off the decision path: retention, the service's tokens and sessions, and
the declared inboxes with their counters and the server clock.

They are part of every transaction (:class:`oncebox.store.base.Tx`), but no delivery's
verdict depends on them; they live apart so that the roles an ingest plays can be read
at once in :mod:`oncebox.store.base`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from oncebox.domain import Evicted, Eviction, Inbox, SessionRow, TokenRow


class Retention(Protocol):
    """Eviction by age only, each one recorded (I7)."""

    def evict_records(self, inbox_id: int, cutoff: float, now: float, limit: int) -> list[Evicted]:
        """Turn records first seen before ``cutoff`` into tombstones, recording each."""
        ...

    def drop_tombstones(
        self, inbox_id: int, cutoff: float, now: float, limit: int
    ) -> list[Evicted]: ...

    def evictions(self, inbox_id: int | None, limit: int) -> list[Eviction]: ...

    def record_retention_override(
        self, inbox_id: int, retention_seconds: float, reason: str, now: float
    ) -> None: ...

    def retention_overrides(self, inbox_id: int) -> list[tuple[float, str, float]]: ...


class Tokens(Protocol):
    """The HTTP service's API tokens and the signed requests already seen."""

    def insert_token(
        self,
        name: str,
        secret_hash: bytes,
        inboxes: str,
        scopes: str,
        hmac_key: str | None,
        now: float,
    ) -> int | None:
        """The new token's id, or None when a live token already has that name."""
        ...  # fmt: skip

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None: ...

    def list_tokens(self) -> list[TokenRow]: ...

    def revoke_token(self, name_or_id: str, now: float) -> list[int]:
        """Revoke the live token with that name (or id); the ids revoked (none: there is
        no such live token)."""
        ...

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        """Record a signed request's first use until ``expires_at``; False if it was
        already used and that use has not expired (a replay)."""
        ...

    def insert_session(self, id_hash: bytes, token_id: int, now: float, expires_at: float) -> None:
        """Keep a console session (by its id's SHA-256) for the token until ``expires_at``."""
        ...

    def session_token(self, id_hash: bytes, now: float) -> SessionRow | None:
        """The session's token, if the session has not expired and the token is live."""
        ...

    def end_session(self, id_hash: bytes) -> None: ...

    def end_token_sessions(self, token_id: int) -> None:
        """End every console session of a token."""
        ...

    def forget_sessions(self, now: float) -> None:
        """Drop the sessions that expired by ``now``."""
        ...


class Inboxes(Protocol):
    """Declared inboxes, their counters, the server clock and the store's health."""

    def now(self) -> float:
        """The server clock (on PostgreSQL, the database's clock)."""
        ...

    def declare_inbox(
        self, name: str, codec: str, apply: str, retention_seconds: float | None,
        tombstone_seconds: float | None, fenced: bool,
    ) -> Inbox: ...  # fmt: skip

    def inboxes(self) -> list[Inbox]: ...

    def count_verdicts(self, inbox_id: int, hour: int, counts: dict[tuple[str, str], int]) -> None:
        """Add to the per-hour counts of (verdict, reason)."""
        ...

    def verdict_counts(self, inbox_id: int) -> dict[tuple[str, str], int]: ...

    def verdict_hours(self, inbox_id: int, since_hour: int) -> list[tuple[int, str, int]]:
        """(hour, verdict, count) from ``since_hour`` on (hours since the epoch), in order."""
        ...

    def inbox_figures(self, inbox_id: int) -> dict[str, Any]:
        """Sizes a stats view needs: records, tombstones, quarantine, dead letters, ..."""
        ...

    def probe_write(self, now: float) -> None:
        """A trivial write: proves the store accepts writes (readiness); its durable
        commit also makes every commit before it durable."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a user's own SQL (in this backend's dialect) inside the transaction: what
        a user's apply step writes with."""
        ...
