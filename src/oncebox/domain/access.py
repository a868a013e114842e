"""Credentials as the store keeps them: API tokens (only a secret's SHA-256, never the
secret) and the console sessions signed in under them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenRow:
    """An API token as stored: its inboxes and scopes as JSON text."""

    id: int
    name: str
    secret_hash: bytes
    inboxes: str
    scopes: str
    hmac_key: str | None
    created_at: float
    revoked_at: float | None
    expires_at: float | None  # None: never
    last_used_at: float | None  # kept to the minute (see engine.tokens.TOUCH_EVERY)


@dataclass(frozen=True)
class ListedToken(TokenRow):
    """A token as a listing reads it: ``inboxes`` (its JSON text) read only to a listing's
    cut, beside the whole text's length, so that no row is read whole to list it."""

    inboxes_length: int


@dataclass(frozen=True)
class SessionRow(TokenRow):
    """A live console session: the token it belongs to, and when the session ends."""

    session_ends: float
