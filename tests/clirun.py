"""The command line run in this process, as ``python -m oncebox`` would run it: the same
entry point (its one-line errors and exit statuses), with standard input given and
standard output and error captured. For the many quick offline calls of a test; each test
that does so keeps at least one call through a real process (:class:`Oncebox` makes its
first call one), since a process costs a third of a second of CPU to start."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oncebox.surfaces.cli import main

ONCEBOX = [sys.executable, "-m", "oncebox"]
# What a real process of these tests sees: no ONCEBOX_* variable of the caller's.
BARE = {"PATH": "/usr/bin:/bin"}


def _captured() -> io.TextIOWrapper:
    """A text stream over bytes, as a process's standard stream is (``.buffer`` too)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def oncebox_here(
    cwd: Path,
    *args: str,
    stdin: bytes | str = b"",
    text: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``oncebox ARGS`` run in ``cwd``, as a finished process would report it (its
    output as text, or as bytes with ``text=False``), with no ONCEBOX_* variable but
    those in ``env``."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = _captured(), _captured()
    feed = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    given = {k: v for k, v in (env or {}).items() if k != "PATH"}
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ONCEBOX_")}
    saved_env.update({k: os.environ[k] for k in given if k in os.environ})
    os.environ.update(given)
    argv = sys.argv
    code = 0
    try:
        sys.argv = ["oncebox", *args]
        root.handlers[:] = []  # main() gives the root logger its handler on stderr
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.chdir(cwd))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            stdin_was, sys.stdin = sys.stdin, feed
            stack.callback(setattr, sys, "stdin", stdin_was)
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        root.handlers[:], root.level = handlers, level
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
        for name in given:
            os.environ.pop(name, None)
        os.environ.update(saved_env)
    written = [stream.buffer.getvalue() for stream in (out, err)]  # type: ignore[attr-defined]
    if text:
        return subprocess.CompletedProcess(["oncebox", *args], code, *(w.decode() for w in written))
    return subprocess.CompletedProcess(["oncebox", *args], code, *written)


class Oncebox:
    """``oncebox`` for one test: the first call a real process (exit status and output
    through a process), every later one in this process unless asked for ``real``."""

    def __init__(self, cwd: Path, *base: str, env: Mapping[str, str] | None = None) -> None:
        self.cwd = cwd
        self.base = list(base)
        self.env = env  # the process's whole environment (None: this one's)
        self.calls = 0

    def __call__(
        self,
        *args: str,
        stdin: bytes | str = b"",
        text: bool = True,
        real: bool = False,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[Any]:
        self.calls += 1
        every = [*self.base, *args]
        if real or self.calls == 1:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            done = subprocess.run(
                [*ONCEBOX, *every], input=data, capture_output=True, cwd=self.cwd,
                env=self.env, timeout=timeout,
            )  # fmt: skip
            if text:
                done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
            return done
        return oncebox_here(self.cwd, *every, stdin=stdin, text=text, env=self.env)


_MADE: dict[tuple[Path, tuple[str, ...], tuple[tuple[str, str], ...]], Oncebox] = {}


def oncebox_in(cwd: Path, *base: str, env: Mapping[str, str] | None = None) -> Oncebox:
    """The one :class:`Oncebox` of a test's directory (``tmp_path``) and options: its
    first call is a process, the test's later ones are not."""
    named = tuple(sorted((k, v) for k, v in (env or {}).items() if k.startswith("ONCEBOX_")))
    key = (cwd, base, named)
    if key not in _MADE:
        _MADE[key] = Oncebox(cwd, *base, env=env)
    return _MADE[key]
