"""API tokens and request signing for the HTTP service.

A token is a random secret shown once at creation; the store keeps only its SHA-256, so
a leaked database does not leak credentials. Each token names the inboxes it may touch
(or ``*`` for all) and its scopes:

- ``write``: deliver, take and release leases, make a consumer, take its lease and
  acknowledge (its cursor is a write);
- ``read``: views (quarantine, dead letters, work keys, proofs, checkpoints, metrics);
- ``operator``: resolve quarantine rows and send work keys back from review; it implies
  ``read``, since an operator must see what they resolve;
- ``admin``: manage tokens (the console's tokens page); it implies ``operator`` and is
  only for every inbox (``*``), since tokens are no one inbox's business.

A token may expire (:mod:`.token_times`): from then on it is refused everywhere, with the
reason said (:class:`TokenExpired`), and its console sessions end.

A token created with an HMAC key must also sign every request (:func:`check_signature`;
the signed string is :func:`signing_message`).
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
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from oncebox.domain import TokenRow
from oncebox.engine import log
from oncebox.engine.token_times import expired, expiry, iso
from oncebox.errors import InvalidOperation, NotFound, OnceboxError, TokenExpired
from oncebox.store.base import Access, Store

PREFIX = "obx_"
ALL_INBOXES = "*"
SIGNATURE_WINDOW = 300.0  # seconds either side of the server's clock
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    OPERATOR = "operator"
    ADMIN = "admin"


# What each scope also grants: an operator must see what they resolve, an admin acts too.
IMPLIED = {Scope.OPERATOR: {Scope.READ}, Scope.ADMIN: {Scope.OPERATOR, Scope.READ}}


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
    expires_at: float | None = None  # None: never
    last_used_at: float | None = None
    cut: tuple[str, ...] = ()  # ("inboxes",): a listing shows only the first of them

    @property
    def signs(self) -> bool:
        return self.hmac_key is not None

    def has(self, scope: Scope) -> bool:
        return scope in self.scopes or any(scope in IMPLIED.get(s, ()) for s in self.scopes)

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
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "last_used_at": iso(self.last_used_at),
            "revoked_at": iso(self.revoked_at),
            "cut": list(self.cut),
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


def from_row(row: TokenRow) -> Token:
    """The token a stored row describes."""
    return Token(
        row.id,
        row.name,
        tuple(json.loads(row.inboxes)),
        frozenset(Scope(s) for s in json.loads(row.scopes)),
        row.hmac_key,
        row.created_at,
        row.revoked_at,
        row.expires_at,
        row.last_used_at,
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
    if Scope.ADMIN in chosen and wanted != [ALL_INBOXES]:
        raise InvalidOperation("the admin scope is for every inbox: give --inbox '*' alone")
    return wanted, chosen


def create(
    tx: Access,
    name: str,
    inboxes: Iterable[str],
    scopes: Iterable[str],
    with_hmac: bool,
    expires: str | None = None,
    actor: str | None = None,
) -> Created:
    """A new token; ``expires`` as :func:`.token_times.expiry` reads it, on the server
    clock; ``actor``: who made it, for the log (None: the store's owner, from the CLI)."""
    wanted, chosen = check_request(name, inboxes, scopes)
    secret = PREFIX + secrets.token_urlsafe(32)
    key = secrets.token_urlsafe(32) if with_hmac else None
    now = tx.now()
    ends = expiry(expires, now)
    token_id = tx.insert_token(
        name, secret_hash(secret), json.dumps(wanted), json.dumps(chosen), key, now, ends
    )
    if token_id is None:
        raise InvalidOperation(f"a live token named {name!r} exists; revoke it first")
    # Credential changes are part of the audit trail; the log never sees a secret.
    said = {"name": name, "id": token_id, "inboxes": wanted, "scopes": chosen, "hmac": with_hmac}
    log.event(tx, "token", {**said, "expires_at": iso(ends), "actor": actor})
    made = Token(token_id, name, tuple(wanted), frozenset(chosen), key, now, None, ends)
    return Created(made, secret)


def revoke(tx: Access, name_or_id: str, actor: str | None = None) -> None:
    """Revoke a token; its console sessions end with it (they would fail their lookup,
    which asks for a live token, anyway: this drops the rows)."""
    revoked = tx.revoke_token(name_or_id, tx.now())
    if not revoked:
        raise NotFound(f"no live token named {name_or_id!r}")
    for token_id in revoked:
        tx.end_token_sessions(token_id)
    log.event(tx, "token_revoke", {"token": name_or_id, "actor": actor})


def authenticate(tx: Access, secret: str) -> Token | None:
    """The live token whose secret this is, or None; raises :class:`TokenExpired`
    for one past its expiry (so that its holder is told why).

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
    if expired(row.expires_at, tx.now()):
        raise TokenExpired(f"token {row.name!r} expired at {iso(row.expires_at)}")
    return from_row(row)


def still_live(store: Store, digests: Collection[bytes]) -> set[bytes]:
    """Those of ``digests`` (:func:`secret_hash` of secrets :func:`authenticate` took a
    moment ago) whose tokens are still live (not revoked, not expired), in one read: for
    a caller that must refuse a token revoked or expired since (the HTTP group commit, as
    each turn begins)."""
    with store.reading() as tx:
        now = tx.now()
        return {
            digest
            for digest in digests
            if (row := tx.token_by_hash(digest)) is not None
            and row.revoked_at is None
            and not expired(row.expires_at, now)
        }


# -- request signing -------------------------------------------------------------------
SIGNATURE_VERSION = "oncebox-signature-v2"
# The headers a signature covers, in the order they are signed. These are all the request
# headers oncebox reads besides Authorization (which names the key): a request whose
# signature left one of them out could be replayed with it changed.
SIGNED_HEADERS = (
    "oncebox-timestamp",
    "content-type",
    "oncebox-key",
    "oncebox-snapshot",
    "oncebox-lease-token",
    "oncebox-device-time",
    "oncebox-delivery-id",
)
SIGNATURE_HEADER = "oncebox-signature"
_SIGNATURE = re.compile(rb"sha256=([0-9a-f]{64})")
_TIMESTAMP = re.compile(rb"[0-9]{1,12}")
_COVERED = frozenset(SIGNED_HEADERS) | {SIGNATURE_HEADER}


class SignatureRefused(OnceboxError):
    """A signed request that is not admitted; the message says why (for a 401)."""


def _octets(value: str | bytes) -> bytes:
    """A header value or target as the bytes on the wire (latin-1, as ASGI decodes them)."""
    return value if isinstance(value, bytes) else value.encode("latin-1")


def signing_message(
    method: str, target: str | bytes, headers: Mapping[str, str | bytes], body: bytes
) -> bytes:
    """What is signed: the version line, the method, the target (path and query as sent),
    one line per :data:`SIGNED_HEADERS` (``name:value`` when present, the bare name when
    absent, so an empty header is not an absent one), then the body.

    Header values cannot hold a newline, so no value can spill into the next line.
    """
    present = {name.lower(): _octets(value) for name, value in headers.items()}
    lines = [SIGNATURE_VERSION.encode(), method.upper().encode(), _octets(target)]
    for name in SIGNED_HEADERS:
        value = present.get(name)
        lines.append(name.encode() if value is None else name.encode() + b":" + value)
    return b"\n".join(lines) + b"\n" + body


def sign(
    key: str,
    timestamp: str,
    method: str,
    target: str,
    body: bytes,
    headers: Mapping[str, str | bytes] | None = None,
) -> str:
    """The ``Oncebox-Signature`` value for a request (for clients and tests); ``headers``
    are the request's other headers, of which the signed ones are taken."""
    signed = {name.lower(): value for name, value in (headers or {}).items()}
    signed["oncebox-timestamp"] = timestamp
    mac = hmac.new(key.encode(), signing_message(method, target, signed, body), "sha256")
    return f"sha256={mac.hexdigest()}"


def _signed_headers(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, bytes]:
    """The covered headers of a request by lowercase name. Refuses an ``Oncebox-*``
    header it does not know (nothing would sign it) and a covered one sent twice (the
    signer and the reader could take different copies)."""
    found: dict[str, bytes] = {}
    for raw_name, value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in _COVERED:
            if name in found:
                raise SignatureRefused(f"{name} is sent more than once")
            found[name] = value
        elif name.startswith("oncebox-"):
            raise SignatureRefused(
                f"{name} is not a header oncebox reads, so a signed request may not carry it"
            )
    return found


def check_signature(
    key: str,
    headers: Iterable[tuple[bytes, bytes]],
    method: str,
    target: bytes,
    body: bytes,
    now: float,
    window: float = SIGNATURE_WINDOW,
) -> bytes:
    """The decoded signature of a good signed request; raises :class:`SignatureRefused`
    otherwise. Pure: no I/O, no clock.

    ``headers`` are the request's raw (name, value) pairs. The timestamp is unix seconds
    (an integer) within ``window`` of ``now`` either way, so a captured request cannot be
    replayed later. The signature is exactly ``sha256=`` and 64 lowercase hex digits:
    any other spelling is refused, so one signature has one spelling and the replay
    guard, which keys on the decoded bytes, sees every use of it. Compared in constant
    time.
    """
    found = _signed_headers(headers)
    timestamp, signature = found.get("oncebox-timestamp"), found.get(SIGNATURE_HEADER)
    if timestamp is None or signature is None:
        raise SignatureRefused("signed requests need Oncebox-Timestamp and Oncebox-Signature")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise SignatureRefused("Oncebox-Timestamp must be unix seconds")
    spelled = _SIGNATURE.fullmatch(signature)
    if spelled is None:
        raise SignatureRefused("Oncebox-Signature must be sha256= and 64 lowercase hex digits")
    if abs(now - int(timestamp)) > window:
        raise SignatureRefused(
            f"Oncebox-Timestamp is more than {int(window)} s from the server's clock"
        )
    given = bytes.fromhex(spelled.group(1).decode("ascii"))
    expected = hmac.new(key.encode(), signing_message(method, target, found, body), "sha256")
    if not hmac.compare_digest(expected.digest(), given):
        raise SignatureRefused("the request signature does not match")
    return given


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
        self._seen: dict[bytes, float] = {}
        self._lock = threading.Lock()

    def first_use(self, signature: bytes) -> bool:
        """Whether this (decoded) signature is new; it is remembered either way."""
        if self._store is not None:
            # Twice the window: a timestamp at the window's far edge stays fresh that long.
            def claim(tx: Access) -> bool:
                now = tx.now()
                return tx.claim_signature(signature.hex(), now, now + 2 * self._window)

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
