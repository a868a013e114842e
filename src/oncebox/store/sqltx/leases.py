"""Leases, API tokens and console sessions, in SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from oncebox.domain import LeaseState, SessionRow, TokenRow
from oncebox.store.sqltx.base import SqlBase

R = TypeVar("R", bound=TokenRow)


class LeasesSql(SqlBase):
    def next_token(self) -> int:
        return int(self._one("next_token")[0])

    def put_lease(
        self, inbox_id: int, scope: str, token: int, now: float, expires_at: float
    ) -> None:
        self._run("put_lease", (inbox_id, scope, token, now, expires_at))

    def leases_for(self, inbox_id: int, scopes: Sequence[str]) -> dict[str, LeaseState]:
        if not scopes:
            return {}
        found = self._rows("leases_for", (inbox_id, json.dumps(sorted(scopes))), LeaseState)
        return {row.scope: row for row in found}

    def list_leases(self, inbox_id: int) -> list[LeaseState]:
        return self._rows("list_leases", (inbox_id,), LeaseState)

    def release_lease(self, inbox_id: int, scope: str, token: int, now: float) -> bool:
        return self._run("release_lease", (now, inbox_id, scope, token)) > 0


class TokensSql(SqlBase):
    def insert_token(
        self,
        name: str,
        secret_hash: bytes,
        inboxes: str,
        scopes: str,
        hmac_key: str | None,
        now: float,
    ) -> int | None:
        row = self._one("insert_token", (name, secret_hash, inboxes, scopes, hmac_key, now))
        return int(row[0]) if row else None

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None:
        row = self._row("token_by_hash", (secret_hash,), TokenRow)
        return _bytes_hash(row) if row else None

    def list_tokens(self) -> list[TokenRow]:
        return [_bytes_hash(row) for row in self._rows("list_tokens", (), TokenRow)]

    def revoke_token(self, name_or_id: str, now: float) -> list[int]:
        return [int(row[0]) for row in self._all("revoke_token", (now, name_or_id, name_or_id))]

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        self._run("forget_signatures", (now,))
        return self._one("claim_signature", (signature, expires_at, now)) is not None

    def insert_session(self, id_hash: bytes, token_id: int, now: float, expires_at: float) -> None:
        self._run("insert_session", (id_hash, token_id, now, expires_at))

    def session_token(self, id_hash: bytes, now: float) -> SessionRow | None:
        row = self._row("session_token", (id_hash, now), SessionRow)
        return _bytes_hash(row) if row else None

    def end_session(self, id_hash: bytes) -> None:
        self._run("end_session", (id_hash,))

    def end_token_sessions(self, token_id: int) -> None:
        self._run("end_token_sessions", (token_id,))

    def forget_sessions(self, now: float) -> None:
        self._run("forget_sessions", (now,))


def _bytes_hash(row: R) -> R:
    """The secret's hash as bytes on every backend (drivers hand back memoryview too)."""
    if isinstance(row.secret_hash, bytes):
        return row
    return replace(row, secret_hash=bytes(row.secret_hash))
