"""The README documents every command and the two commands it promises."""

from __future__ import annotations

from pathlib import Path

import click

from oncebox.surfaces.cli import cli

README = (Path(__file__).parent.parent / "README.md").read_text("utf-8")


def commands(group: click.Group, prefix: str = "") -> list[str]:
    found = []
    for name, command in group.commands.items():
        found.append(f"{prefix}{name}")
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix}{name} ")
    return found


def test_every_command_is_in_the_readme() -> None:
    missing = [name for name in commands(cli) if f"  {name}" not in README]
    assert missing == []


def test_readme_starts_with_the_run_and_test_commands() -> None:
    head = README.split("\n\n", 2)[1]
    assert "`bash run.sh`" in head and "`bash test.sh`" in head
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text("utf-8")
    assert "exec bash test.sh" in ci
