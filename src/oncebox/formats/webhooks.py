"""Signed webhooks, verified purely: no I/O and no clock (the caller passes the time).

A sender cannot hold oncebox's bearer token, so a webhook inbox trusts the sender's
signature instead. Three schemes:

- ``standard-webhooks``: ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
  (space-separated ``v1,<base64>``); HMAC-SHA256 over ``id.timestamp.body`` keyed by the
  base64 secret after ``whsec_``.
- ``github``: ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 of the body; the key is
  ``X-GitHub-Delivery``, which a redelivery keeps but the signature does not cover.
- ``stripe``: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]``, HMAC-SHA256 over
  ``t.body`` keyed by the endpoint secret as written; no key (the event's ``id`` is).

Every comparison is constant-time. Several secrets may be configured at once, so a
rotation needs no downtime. A refusal is :class:`Unverified`, never
:class:`~oncebox.formats.invalid.Invalid`: an unverified request must store nothing, not
even a dead letter, or anyone could fill the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from oncebox.errors import ConfigError, OnceboxError

SCHEMES = ("github", "standard-webhooks", "stripe")
# The headers each scheme cannot verify without (lower case, as HTTP/2 and ASGI send them).
SIGNATURE_HEADERS = {
    "github": ("x-hub-signature-256", "x-github-delivery"),
    "standard-webhooks": ("webhook-id", "webhook-timestamp", "webhook-signature"),
    "stripe": ("stripe-signature",),
}
TOLERANCE = 300  # seconds; both Standard Webhooks and Stripe use five minutes
MAX_TOLERANCE = 3600
STANDARD_PREFIX = "whsec_"
_TIMESTAMP = re.compile(r"0|[1-9][0-9]{0,11}")  # as str(int) spells it: no sign, no zeros
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEYS = frozenset({"scheme", "secret", "secret_env", "tolerance"})
MAX_ID = 256


class Unverified(OnceboxError):
    """A webhook's signature is missing, malformed, stale or wrong; store nothing."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class Verified(NamedTuple):
    """What a good signature vouches for. ``key`` is the sender's id for the message (a
    redelivery keeps it); ``key_signed`` says whether the signature covers it."""

    scheme: str
    key: str | None
    timestamp: int | None
    key_signed: bool


def _hmac(secret: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _required(headers: dict[str, str], name: str) -> str:
    value = headers.get(name.lower())
    if not value:
        raise Unverified("missing_signature", f"no {name} header")
    return value


def _sender_id(value: str, name: str) -> str:
    if len(value) > MAX_ID or _CONTROL.search(value) or value != value.strip():
        raise Unverified("bad_signature_header", f"{name} is not a plain id of 1 to {MAX_ID}")
    return value


def _timestamp(value: str, now: float, tolerance: int, name: str) -> int:
    if not _TIMESTAMP.fullmatch(value):
        raise Unverified("bad_signature_header", f"{name} is not a unix time in seconds")
    stamp = int(value)
    if abs(now - stamp) > tolerance:
        raise Unverified("stale_signature", f"signed at {stamp}, {now - stamp:.0f}s from now")
    return stamp


def _any_match(expected: Sequence[bytes], given: Sequence[bytes]) -> bool:
    # Every pair is compared, so the time taken says nothing about which one matched.
    found = False
    for mine in expected:
        for theirs in given:
            found |= hmac.compare_digest(mine, theirs)
    return found


# -- Standard Webhooks ----------------------------------------------------------------------
def standard_secret(text: str) -> bytes:
    """The key bytes of a Standard Webhooks secret (``whsec_`` prefix optional, padding
    optional, as the specification's own libraries accept it)."""
    body = text.removeprefix(STANDARD_PREFIX)
    try:
        secret = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a standard-webhooks secret is base64 after whsec_") from None
    if not secret:
        raise ValueError("a standard-webhooks secret must not be empty")
    return secret


def sign_standard_webhooks(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value a sender holding ``secret`` would send."""
    mac = _hmac(secret, f"{msg_id}.{timestamp}.".encode(), body)
    return "v1," + base64.b64encode(mac).decode("ascii")


def verify_standard_webhooks(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[bytes],
    now: float,
    tolerance: int = TOLERANCE,
) -> Verified:
    found = _headers(headers)
    msg_id = _sender_id(_required(found, "webhook-id"), "webhook-id")
    stamp_text = _required(found, "webhook-timestamp")
    signatures = _required(found, "webhook-signature")
    if "." in msg_id:
        # The signed content is dot-delimited: a dot in the id could move bytes between
        # the id and the timestamp under one signature.
        raise Unverified("bad_signature_header", "webhook-id must not contain '.'")
    stamp = _timestamp(stamp_text, now, tolerance, "webhook-timestamp")
    given = []
    for entry in signatures.split(" "):
        version, _, value = entry.partition(",")
        if version != "v1" or not value:
            continue  # v1a (ed25519) and unknown versions are not ours to check
        try:
            given.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    signed = (f"{msg_id}.{stamp_text}.".encode(), body)
    if not _any_match([_hmac(s, *signed) for s in secrets], given):
        raise Unverified("bad_signature", "no v1 signature matches")
    return Verified("standard-webhooks", msg_id, stamp, key_signed=True)


# -- GitHub ---------------------------------------------------------------------------------
def sign_github(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + _hmac(secret, body).hex()


def verify_github(headers: Mapping[str, str], body: bytes, secrets: Sequence[bytes]) -> Verified:
    found = _headers(headers)
    signature = _required(found, "X-Hub-Signature-256")
    delivery = _sender_id(_required(found, "X-GitHub-Delivery"), "X-GitHub-Delivery")
    hexdigest = signature.removeprefix("sha256=")
    if hexdigest == signature or not _HEX64.fullmatch(hexdigest):
        raise Unverified("bad_signature_header", "X-Hub-Signature-256 is not sha256=<hex>")
    if not _any_match([_hmac(s, body) for s in secrets], [bytes.fromhex(hexdigest)]):
        raise Unverified("bad_signature", "X-Hub-Signature-256 does not match")
    # GitHub signs no time: a replay is caught only as a duplicate of its delivery id,
    # which the signature does not cover (key_signed=False says so).
    return Verified("github", delivery, None, key_signed=False)


# -- Stripe ---------------------------------------------------------------------------------
def sign_stripe(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``Stripe-Signature`` value Stripe sends for ``body`` at ``timestamp``."""
    return f"t={timestamp},v1={_hmac(secret, f'{timestamp}.'.encode(), body).hex()}"


def verify_stripe(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[bytes],
    now: float,
    tolerance: int = TOLERANCE,
) -> Verified:
    header = _required(_headers(headers), "Stripe-Signature")
    stamps, given = [], []
    for element in header.split(","):
        name, _, value = element.strip().partition("=")
        if name == "t":
            stamps.append(value)
        elif name == "v1" and _HEX64.fullmatch(value):
            given.append(bytes.fromhex(value))
        # v0 (test mode's fake scheme) and anything else: ignored, against downgrades.
    if len(stamps) != 1:
        raise Unverified("bad_signature_header", "Stripe-Signature needs exactly one t=")
    stamp = _timestamp(stamps[0], now, tolerance, "Stripe-Signature t")
    signed = (f"{stamps[0]}.".encode(), body)
    if not _any_match([_hmac(s, *signed) for s in secrets], given):
        raise Unverified("bad_signature", "no v1 signature matches")
    return Verified("stripe", None, stamp, key_signed=False)


# -- an inbox's declaration -----------------------------------------------------------------
@dataclass(frozen=True)
class WebhookConfig:
    """How an inbox's sender signs. The secrets stay in memory only: they are out of
    the repr, out of :meth:`describe`, and never part of anything stored."""

    scheme: str
    secrets: tuple[bytes, ...] = field(repr=False)
    source: str = "inline"
    tolerance: int = TOLERANCE

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> Verified:
        """Check one request; raise :class:`Unverified` unless it is good at ``now``."""
        if self.scheme == "github":
            return verify_github(headers, body, self.secrets)
        if self.scheme == "stripe":
            return verify_stripe(headers, body, self.secrets, now, self.tolerance)
        return verify_standard_webhooks(headers, body, self.secrets, now, self.tolerance)

    @property
    def headers(self) -> tuple[str, ...]:
        """The headers a request must carry to be verified at all (see
        :data:`SIGNATURE_HEADERS`): without them, it can be refused from its head."""
        return SIGNATURE_HEADERS[self.scheme]

    @property
    def default_identity(self) -> str | tuple[str, ...]:
        """What identifies a delivery unless the inbox says otherwise: the sender's id
        for the message, or for Stripe (which sends none) the event's ``/id``."""
        return ("/id",) if self.scheme == "stripe" else "key"

    def describe(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"scheme": self.scheme, "secrets": self.source}
        if self.scheme != "github":
            shown["tolerance_seconds"] = self.tolerance
        return shown


def _texts(value: Any, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise ConfigError(f"webhook {what} must be a string or a list of strings")
    return list(items)


def _secret_texts(table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[list[str], str]:
    if ("secret" in table) == ("secret_env" in table):
        raise ConfigError("webhook needs exactly one of secret and secret_env")
    if "secret" in table:
        texts = _texts(table["secret"], "secret")
        return texts, f"inline ({len(texts)})"
    names = _texts(table["secret_env"], "secret_env")
    unset = [name for name in names if not env.get(name)]
    if unset:
        raise ConfigError(f"webhook secret_env: {', '.join(unset)} not set in the environment")
    return [env[name] for name in names], "env " + ", ".join(names)


def parse_webhook(table: Any, env: Mapping[str, str]) -> WebhookConfig:
    """Check an inbox's ``webhook = { scheme = ..., secret = ... }`` (or ``secret_env``,
    a variable name or several, read from ``env``). Errors never repeat a secret."""
    if not isinstance(table, Mapping):
        raise ConfigError('webhook must be a table, e.g. { scheme = "github", secret_env = "X" }')
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"webhook: unknown key(s) {', '.join(unknown)}")
    scheme = table.get("scheme")
    if scheme not in SCHEMES:
        raise ConfigError(f"webhook scheme must be one of {', '.join(SCHEMES)}")
    texts, source = _secret_texts(table, env)
    secrets = []
    for n, text in enumerate(texts, 1):
        if scheme == "standard-webhooks":
            try:
                secrets.append(standard_secret(text))
            except ValueError as exc:
                raise ConfigError(f"webhook secret #{n}: {exc}") from None
        elif not text:
            raise ConfigError(f"webhook secret #{n} is empty")
        else:
            secrets.append(text.encode("utf-8"))
    tolerance = table.get("tolerance", TOLERANCE)
    if "tolerance" in table and scheme == "github":
        raise ConfigError("webhook tolerance: github signs no timestamp")
    if type(tolerance) is not int or not 1 <= tolerance <= MAX_TOLERANCE:
        raise ConfigError(f"webhook tolerance must be whole seconds, 1 to {MAX_TOLERANCE}")
    return WebhookConfig(scheme, tuple(secrets), source, tolerance)
