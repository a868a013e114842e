"""Inboxes declared in a TOML file, and the ones a fresh store gets by default."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

from oncebox.engine.inboxes import InboxSpec
from oncebox.errors import ConfigError

DEFAULT_INBOXES = (
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    InboxSpec("listing", codec="json-event", apply="generation"),
    InboxSpec("feed", codec="feed"),
)
_KEYS = {
    "codec", "apply", "retention", "tombstones", "retention_override", "fenced", "webhook",
    "forward",
}  # fmt: skip
_TOP = {"store", "inboxes"}


def _unknown(key: str, known: set[str], what: str) -> str:
    """An unknown key, said with the closest known one and all of them."""
    close = difflib.get_close_matches(key, known, 1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown key {key!r}{hint}; {what} takes {', '.join(sorted(known))}"


def load_config(path: str | Path) -> tuple[str | None, list[InboxSpec]]:
    """Read ``store`` (a URL) and ``[inboxes.NAME]`` tables from a TOML file."""
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in _TOP:
            raise ConfigError(f"config {path}: {_unknown(key, _TOP, 'a config file')}")
    store = data.get("store")
    if store is not None and not isinstance(store, str):
        raise ConfigError(f"config {path}: store must be a URL string")
    tables = data.get("inboxes", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"config {path}: [inboxes.NAME] tables expected")
    specs = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"config {path}: inboxes.{name} must be a table")
        if "codec" not in table:
            raise ConfigError(f"config {path}: inboxes.{name} needs a codec")
        # Keys an inbox does not have are its codec's settings (json's identity, ...);
        # the codec refuses the ones it does not have either, so a typo still fails.
        options: dict[str, Any] = {k: v for k, v in table.items() if k in _KEYS}
        settings = {k: v for k, v in table.items() if k not in _KEYS}
        spec = InboxSpec(name=name, settings=settings or None, **options)
        try:
            spec.configured_codec()
            spec.destinations()
        except ConfigError as exc:
            # A key close to an inbox's own is a typo of it, not a codec setting: say so.
            typo = next((k for k in settings if difflib.get_close_matches(k, _KEYS, 1)), None)
            if typo is not None:
                said = _unknown(typo, _KEYS, "an inbox")
                raise ConfigError(f"config {path}: inboxes.{name}: {said}") from None
            raise ConfigError(f"config {path}: {exc}") from None
        specs.append(spec)
    return store, specs
