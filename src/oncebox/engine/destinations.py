"""Forwarding destinations, configured not coded: ``[inboxes.NAME.forward.DEST]``.

Three kinds: ``http`` (the default: a POST signed per Standard Webhooks), ``redis-stream``
(an entry added once per revision) and ``python`` (``module:function``, called outside any
store transaction). Everything is checked here, before anything is stored; an unknown key
is refused, so a typo cannot silently leave a destination on its defaults. A signing
secret stays in memory only: out of the repr, out of :meth:`Destination.describe`, out of
every error.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from oncebox.engine.inboxes import format_duration, parse_duration
from oncebox.errors import ConfigError
from oncebox.formats.webhooks import standard_secret

KINDS = ("http", "redis-stream", "python")
ORDERS = ("none", "key")
# Svix's published schedule: the delay before each attempt, the first one's included.
RETRY_DEFAULT = ("0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h")
TIMEOUT_DEFAULT = 30.0
IN_FLIGHT_DEFAULT = 16
IN_FLIGHT_MAX = 1024
RETRY_MAX = 64  # attempts a schedule may hold
CIRCUIT_FAILURES = 5  # failed attempts in a row that open the circuit
CIRCUIT_COOLDOWN = 30.0  # seconds an open circuit waits before it probes
MARKER_TTL = 30 * 86400.0  # how long a stream remembers what it was given
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CALL = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(s|m|h)")
_ZERO = re.compile(r"0+(?:\.0*)?\s*[smhdw]?")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)
_COMMON = {"kind", "timeout", "max_in_flight", "rate", "ordered", "retry", "retry_on",
           "circuit_failures", "circuit_cooldown"}  # fmt: skip
_KEYS = {
    "http": _COMMON | {"url", "sign"},
    "redis-stream": _COMMON | {"url", "stream", "marker_ttl"},
    "python": _COMMON | {"call"},
}
_SIGN_KEYS = {"scheme", "secret", "secret_env"}


@dataclass(frozen=True)
class Destination:
    """Where an inbox's accepted revisions go, and how they are sent there."""

    name: str
    inbox: str
    kind: str = "http"
    url: str | None = field(default=None, repr=False)  # may hold a password: see describe
    stream: str | None = None
    call: str | None = None
    secret: bytes | None = field(default=None, repr=False)  # Standard Webhooks key
    secret_source: str | None = None  # where the secret came from (shown, never it)
    timeout: float = TIMEOUT_DEFAULT
    max_in_flight: int = IN_FLIGHT_DEFAULT
    rate: float | None = None  # sends a second, at most
    rate_text: str | None = None
    ordered: bool = False
    retry: tuple[float, ...] = ()
    retry_on: frozenset[int] = frozenset()
    circuit_failures: int = CIRCUIT_FAILURES
    circuit_cooldown: float = CIRCUIT_COOLDOWN
    marker_ttl: float = MARKER_TTL

    @property
    def lease(self) -> float:
        """A claim's lease: it outlasts the request's timeout with room to record the
        answer, so a live dispatcher's claim never runs out under a request it made."""
        return self.timeout * 2 + 10.0

    def describe(self) -> dict[str, Any]:
        """The destination as operators see it: every setting, never the secret."""
        shown: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "http":
            shown["url"] = _without_credentials(self.url or "")
            shown["sign"] = (
                {"scheme": "standard-webhooks", "secret": self.secret_source}
                if self.secret is not None
                else None
            )
        elif self.kind == "redis-stream":
            shown |= {"url": _without_password(self.url or ""), "stream": self.stream,
                      "marker_ttl": format_duration(self.marker_ttl)}  # fmt: skip
        else:
            shown["call"] = self.call
        return shown | {
            "timeout": format_duration(self.timeout),
            "max_in_flight": self.max_in_flight,
            "rate": self.rate_text,
            "ordered": "key" if self.ordered else "none",
            "retry": [format_duration(d) if d else "0s" for d in self.retry],
            "retry_on": sorted(self.retry_on),
            "circuit_failures": self.circuit_failures,
            "circuit_cooldown": format_duration(self.circuit_cooldown),
        }


def parse_destinations(
    inbox: str, tables: Any, env: Mapping[str, str] | None = None
) -> tuple[Destination, ...]:
    """Every ``forward.DEST`` table of one inbox, checked (secrets named by
    ``secret_env`` read from ``env``, the process environment by default)."""
    if tables is None:
        return ()
    if not isinstance(tables, Mapping):
        raise ConfigError(f"inbox {inbox}: forward must hold [inboxes.{inbox}.forward.NAME] tables")
    env = os.environ if env is None else env
    found = []
    for name, table in tables.items():
        where = f"inbox {inbox}: forward.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: a destination's name is 1 to 64 letters, digits, _ . -")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table")
        try:
            found.append(_destination(inbox, name, table, env))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return tuple(found)


def _destination(
    inbox: str, name: str, table: Mapping[str, Any], env: Mapping[str, str]
) -> Destination:
    kind = table.get("kind", "http")
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    unknown = sorted(set(table) - _KEYS[kind])
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(str, unknown))} for kind {kind} "
            f"(it takes {', '.join(sorted(_KEYS[kind]))})"
        )
    options: dict[str, Any] = {"name": name, "inbox": inbox, "kind": kind}
    if kind == "python":
        call = table.get("call")
        if not isinstance(call, str) or not _CALL.fullmatch(call):
            raise ConfigError('call must name a function as "module:function"')
        options["call"] = call
    else:
        options["url"] = _url(table.get("url"), ("http", "https") if kind == "http" else
                              ("redis", "rediss", "unix"))  # fmt: skip
    if kind == "redis-stream":
        stream = table.get("stream")
        if not isinstance(stream, str) or not stream or len(stream) > 256:
            raise ConfigError("stream must name the Redis stream (1 to 256 characters)")
        options["stream"] = stream
        if "marker_ttl" in table:
            options["marker_ttl"] = _positive(table["marker_ttl"], "marker_ttl")
    if "sign" in table:
        options["secret"], options["secret_source"] = _sign(table["sign"], env)
    if "timeout" in table:
        options["timeout"] = _positive(table["timeout"], "timeout")  # (finite: a lease ends)
    if "max_in_flight" in table:
        options["max_in_flight"] = _whole(table["max_in_flight"], "max_in_flight", IN_FLIGHT_MAX)
    if "rate" in table:
        options["rate"], options["rate_text"] = _rate(table["rate"])
    ordered = table.get("ordered", "none")
    if ordered not in ORDERS:
        raise ConfigError(f'ordered must be "key" or "none", not {ordered!r}')
    options["ordered"] = ordered == "key"
    options["retry"] = _schedule(table.get("retry", list(RETRY_DEFAULT)))
    options["retry_on"] = _statuses(table.get("retry_on", []))
    if "circuit_failures" in table:
        options["circuit_failures"] = _whole(table["circuit_failures"], "circuit_failures", 10_000)
    if "circuit_cooldown" in table:
        options["circuit_cooldown"] = _positive(table["circuit_cooldown"], "circuit_cooldown")
    return Destination(**options)


def _url(value: Any, schemes: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"url is required ({' or '.join(schemes)})")
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port out of range, or not a number, raises here
    except ValueError as exc:
        # Not shown: a URL that cannot be parsed cannot have its password hidden either.
        raise ConfigError(f"url must be a {' or '.join(schemes)} URL ({exc})") from None
    if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
        raise ConfigError(
            f"url must be a {' or '.join(schemes)} URL, not {_without_password(value)!r}"
        )
    return value


def _without_password(url: str) -> str:
    """A URL as shown: a password in it (a Redis URL's) replaced by ``***``, and so is a
    ``password`` in its query, which redis-py takes as well (a unix socket's usual)."""
    parts = urlsplit(url)
    if _QUERY_PASSWORD.search(parts.query):
        masked = _QUERY_PASSWORD.sub(r"\1***", parts.query)
        url = url.replace(f"?{parts.query}", f"?{masked}", 1)
        parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _without_credentials(url: str) -> str:
    """An http URL as shown. The dispatcher's client sends a URL's user and password as
    basic auth, so both are a credential for the receiver: a password is replaced by
    ``***``, and so is a user given alone (a key sent as the user name)."""
    url = _without_password(url)
    parts = urlsplit(url)
    if parts.password is not None or parts.username is None:
        return url
    netloc = "***@" + parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc).geturl()


def _sign(table: Any, env: Mapping[str, str]) -> tuple[bytes, str]:
    if not isinstance(table, Mapping):
        raise ConfigError(
            'sign must be a table, e.g. { scheme = "standard-webhooks", secret_env = "X" }'
        )
    unknown = sorted(set(table) - _SIGN_KEYS)
    if unknown:
        raise ConfigError(f"sign: unknown key(s) {', '.join(map(str, unknown))}")
    if table.get("scheme", "standard-webhooks") != "standard-webhooks":
        raise ConfigError('sign: the scheme is "standard-webhooks"')
    if ("secret" in table) == ("secret_env" in table):
        raise ConfigError("sign needs exactly one of secret and secret_env")
    if "secret" in table:
        text, source = table["secret"], "inline"
    else:
        variable = table["secret_env"]
        if not isinstance(variable, str) or not env.get(variable):
            raise ConfigError(f"sign: secret_env {variable} is not set in the environment")
        text, source = env[variable], f"env {variable}"
    if not isinstance(text, str):
        raise ConfigError("sign: the secret is a string (whsec_ and base64)")
    try:
        return standard_secret(text), source
    except ValueError as exc:
        raise ConfigError(f"sign: {exc}") from None


def _seconds(value: Any, what: str) -> float:
    if (isinstance(value, str) and _ZERO.fullmatch(value.strip())) or value == 0:
        return 0.0
    if isinstance(value, bool) or value == "forever":
        raise ConfigError(f"{what}: not a duration: {value!r}")
    try:
        seconds = parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    assert seconds is not None
    if not math.isfinite(seconds):  # TOML's nan and inf, or past a double's range
        raise ConfigError(f"{what} must be finite, not {value!r}")
    return seconds


def _positive(value: Any, what: str) -> float:
    seconds = _seconds(value, what)
    if seconds <= 0:
        raise ConfigError(f"{what} must be longer than 0")
    return seconds


def _whole(value: Any, what: str, most: int) -> int:
    if type(value) is not int or not 1 <= value <= most:
        raise ConfigError(f"{what} must be a whole number, 1 to {most:,}")
    return value


def _rate(value: Any) -> tuple[float, str]:
    match = _RATE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f'rate is sends per second, minute or hour, e.g. "50/s", not {value!r}')
    return float(match.group(1)) / _PER[match.group(2)], value.strip()


def _schedule(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= RETRY_MAX:
        raise ConfigError(
            f"retry is a list of 1 to {RETRY_MAX} delays, one before each attempt, e.g. "
            f'["0s", "5s", "5m"]'
        )
    return tuple(_seconds(item, "retry") for item in value)


def _statuses(value: Any) -> frozenset[int]:
    if not isinstance(value, list) or not all(type(s) is int and 400 <= s <= 499 for s in value):
        raise ConfigError("retry_on is a list of 4xx statuses to retry rather than give up on")
    return frozenset(value)
