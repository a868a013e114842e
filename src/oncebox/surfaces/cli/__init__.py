"""The ``oncebox`` command: a thin layer over the library, one module per group of
commands, each imported when one of its commands runs (surfaces/cli/lazy.py); every rule
lives in the engine. ``main`` is the console script's entry point."""

from __future__ import annotations

import logging
import sys

import click

from oncebox.errors import OnceboxError
from oncebox.surfaces.cli.base import cli, fail

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
