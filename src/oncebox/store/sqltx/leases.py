"""The fence's leases, API tokens and console sessions, in SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import astuple, replace
from typing import TypeVar

from oncebox.domain import WHOLE, LeaseState, ListedToken, SessionRow, TokenRow
from oncebox.store.sqltx.base import SqlBase

R = TypeVar("R", bound=TokenRow)


class FencesSql(SqlBase):
    def next_token(self) -> int:
        return int(self._one("next_token")[0])

    def held(
        self, kind: str, owner: int, names: Sequence[str], exclusive: bool = False
    ) -> dict[str, LeaseState]:
        if not names:
            return {}
        statement = "held_leases_exclusive" if exclusive else "held_leases"
        params = (kind, owner, json.dumps(sorted(names)))
        return {row.name: row for row in self._rows(statement, params, LeaseState)}

    def put_lease(self, lease: LeaseState) -> None:
        self._run("put_lease", astuple(lease))

    def list_leases(self, kind: str, owner: int) -> list[LeaseState]:
        return self._rows("list_leases", (kind, owner), LeaseState)


class TokensSql(SqlBase):
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
        params = (name, secret_hash, inboxes, scopes, hmac_key, now, expires_at)
        row = self._one("insert_token", params)
        return int(row[0]) if row else None

    def token_by_hash(self, secret_hash: bytes) -> TokenRow | None:
        row = self._row("token_by_hash", (secret_hash,), TokenRow)
        return _bytes_hash(row) if row else None

    def list_tokens(
        self, after: int, limit: int, newest: bool = False, cut: int = WHOLE.text
    ) -> list[ListedToken]:
        if newest:  # a page down from the one before (from the newest: from the top)
            rows = self._rows("list_tokens_newest", (cut, after or 2**63 - 1, limit), ListedToken)
        else:
            rows = self._rows("list_tokens", (cut, after, limit), ListedToken)
        return [_bytes_hash(row) for row in rows]

    def token_named(self, name: str) -> TokenRow | None:
        row = self._row("token_named", (name,), TokenRow)
        return _bytes_hash(row) if row else None

    def token_by_id(self, token_id: int) -> TokenRow | None:
        row = self._row("token_by_id", (token_id,), TokenRow)
        return _bytes_hash(row) if row else None

    def revoke_token(self, name_or_id: str, now: float) -> list[int]:
        named = (now, name_or_id, name_or_id, name_or_id)
        return [int(row[0]) for row in self._all("revoke_token", named)]

    def touch_token(self, token_id: int, now: float, unless_since: float) -> None:
        self._run("touch_token", (now, token_id, unless_since))

    def claim_signature(self, signature: str, now: float, expires_at: float) -> bool:
        self._run("forget_signatures", (now,))
        return self._one("claim_signature", (signature, expires_at, now)) is not None

    def insert_session(self, id_hash: bytes, token_id: int, now: float, expires_at: float) -> None:
        self._run("insert_session", (id_hash, token_id, now, expires_at))

    def session_token(self, id_hash: bytes, now: float) -> SessionRow | None:
        row = self._row("session_token", (id_hash, now, now), SessionRow)
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
