"""The command line run in this process, as ``python -m oncebox`` would run it: the same
entry point (its one-line errors and exit statuses), with standard output and error
captured. For the many quick offline calls of a test; each test that does so keeps at
least one call through a real process."""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import sys
from pathlib import Path

from oncebox.surfaces.cli import main


def oncebox_here(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``oncebox ARGS`` run in ``cwd``, as a finished process would report it."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    argv = sys.argv
    code = 0
    try:
        sys.argv = ["oncebox", *args]
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.chdir(cwd))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        root.handlers[:], root.level = handlers, level
    return subprocess.CompletedProcess(["oncebox", *args], code, out.getvalue(), err.getvalue())
