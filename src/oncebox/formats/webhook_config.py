"""An inbox's ``webhook = {...}`` declaration: its scheme, its secrets and its window.

The secrets stay in memory only: out of every repr, description and error, and never
part of anything stored. The schemes themselves are :mod:`oncebox.formats.webhooks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oncebox.errors import ConfigError
from oncebox.formats.webhooks import (
    DEFAULT_MAX_BYTES,
    SCHEMES,
    SIGNATURE_HEADERS,
    TOLERANCE,
    BodyMac,
    SignedHead,
    Verified,
    github_head,
    in_window,
    standard_secret,
    standard_webhooks_head,
    stripe_head,
)

MAX_TOLERANCE = 3600
_KEYS = frozenset({"scheme", "secret", "secret_env", "tolerance"})


@dataclass(frozen=True)
class WebhookConfig:
    """How an inbox's sender signs. The secrets stay in memory only: they are out of
    the repr, out of :meth:`describe`, and never part of anything stored."""

    scheme: str
    secrets: tuple[bytes, ...] = field(repr=False)
    source: str = "inline"
    tolerance: int = TOLERANCE

    def head(self, headers: Mapping[str, str], now: float) -> SignedHead:
        """Everything a request can be refused for before its body (a header missing or
        malformed, a signed time out of the window at ``now``, no signature of ours to
        compare); raises :class:`Unverified`."""
        if self.scheme == "github":
            return github_head(headers)
        if self.scheme == "stripe":
            return stripe_head(headers, now, self.tolerance)
        return standard_webhooks_head(headers, now, self.tolerance)

    def mac(self, head: SignedHead) -> BodyMac:
        """The signature check of the body that follows ``head``, fed as it arrives."""
        return BodyMac(self.secrets, head)

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> Verified:
        """Check one request; raise :class:`Unverified` unless it is good at ``now``."""
        mac = self.mac(self.head(headers, now))
        mac.update(body)
        return mac.verdict()

    def still_fresh(self, verified: Verified, now: float) -> Verified:
        """``verified`` if its signed time is still in the window at ``now`` (a body may
        take a while to arrive after its head was checked); else ``stale_signature``."""
        if verified.timestamp is not None:
            in_window(verified.timestamp, now, self.tolerance, ahead=self.scheme != "stripe")
        return verified

    @property
    def headers(self) -> tuple[tuple[str, ...], ...]:
        """The headers a request must carry to be verified at all, each under any of its
        names (see :data:`SIGNATURE_HEADERS`): without them, it is refused from its head."""
        return SIGNATURE_HEADERS[self.scheme]

    @property
    def max_bytes(self) -> int:
        """The body bound an inbox takes unless it says otherwise: what its sender sends."""
        return DEFAULT_MAX_BYTES[self.scheme]

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
