"""Inbox declarations: codec, apply step and retention, checked before anything is stored."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncebox.engine.apply import ApplyStep, apply_name, resolve_apply
from oncebox.engine.step import Step, needed_fields
from oncebox.errors import ConfigError
from oncebox.formats import Codec, configure, get_codec, parse_webhook

if TYPE_CHECKING:
    from oncebox.engine.destinations import Destination

HOUR = 3600.0
DAY = 24 * HOUR
RETENTION_DEFAULT = 30 * DAY
RETENTION_FLOOR = 72 * HOUR
TOMBSTONES_DEFAULT = 365 * DAY
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?")
_UNITS = {"s": 1.0, "m": 60.0, "h": HOUR, "d": DAY, "w": 7 * DAY, None: 1.0}


def parse_duration(value: str | float | int | None) -> float | None:
    """``"30d"``, ``"72h"``, ``"90m"``, seconds as a number, or ``"forever"`` (None)."""
    if value is None or value == "forever":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value).strip())
        if not match:
            raise ConfigError(f"not a duration: {value!r} (use e.g. 30d, 72h, 90m or forever)")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ConfigError(f"a duration must be positive: {value!r}")
    return seconds


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "forever"
    for unit, size in (("d", DAY), ("h", HOUR), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class InboxSpec:
    """A named intake. Retention is by age only; below the 72-hour floor it needs an
    explicit ``retention_override`` reason, which the store records.

    ``settings`` configure the codec (``json``: ``identity``, ``witness_ignore``,
    ``fields``, bounds; ``sp-api-listing``: the expected application and subscriptions),
    as the keys beside ``codec`` do in TOML. ``webhook`` says how the sender signs
    (``{"scheme": ..., "secret": ...}`` or ``"secret_env"``); it is kept out of the repr,
    so a logged spec never shows a secret. ``codec`` may also be a codec instance.
    ``forward`` names its destinations, each a table as ``[inboxes.NAME.forward.DEST]``
    is in TOML (:mod:`oncebox.engine.destinations`); also kept out of the repr.
    """

    name: str
    codec: str | Codec
    apply: ApplyStep | str = "none"
    retention: str | float | None = "30d"
    tombstones: str | float | None = "365d"
    retention_override: str | None = None
    fenced: bool | None = None
    settings: Mapping[str, Any] | None = None
    webhook: Mapping[str, Any] | None = field(default=None, repr=False)
    forward: Mapping[str, Mapping[str, Any]] | None = field(default=None, repr=False)

    @property
    def retention_seconds(self) -> float | None:
        return parse_duration(self.retention)

    @property
    def tombstone_seconds(self) -> float | None:
        return parse_duration(self.tombstones)

    def is_fenced(self, codec: Codec) -> bool:
        """Lease-fenced if declared so, else as the codec prefers (``feed`` is)."""
        if self.fenced is not None:
            return self.fenced
        return bool(getattr(codec, "fenced", False))

    def configured_codec(self, env: Mapping[str, str] | None = None) -> Codec:
        """This inbox's own codec instance, under its settings and webhook (secrets named
        by ``secret_env`` are read from ``env``, the process environment by default)."""
        if not isinstance(self.codec, str):
            if self.settings or self.webhook is not None:
                raise ConfigError(
                    f"inbox {self.name}: a codec instance is configured already; "
                    f"give settings and webhook with the codec's name instead"
                )
            return self.codec
        try:
            webhook = None
            if self.webhook is not None:
                webhook = parse_webhook(self.webhook, os.environ if env is None else env)
            return configure(get_codec(self.codec), self.settings or {}, webhook)
        except ConfigError as exc:
            raise ConfigError(f"inbox {self.name}: {exc}") from None

    def destinations(self, env: Mapping[str, str] | None = None) -> tuple[Destination, ...]:
        """Where this inbox forwards what it accepts, checked."""
        from oncebox.engine.destinations import parse_destinations  # it reads durations here

        return parse_destinations(self.name, self.forward, env)

    def check(self) -> tuple[Codec, Step]:
        """Validate the declaration; return the codec and apply step it names."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", self.name):
            raise ConfigError(f"inbox name {self.name!r}: use 1 to 64 letters, digits, _ . -")
        codec = self.configured_codec()
        if getattr(codec, "webhook", None) is not None and self.is_fenced(codec):
            # Its sender holds no lease: every signed delivery would be fenced out.
            raise ConfigError(f"inbox {self.name}: a webhook inbox cannot be lease-fenced")
        step = resolve_apply(self.apply)
        given = getattr(codec, "field_names", None)  # None: the codec does not say
        missing = [name for name in needed_fields(step) if given is not None and name not in given]
        if missing:
            hint = " (name them in its fields setting)" if hasattr(codec, "fields") else ""
            raise ConfigError(
                f"inbox {self.name}: apply step {apply_name(self.apply)} needs the field(s) "
                f"{', '.join(missing)}, which codec {codec.name} does not give{hint}"
            )
        retention = self.retention_seconds
        if retention is not None and retention < RETENTION_FLOOR and not self.retention_override:
            raise ConfigError(
                f"inbox {self.name}: retention {format_duration(retention)} is below the 72h "
                f"floor; a shorter window re-admits old resends as new, so it needs an explicit "
                f"retention_override reason"
            )
        tombstones = self.tombstone_seconds
        if retention is not None and tombstones is not None and tombstones <= retention:
            raise ConfigError(
                f"inbox {self.name}: tombstones ({format_duration(tombstones)}) must outlast "
                f"retention ({format_duration(retention)})"
            )
        return codec, step
