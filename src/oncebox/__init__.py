"""oncebox: exactly-once effects from at-least-once, out-of-order, corrupted deliveries."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from oncebox.domain import Decision, Verdict
from oncebox.domain.forwarding import ForwardFilter, ForwardStatus
from oncebox.engine.box import Oncebox
from oncebox.engine.checkpoint import Checkpoint, ProofError
from oncebox.engine.clock import ManualClock
from oncebox.engine.config import DEFAULT_INBOXES, load_config
from oncebox.engine.inboxes import InboxSpec
from oncebox.engine.leases import Lease
from oncebox.engine.step import Change, Step
from oncebox.errors import (
    ApplyError,
    ConfigError,
    InvalidOperation,
    InvalidQuery,
    NotFound,
    OnceboxError,
    StorageError,
    StorageUnavailable,
    TokenExpired,
    UnknownInbox,
    UnsafeSQLite,
)
from oncebox.formats import (
    Codec,
    Decoded,
    Delivery,
    Invalid,
    Overflow,
    Oversize,
    read_bounded,
    register,
)
from oncebox.store import open_store, sqlite_options

__version__ = "0.1.0"


def open(
    url: str | None = None,
    *,
    config: str | Path | None = None,
    inboxes: Iterable[InboxSpec] | None = None,
    clock: Callable[[], float] | None = None,
    seal: bool = True,
    read_only: bool = False,
) -> Oncebox:
    """Open a store (``sqlite:///path.db``) with its inboxes.

    Inboxes come from ``inboxes``, else from the TOML ``config`` file, else the defaults
    (``ussd``, ``listing``, ``feed``). ``clock`` replaces the server clock (tests, demos).
    ``seal=False`` defers sealing records into the log to :meth:`Oncebox.recover`.
    ``read_only=True`` (what the CLI's read commands use) declares no inbox and recovers
    nothing: it reads the inboxes the store already has, configured as given where they
    are named, and an SQLite file that does not exist is an error, not a new store; a
    store whose schema is older than this version is an error too
    (:class:`~oncebox.errors.SchemaBehind`), never upgraded by reading. A store a newer
    oncebox migrated is refused, to write or to read (:class:`StorageError`).
    """
    specs: list[InboxSpec] = list(inboxes) if inboxes is not None else []
    if config is not None:
        configured_url, configured = load_config(config)
        url = url or configured_url
        if inboxes is None:
            specs = configured
    if inboxes is None and config is None:
        specs = list(DEFAULT_INBOXES)
    if url is None:
        raise ConfigError("no store URL given (e.g. sqlite:///oncebox.db)")
    if read_only and not url.startswith(("postgresql://", "postgres://")):
        path = sqlite_options(url)[0]
        if path != ":memory:" and not Path(path).exists():
            raise ConfigError(
                f"no store at {path}: a command that reads a store (or migrates one) never "
                "makes one (check --db, $ONCEBOX_DB or the config's store)"
            )
    store = open_store(url, clock=clock, read_only=read_only)
    return Oncebox(store, specs, seal=seal, read_only=read_only)


__all__ = [
    "ApplyError",
    "Change",
    "Checkpoint",
    "Codec",
    "ConfigError",
    "Decision",
    "Decoded",
    "Delivery",
    "ForwardFilter",
    "ForwardStatus",
    "InboxSpec",
    "Invalid",
    "InvalidOperation",
    "InvalidQuery",
    "Lease",
    "ManualClock",
    "NotFound",
    "Oncebox",
    "OnceboxError",
    "Overflow",
    "Oversize",
    "ProofError",
    "Step",
    "StorageError",
    "StorageUnavailable",
    "TokenExpired",
    "UnknownInbox",
    "UnsafeSQLite",
    "Verdict",
    "open",
    "read_bounded",
    "register",
]
