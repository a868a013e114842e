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


@dataclass(frozen=True)
class SessionRow(TokenRow):
    """A live console session: the token it belongs to, and when it ends."""

    expires_at: float
