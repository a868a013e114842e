"""Fast restarts and fast failure (issue 23, item 6): set-up on a checkout set up
already installs nothing, and an unreachable PostgreSQL fails on one clear line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from serveproc import ONCEBOX

pytestmark = pytest.mark.slow  # set-up and the command line as processes

ROOT = Path(__file__).parent.parent
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$@" >> "$(dirname "$0")/../calls"
"""


def checkout(tmp_path: Path) -> Path:
    """A copy of what set-up reads, with a .venv whose python only notes its calls."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    return tmp_path


def setup(where: Path) -> list[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("ONCEBOX_SETUP_FORCE", None)
    done = subprocess.run(
        ["bash", str(where / "scripts" / "setup.sh")], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    calls = where / ".venv" / "calls"
    found = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return found


def test_setup_installs_once_then_skips_until_the_dependencies_change(tmp_path: Path) -> None:
    where = checkout(tmp_path)
    first = setup(where)
    assert any("-m pip install" in call and "-e .[dev]" in call for call in first)
    again = setup(where)
    assert not [call for call in again if "pip" in call]  # set up already: nothing installed
    with (where / "pyproject.toml").open("a") as changed:
        changed.write("\n# a dependency changed\n")
    assert any("-m pip install" in call for call in setup(where))


def test_an_unreachable_postgresql_fails_on_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://oncebox@127.0.0.1:{port}/oncebox"
    done = subprocess.run(
        [*ONCEBOX, "--db", url, "stats"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"oncebox: error: cannot reach PostgreSQL at 127.0.0.1:{port}: "), (
        lines
    )
