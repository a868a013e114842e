"""A command group that imports a command's module only when the command is used.

Every ``oncebox`` process pays for what it imports before it does anything: the modules
of thirty commands (and rich, for tables) cost a one-line ``oncebox ingest`` more than
its work. The group knows each command's name and the module that defines it; the module
adds the command to the group when imported (``@cli.command()``), as it always did.
Whatever lists the commands (``--help``, a misspelt command's suggestions, ``commands``
read whole) imports them all first, so nothing outside this module sees the difference.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values


class LazyCommands(dict[str, click.Command]):
    """A group's ``commands``: a name's module is imported when the name is looked up,
    every module when the commands are listed."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        super().__init__()
        self.modules = dict(modules)

    def load(self, name: str) -> None:
        # Imported even when the name is there: another module may have made the group
        # without the subcommands the named module adds to it.
        if name in self.modules:
            importlib.import_module(self.modules[name])

    def load_all(self) -> None:
        for module in dict.fromkeys(self.modules.values()):
            importlib.import_module(module)

    def __getitem__(self, name: str) -> click.Command:
        # Loaded even when the name is there: a module imported for another command
        # (records imports letters) makes a group without what the named module adds.
        self.load(name)
        return dict.__getitem__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.load(name)
        return dict.__contains__(self, name)

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def keys(self) -> dict_keys[str, click.Command]:
        self.load_all()
        return dict.keys(self)

    def values(self) -> dict_values[str, click.Command]:
        self.load_all()
        return dict.values(self)

    def items(self) -> dict_items[str, click.Command]:
        self.load_all()
        return dict.items(self)


class LazyGroup(click.Group):
    """A group whose commands (name: module) are imported on first use."""

    def __init__(self, *args: Any, lazy: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(lazy)
