"""Signed webhooks, verified purely: no I/O and no clock (the caller passes the time).

A sender cannot hold oncebox's bearer token, so a webhook inbox trusts the sender's
signature instead. Three schemes, each read as the sender's own verifier reads it:

- ``standard-webhooks``: ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
  (or Svix's ``svix-id``, ``svix-timestamp``, ``svix-signature``; space-separated
  ``v1,<base64>``); HMAC-SHA256 over ``id.timestamp.body`` keyed by the base64 secret
  after ``whsec_``.
- ``github``: ``X-Hub-Signature-256: sha256=<lower-case hex>``, HMAC-SHA256 of the body;
  the key is ``X-GitHub-Delivery``, which a redelivery keeps but the signature does not
  cover.
- ``stripe``: ``Stripe-Signature: t=<unix>,v1=<lower-case hex>[,v1=...]``, HMAC-SHA256
  over ``t.body`` keyed by the endpoint secret as written; no key (the event's ``id`` is).

A request is checked in two halves, so that a body need not be held to be verified:
:class:`SignedHead` is everything its headers can be refused for (read by the scheme's
``*_head``), and :class:`BodyMac` is the signature computed as the body arrives (every
scheme signs a prefix the head gives, then the body). Every comparison is constant-time.
Several secrets may be configured at once, so a rotation needs no downtime. A refusal is
:class:`Unverified`, never :class:`~oncebox.formats.invalid.Invalid`: an unverified
request must store nothing, not even a dead letter, or anyone could fill the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from oncebox.errors import OnceboxError

SCHEMES = ("github", "standard-webhooks", "stripe")
# The headers each scheme cannot verify without (lower case, as HTTP/2 and ASGI send
# them): one entry per header, the names it may come under, the first present one read.
# Standard Webhooks also takes Svix's names, first, as Svix's own library reads them.
SIGNATURE_HEADERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "github": (("x-hub-signature-256",), ("x-github-delivery",)),
    "standard-webhooks": (
        ("svix-id", "webhook-id"),
        ("svix-timestamp", "webhook-timestamp"),
        ("svix-signature", "webhook-signature"),
    ),
    "stripe": (("stripe-signature",),),
}
# The body bound an inbox takes by default, per scheme: what its senders send (README,
# "Signed webhooks"). GitHub caps payloads at 25 MB and delivers nothing larger; Svix,
# the main Standard Webhooks sender, takes payloads up to about 350 KB; Stripe publishes
# no cap, and its events carry one object whose embedded lists it truncates.
DEFAULT_MAX_BYTES = {
    "github": 25 * 1024 * 1024,
    "standard-webhooks": 1024 * 1024,
    "stripe": 1024 * 1024,
}
TOLERANCE = 300  # seconds; both Standard Webhooks and Stripe use five minutes
STANDARD_PREFIX = "whsec_"
_TIMESTAMP = re.compile(r"0|[1-9][0-9]{0,11}")  # as str(int) spells it: no sign, no zeros
_HEX64 = re.compile(r"[0-9a-f]{64}")  # lower case, as the senders' own verifiers compare
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
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


class SignedHead(NamedTuple):
    """A request's signature headers, read and checked before any of its body: the
    facts a good signature will vouch for, what it covers before the body (``prefix``),
    and the signatures the request carries (``given``, decoded)."""

    verified: Verified
    prefix: bytes
    given: tuple[bytes, ...]
    mismatch: str  # what a refusal says when none of ``given`` matches


class BodyMac:
    """HMAC-SHA256 of a head's prefix and a body, under every secret at once, fed as the
    body arrives: the body need not be held to be verified."""

    def __init__(self, secrets: Sequence[bytes], head: SignedHead) -> None:
        self.head = head
        self._macs = [hmac.new(s, head.prefix, hashlib.sha256) for s in secrets]

    def update(self, chunk: bytes) -> None:
        for mac in self._macs:
            mac.update(chunk)

    def verdict(self) -> Verified:
        """The head's facts if a given signature matches; else :class:`Unverified`."""
        # Every pair is compared, so the time taken says nothing about which one matched.
        found = False
        for mac in self._macs:
            mine = mac.digest()
            for theirs in self.head.given:
                found |= hmac.compare_digest(mine, theirs)
        if not found:
            raise Unverified("bad_signature", self.head.mismatch)
        return self.head.verified


def _hmac(secret: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _required(headers: dict[str, str], names: tuple[str, ...]) -> str:
    present = [headers[name] for name in names if name in headers]
    if not present or not present[0]:
        raise Unverified("missing_signature", f"no {' or '.join(reversed(names))} header")
    return present[0]


def _sender_id(value: str, name: str) -> str:
    if len(value) > MAX_ID or _CONTROL.search(value) or value != value.strip():
        raise Unverified("bad_signature_header", f"{name} is not a plain id of 1 to {MAX_ID}")
    return value


def _timestamp(value: str, now: float, tolerance: int, name: str, ahead: bool = True) -> int:
    if not _TIMESTAMP.fullmatch(value):
        raise Unverified("bad_signature_header", f"{name} is not a unix time in seconds")
    return in_window(int(value), now, tolerance, ahead)


def in_window(stamp: int, now: float, tolerance: int, ahead: bool = True) -> int:
    """``stamp`` if it is at most ``tolerance`` seconds old at ``now`` (and, with
    ``ahead``, at most that far ahead); else :class:`Unverified` ``stale_signature``."""
    if now - stamp > tolerance or (ahead and stamp - now > tolerance):
        raise Unverified("stale_signature", f"signed at {stamp}, {now - stamp:.0f}s from now")
    return stamp


# -- Standard Webhooks (and Svix) -----------------------------------------------------------
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


def standard_webhooks_head(
    headers: Mapping[str, str], now: float, tolerance: int = TOLERANCE
) -> SignedHead:
    found = _headers(headers)
    id_names, stamp_names, signature_names = SIGNATURE_HEADERS["standard-webhooks"]
    msg_id = _sender_id(_required(found, id_names), "webhook-id")
    stamp_text = _required(found, stamp_names)
    signatures = _required(found, signature_names)
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
    if not given:
        raise Unverified("bad_signature", "no v1 signature given")
    verified = Verified("standard-webhooks", msg_id, stamp, key_signed=True)
    prefix = f"{msg_id}.{stamp_text}.".encode()
    return SignedHead(verified, prefix, tuple(given), "no v1 signature matches")


def verify_standard_webhooks(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[bytes],
    now: float,
    tolerance: int = TOLERANCE,
) -> Verified:
    return _whole(secrets, standard_webhooks_head(headers, now, tolerance), body)


# -- GitHub ---------------------------------------------------------------------------------
def sign_github(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + _hmac(secret, body).hex()


def github_head(headers: Mapping[str, str]) -> SignedHead:
    found = _headers(headers)
    signature_names, delivery_names = SIGNATURE_HEADERS["github"]
    signature = _required(found, signature_names)
    delivery = _sender_id(_required(found, delivery_names), "X-GitHub-Delivery")
    hexdigest = signature.removeprefix("sha256=")
    if hexdigest == signature or not _HEX64.fullmatch(hexdigest):
        raise Unverified(
            "bad_signature_header", "X-Hub-Signature-256 is not sha256=<lower-case hex>"
        )
    # GitHub signs no time: a replay is caught only as a duplicate of its delivery id,
    # which the signature does not cover (key_signed=False says so).
    verified = Verified("github", delivery, None, key_signed=False)
    return SignedHead(
        verified, b"", (bytes.fromhex(hexdigest),), "X-Hub-Signature-256 does not match"
    )


def verify_github(headers: Mapping[str, str], body: bytes, secrets: Sequence[bytes]) -> Verified:
    return _whole(secrets, github_head(headers), body)


# -- Stripe ---------------------------------------------------------------------------------
def sign_stripe(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``Stripe-Signature`` value Stripe sends for ``body`` at ``timestamp``."""
    return f"t={timestamp},v1={_hmac(secret, f'{timestamp}.'.encode(), body).hex()}"


def stripe_head(headers: Mapping[str, str], now: float, tolerance: int = TOLERANCE) -> SignedHead:
    [names] = SIGNATURE_HEADERS["stripe"]
    header = _required(_headers(headers), names)
    stamps, given = [], []
    # Split on bare commas, as Stripe's libraries do: "t=..., v1=..." names " v1".
    for element in header.split(","):
        name, _, value = element.partition("=")
        if name == "t":
            stamps.append(value)
        elif name == "v1" and _HEX64.fullmatch(value):
            given.append(bytes.fromhex(value))
        # v0 (test mode's fake scheme) and anything else: ignored, against downgrades.
    if len(stamps) != 1:
        raise Unverified("bad_signature_header", "Stripe-Signature needs exactly one t=")
    # Only the past is bounded, as Stripe's libraries bound it: a server clock behind
    # Stripe's must not refuse every event, and a replay is a duplicate of its event id.
    stamp = _timestamp(stamps[0], now, tolerance, "Stripe-Signature t", ahead=False)
    if not given:
        raise Unverified("bad_signature", "no v1 signature given")
    verified = Verified("stripe", None, stamp, key_signed=False)
    return SignedHead(verified, f"{stamps[0]}.".encode(), tuple(given), "no v1 signature matches")


def verify_stripe(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[bytes],
    now: float,
    tolerance: int = TOLERANCE,
) -> Verified:
    return _whole(secrets, stripe_head(headers, now, tolerance), body)


def _whole(secrets: Sequence[bytes], head: SignedHead, body: bytes) -> Verified:
    mac = BodyMac(secrets, head)
    mac.update(body)
    return mac.verdict()
