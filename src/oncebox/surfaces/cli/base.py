"""What every command shares: the ``oncebox`` group, its store, and how it answers.

Each command is a few lines over a library call and prints JSON (:func:`emit`); every rule
lives in the engine. A failure is one line on stderr and an exit status (:func:`fail`).
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

import oncebox
from oncebox.engine.config import load_config
from oncebox.surfaces import listing
from oncebox.surfaces.cli.lazy import LazyGroup
from oncebox.surfaces.lines import INT64_MAX

DEFAULT_DB = "sqlite:///oncebox.db"
# Ids, pages and tokens are 64-bit in both stores: a larger one is a usage error (exit 2),
# not an overflow deep in the store's driver (an internal error).
ROW_ID = click.IntRange(1, INT64_MAX)
AFTER = click.IntRange(0, INT64_MAX)


def default_actor() -> str:
    """Who acts from the command line, when ``--actor`` does not say: ``cli:`` and the
    operating system's user name."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return "cli"


ACTOR = click.option(
    "--actor",
    default=default_actor,
    show_default="cli:$USER",
    help="Who acts: kept on the row and in the log.",
)


def fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"oncebox: error: {message}", err=True)
    sys.exit(code)


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit_pages(pages: Iterator[list[dict[str, Any]]]) -> None:
    """A JSON array written a page at a time, as :func:`emit` would write it whole."""
    for chunk in listing.json_array(pages, listing.pretty, indent="  "):
        click.echo(chunk, nl=False)
    click.echo()


class Context:
    def __init__(self, db: str | None, config: str | None, json: bool = False) -> None:
        self.db = db
        self.config = config
        self.json = json  # JSON even on a terminal (surfaces/cli/output.py)
        self._box: oncebox.Oncebox | None = None
        self._reader: oncebox.Oncebox | None = None

    def _open(self, read_only: bool, declare: bool = True) -> oncebox.Oncebox:
        config = self.config
        if config is None and Path("oncebox.toml").exists():
            config = "oncebox.toml"
        if config is None:
            none: list[oncebox.InboxSpec] | None = None if declare else []
            return oncebox.open(self.db or DEFAULT_DB, inboxes=none, read_only=read_only)
        # The store: --db, else the config's own store, else the default (a config that
        # declares inboxes only must not leave serve without one).
        configured, declared = load_config(config)
        url = self.db or configured or DEFAULT_DB
        return oncebox.open(url, inboxes=declared if declare else [], read_only=read_only)

    def upgraded(self) -> oncebox.Oncebox:
        """The store with its schema brought up to date and no inbox declared (what
        ``oncebox migrate`` opens)."""
        self.close()
        self._box = self._open(read_only=False, declare=False)
        return self._box

    @property
    def box(self) -> oncebox.Oncebox:
        """The store, its inboxes declared: for commands that write."""
        if self._box is None:
            self._box = self._open(read_only=False)
        return self._box

    @property
    def reader(self) -> oncebox.Oncebox:
        """The store for commands that only read: no inbox declared, nothing written,
        and a store file that does not exist is an error (a typo in --db must not make
        an empty store and answer from it)."""
        if self._box is not None:
            return self._box
        if self._reader is None:
            self._reader = self._open(read_only=True)
        return self._reader

    def close(self) -> None:
        for box in (self._box, self._reader):
            if box is not None:
                box.close()
        self._box = self._reader = None

    def forget(self) -> None:
        """Close the store, if open; the next use opens it again (in a forked worker)."""
        self.close()


def _modules(**commands: str) -> dict[str, str]:
    return {
        name.replace("_", "-"): f"oncebox.surfaces.cli.{module}"
        for name, module in commands.items()
    }


# Each command and the module that defines it, imported when the command runs
# (surfaces/cli/lazy.py); a group that another module adds to names that one.
COMMANDS = _modules(
    checkpoint="log", consume="stream", consumers="feed", dead_letters="bulk", demo="intake",
    evict="views", feed="feed", forward="forwarding", forwarding="forwarding", inboxes="views",
    ingest="intake", keygen="log", lease="intake", lookup="records", migrate="log",
    prove="log", quarantine="bulk", reconcile="work", record="records", records="records",
    recover="log", seal="log", segment="log", serve="served", stats="views",
    token="tokens", triage="views", verify="log", verify_feed="log", verify_proof="log",
    work="work",
)  # fmt: skip


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar="ONCEBOX_DB",
    metavar="URL",
    help=f"Store URL, e.g. sqlite:///intake.db [env ONCEBOX_DB; default {DEFAULT_DB}]",
)
@click.option(
    "--config",
    envvar="ONCEBOX_CONFIG",
    metavar="PATH",
    help="TOML file declaring inboxes [env ONCEBOX_CONFIG; default ./oncebox.toml "
    "if present, else the built-in inboxes ussd, listing and feed]",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON even on a terminal: what listings and shows print when piped.",
)
@click.version_option(oncebox.__version__, prog_name="oncebox")
@click.pass_context
def cli(ctx: click.Context, db: str | None, config: str | None, as_json: bool) -> None:
    """oncebox: exactly-once effects from at-least-once, out-of-order deliveries.

    On a terminal, listings print as tables and single items as panels; piped,
    redirected or with --json, they print JSON for scripts.
    """
    ctx.obj = Context(db, config, as_json)
    ctx.call_on_close(ctx.obj.close)


def read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")


def read_json(path: str) -> Any:
    """The JSON in ``path``; one nested past the reader's depth (a RecursionError, no
    ValueError) is refused alike."""
    try:
        return json.loads(read_bytes(path))
    except (ValueError, RecursionError):
        fail(f"{path} is not JSON")


def inbox_names(box: oncebox.Oncebox) -> dict[int, str]:
    return {active.row.id: active.name for active in box.inboxes}
