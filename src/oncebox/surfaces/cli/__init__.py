"""The ``oncebox`` command: a thin layer over the library, one module per group of
commands; every rule lives in the engine. ``main`` is the console script's entry point."""

from __future__ import annotations

import logging
import sys

import click

from oncebox.errors import OnceboxError
from oncebox.surfaces.cli import (
    bulk,
    feed,
    forwarding,
    intake,
    letters,
    log,
    records,
    stream,
    tokens,
    views,
    work,
)
from oncebox.surfaces.cli.base import cli, fail
from oncebox.surfaces.serve import serve  # the HTTP service

cli.add_command(serve)
# Imported for the commands they add to cli.
COMMANDS = (bulk, feed, forwarding, intake, letters, log, records, stream, tokens, views, work)
__all__ = ["cli", "main"]


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="oncebox: %(message)s", stream=sys.stderr)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        fail(f"{exc.format_message()} (try --help)", exc.exit_code)
    except OnceboxError as exc:
        fail(str(exc))
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as exc:  # a bug: still one line, never a traceback
        fail(f"internal error: {type(exc).__name__}: {exc}", 70)
