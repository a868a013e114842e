"""API tokens and request signing for the HTTP service.

A token is a random secret shown once at creation; the store keeps only its SHA-256, so
a leaked database does not leak credentials. Each token names the inboxes it may touch
(or ``*`` for all) and its scopes:

- ``write``: deliver, take and release leases;
- ``read``: views (quarantine, dead letters, work keys, proofs, checkpoints, metrics);
- ``operator``: resolve quarantine rows and send work keys back from review; it implies
  ``read``, since an operator must see what they resolve.

A token created with an HMAC key must also sign every request (:func:`check_signature`).
The key is kept in the store as given (not encrypted): whoever can read the store can
sign as that token, which is no more than they could already do by writing to it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from oncebox.engine import log
from oncebox.errors import InvalidOperation, NotFound
from oncebox.store.base import Store, TokenRow, Tx

PREFIX = "obx_"
ALL_INBOXES = "*"
SIGNATURE_WINDOW = 300.0  # seconds either side of the server's clock
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Token:
    """A credential as the service sees it; never holds the secret."""

    id: int
    name: str
    inboxes: tuple[str, ...]
    scopes: frozenset[Scope]
    hmac_key: str | None
    created_at: float
    revoked_at: float | None

    @property
    def signs(self) -> bool:
        return self.hmac_key is not None

    def has(self, scope: Scope) -> bool:
        return scope in self.scopes or (scope is Scope.READ and Scope.OPERATOR in self.scopes)

    def covers(self, inbox: str) -> bool:
        return ALL_INBOXES in self.inboxes or inbox in self.inboxes

    def allows(self, scope: Scope, inbox: str) -> bool:
        return self.has(scope) and self.covers(inbox)

    def to_dict(self) -> dict[str, Any]:
        """What ``token list`` shows: never the secret or the HMAC key."""
        return {
            "id": self.id,
            "name": self.name,
            "inboxes": list(self.inboxes),
            "scopes": sorted(s.value for s in self.scopes),
            "hmac": self.signs,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class Created:
    """A new token with its secret (and HMAC key): the only time either is shown."""

    token: Token
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.token.to_dict(), "secret": self.secret, "hmac_key": self.token.hmac_key}


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _token(row: TokenRow) -> Token:
    return Token(
        row.id,
        row.name,
        tuple(json.loads(row.inboxes)),
        frozenset(Scope(s) for s in json.loads(row.scopes)),
        row.hmac_key,
        row.created_at,
        row.revoked_at,
    )


def check_request(
    name: str, inboxes: Iterable[str], scopes: Iterable[str]
) -> tuple[list[str], list[Scope]]:
    """Validate what a new token asks for; the inbox names are checked by the caller."""
    if not _NAME.fullmatch(name):
        raise InvalidOperation(f"token name {name!r}: use 1 to 64 letters, digits, '.', '_' or '-'")
    wanted = sorted(set(inboxes))
    if not wanted:
        raise InvalidOperation("a token needs at least one inbox (or '*' for all)")
    try:
        chosen = sorted({Scope(s) for s in scopes})
    except ValueError:
        raise InvalidOperation(
            f"scopes are {', '.join(s.value for s in Scope)}; got {sorted(set(scopes))}"
        ) from None
    if not chosen:
        raise InvalidOperation("a token needs at least one scope")
    return wanted, chosen


def create(
    tx: Tx, name: str, inboxes: Iterable[str], scopes: Iterable[str], with_hmac: bool
) -> Created:
    wanted, chosen = check_request(name, inboxes, scopes)
    secret = PREFIX + secrets.token_urlsafe(32)
    key = secrets.token_urlsafe(32) if with_hmac else None
    now = tx.now()
    token_id = tx.insert_token(
        name, secret_hash(secret), json.dumps(wanted), json.dumps(chosen), key, now
    )
    if token_id is None:
        raise InvalidOperation(f"a live token named {name!r} exists; revoke it first")
    # Credential changes are part of the audit trail; the log never sees a secret.
    log.event(
        tx,
        "token",
        {"name": name, "id": token_id, "inboxes": wanted, "scopes": chosen, "hmac": with_hmac},
    )
    return Created(Token(token_id, name, tuple(wanted), frozenset(chosen), key, now, None), secret)


def revoke(tx: Tx, name_or_id: str) -> None:
    if not tx.revoke_token(name_or_id, tx.now()):
        raise NotFound(f"no live token named {name_or_id!r}")
    log.event(tx, "token_revoke", {"token": name_or_id})


def listing(tx: Tx) -> list[Token]:
    return [_token(row) for row in tx.list_tokens()]


def authenticate(tx: Tx, secret: str) -> Token | None:
    """The live token whose secret this is, or None.

    The lookup is by the secret's SHA-256 (an index probe that reveals nothing useful
    about the secret), then the stored hash is compared in constant time anyway.
    """
    if not secret.startswith(PREFIX) or len(secret) > 256:
        return None
    digest = secret_hash(secret)
    row = tx.token_by_hash(digest)
    if row is None or not hmac.compare_digest(row.secret_hash, digest):
        return None
    if row.revoked_at is not None:
        return None
    return _token(row)


# -- request signing -------------------------------------------------------------------


def signing_message(timestamp: str, method: str, target: str, body: bytes) -> bytes:
    """What is signed: ``f"{timestamp}\\n{method}\\n{path_with_query}\\n"`` then the body."""
    return f"{timestamp}\n{method.upper()}\n{target}\n".encode() + body


def sign(key: str, timestamp: str, method: str, target: str, body: bytes) -> str:
    """The ``Oncebox-Signature`` header value for a request (for clients and tests)."""
    mac = hmac.new(key.encode(), signing_message(timestamp, method, target, body), "sha256")
    return f"sha256={mac.hexdigest()}"


def check_signature(
    key: str,
    timestamp: str | None,
    signature: str | None,
    method: str,
    target: str,
    body: bytes,
    now: float,
    window: float = SIGNATURE_WINDOW,
) -> str | None:
    """Why a signed request is refused, or None when it is good. Pure: no I/O, no clock.

    The timestamp is unix seconds (an integer); it must be within ``window`` of ``now``
    either way, so a captured request cannot be replayed later. The signature is compared
    in constant time.
    """
    if timestamp is None or signature is None:
        return "signed requests need Oncebox-Timestamp and Oncebox-Signature"
    if not re.fullmatch(r"[0-9]{1,12}", timestamp):
        return "Oncebox-Timestamp must be unix seconds"
    if abs(now - int(timestamp)) > window:
        return f"Oncebox-Timestamp is more than {int(window)} s from the server's clock"
    expected = sign(key, timestamp, method, target, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace")):
        return "the request signature does not match"
    return None


class ReplayGuard:
    """Refuses a signature seen before within the window: a captured request replayed
    while its timestamp is still fresh.

    With a ``store``, the signatures seen are kept there, so every process and host that
    serves the store refuses a replay (one small write transaction per signed request).
    Without one, they are kept in this process only; the window bounds their memory.
    """

    def __init__(
        self,
        window: float = SIGNATURE_WINDOW,
        clock: Callable[[], float] = time.time,
        store: Store | None = None,
    ) -> None:
        self._window = window
        self._clock = clock
        self._store = store
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def first_use(self, signature: str) -> bool:
        if self._store is not None:
            # Twice the window: a timestamp at the window's far edge stays fresh that long.
            def claim(tx: Tx) -> bool:
                now = tx.now()
                return tx.claim_signature(signature, now, now + 2 * self._window)

            return self._store.atomic(claim)
        now = self._clock()
        with self._lock:
            if len(self._seen) > 1024:
                self._seen = {s: t for s, t in self._seen.items() if t > now}
            expires = self._seen.get(signature)
            if expires is not None and expires > now:
                return False
            # Twice the window: a timestamp at the window's far edge stays fresh that long.
            self._seen[signature] = now + 2 * self._window
            return True
