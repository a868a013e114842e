"""The access port: API tokens and console sessions, apart from the other ports
(:mod:`oncebox.store.ports`, which names it too) because they are a concept of their own."""

from __future__ import annotations

from typing import Protocol

from oncebox.domain import WHOLE, ListedToken, SessionRow, TokenRow
from oncebox.store.ports import Clock, Events


class Access(Events, Clock, Protocol):
    """The HTTP service's API tokens, the signed requests already seen, console sessions."""

    def insert_token(
        self,
        name: str,
        secret_hash: bytes,
        inboxes: str,
        scopes: str,
        hmac_key: str | None,
        now: float,
        expires_at: float | None = None,
    ) -> int | None:
        """The new token's id, or None when a live token already has that name."""
        ...  # fmt: skip

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None: ...

    def list_tokens(
        self, after: int, limit: int, newest: bool = False, cut: int = WHOLE.text
    ) -> list[ListedToken]:
        """A page of tokens by id: after id ``after`` (``newest``: newest first, below
        id ``after``, 0 meaning from the top), each inbox list read to ``cut``
        characters of its JSON text."""
        ...

    def token_named(self, name: str) -> TokenRow | None:
        """The live token with that name, else the newest token that had it."""
        ...

    def token_by_id(self, token_id: int) -> TokenRow | None: ...

    def revoke_token(self, name_or_id: str, now: float) -> list[int]:
        """Revoke the live token with that name (or id); the ids revoked (none: there is
        no such live token)."""
        ...

    def touch_token(self, token_id: int, now: float, unless_since: float) -> None:
        """Keep ``now`` as when the token was last used, unless the kept time is at or
        after ``unless_since`` already."""
        ...

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        """Record a signed request's first use until ``expires_at``; False if it was
        already used and that use has not expired (a replay)."""
        ...

    def insert_session(self, id_hash: bytes, token_id: int, now: float, expires_at: float) -> None:
        """Keep a console session (by its id's SHA-256) for the token until ``expires_at``."""
        ...

    def session_token(self, id_hash: bytes, now: float) -> SessionRow | None:
        """The session's token, if neither the session nor the token has expired and the
        token is not revoked."""
        ...

    def end_session(self, id_hash: bytes) -> None: ...

    def end_token_sessions(self, token_id: int) -> None:
        """End every console session of a token."""
        ...

    def forget_sessions(self, now: float) -> None:
        """Drop the sessions that expired by ``now``."""
        ...
