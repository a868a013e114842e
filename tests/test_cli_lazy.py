"""The command line imports a command's module only when the command runs
(surfaces/cli/lazy.py): the names it knows are every command there is, importing the
module it names for a command brings the whole command (its subcommands too), and a
command that prints JSON loads neither rich nor the HTTP service."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
import pytest

import oncebox
from oncebox.surfaces.cli import cli
from oncebox.surfaces.cli.base import COMMANDS
from oncebox.surfaces.cli.lazy import LazyCommands

CLI_DIR = Path(oncebox.__file__).parent / "surfaces" / "cli"
PACKAGE = "oncebox.surfaces.cli"


def imported_with(module: str) -> set[str]:
    """The modules importing ``module`` imports, itself included, following the command
    modules' own imports (read from the source: what this process imported before must
    not count)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not name.startswith(PACKAGE + "."):
            continue  # outside the command line: its imports add no command
        tree = ast.parse((CLI_DIR / f"{name.rsplit('.', 1)[1]}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
                todo.extend(f"{PACKAGE}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                todo.append(node.module)
    return seen


def every_command(command: click.Command) -> list[click.Command]:
    below = command.commands.values() if isinstance(command, click.Group) else []
    return [command, *(c for sub in below for c in every_command(sub))]


def test_the_group_knows_every_command_and_no_other() -> None:
    assert isinstance(cli.commands, LazyCommands)
    assert set(cli.commands) == set(COMMANDS)
    assert sorted(cli.list_commands(click.Context(cli))) == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_named_module_brings_the_whole_command(name: str) -> None:
    brought = imported_with(COMMANDS[name])
    for command in every_command(cli.commands[name]):
        assert command.callback is not None
        assert command.callback.__module__ in brought, command.name


@pytest.mark.slow
def test_a_json_command_loads_no_tables_and_no_http(tmp_path: Path) -> None:
    """One real process: ``oncebox inboxes`` piped imports nothing it does not use."""
    url = f"sqlite:///{tmp_path / 'lazy.db'}"
    oncebox.open(url).close()
    code = (
        "import sys\n"
        "from oncebox.surfaces.cli import main\n"
        f"sys.argv = ['oncebox', '--db', {url!r}, 'inboxes']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "heavy = {'rich', 'fastapi', 'starlette', 'uvicorn', 'jinja2', 'psycopg', 'httpx'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"ussd"' in done.stdout
    assert done.stderr.strip() == "[]"


def test_a_group_another_command_made_first_still_gets_its_subcommands() -> None:
    # `records` imports `letters` (for its time options), which makes the dead-letters
    # group without the bulk subgroup its own module adds: a process that ran `records`
    # (the tests' in-process runner, a program embedding the CLI) then lost `bulk`.
    code = (
        "import oncebox.surfaces.cli.records\n"
        "from click.testing import CliRunner\n"
        "from oncebox.surfaces.cli import cli\n"
        "done = CliRunner().invoke(cli, ['dead-letters', 'bulk', '--help'])\n"
        "print(done.exit_code, 'archive' in done.output)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "True"], done.stdout + done.stderr
