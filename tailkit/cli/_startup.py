"""
What keeps the command line's start-up short (issue 31: short commands start fast).

Three things a command would otherwise pay for before it does anything:

- every command's module: `LazyCommand` and `LazyCommands` import a command's module only when
  it runs or draws its own help (``tailkit --help`` lists the commands by their summaries);
- typer's help module importing rich's Markdown and traceback renderers, which tailkit's help
  never uses: `import_rich_help`;
- pydantic, which typer imports to check a value even when there is nothing to check:
  `Shortcuts`.

Each keeps the output the same, and a test holds it to what typer would have done.
"""

from __future__ import annotations

import importlib
import sys
import types

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer

from typer.core import TyperCommand
from typer.models import CommandInfo


class Shortcuts:
    """
    A parameter's coercion that checks None and plain text without pydantic.

    typer 0.29 checks each value with a pydantic ``TypeAdapter`` that it builds on first use, and
    importing pydantic for it costs 70 ms: most of ``tailkit docs``'s start-up (issue 31). Two
    cases need no adapter, by typer's own code: a value not given (None), which its coercion
    returns as None (or ``()`` for a repeatable one) before it looks at the adapter; and text
    for a ``str`` parameter without a parser, which its adapter returns unchanged (``str()``,
    then pydantic's str). Those return here as typer would; every other value goes to typer's
    coercion, built then. A test holds both to typer's own for every parameter of every command.
    """

    def __init__(self, typer_coercion: Callable[[], Any]) -> None:
        self._typer_coercion = typer_coercion

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        """
        None and plain text as typer's coercion returns them; anything else through it.
        """
        described = param.type_descriptor
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        plain = described.annotation is str and described.parameter_info.parser is None
        if plain and type(value) is str and described.file_annotation is None:
            return value
        return self._typer_coercion().coerce(value, param=param, ctx=ctx)


class _StandIn(type):
    """
    A class that stands in for a rich class until it is used, then is that class.

    Calling it, or reading an attribute of it, imports the real module and forwards there; so
    a typer that one day renders Markdown or a traceback with it still gets rich's own.
    """

    _module: str

    def _real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real(), name)


_UNUSED_BY_HELP = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
"""The rich modules typer's help module imports whole but help in ``rich`` markup never uses."""


def import_rich_help() -> None:
    """
    Import typer's help renderer (``typer.rich_utils``) without rich.markdown and rich.traceback.

    ``typer.rich_utils`` imports both at its top, for help written in Markdown and for pretty
    tracebacks: markdown-it, pygments and attrs, 90 ms of the 200 ms ``tailkit --help`` took
    (issue 31). tailkit's help is rich markup and its tracebacks are plain
    (``pretty_exceptions_enable=False``), so while typer's module is imported those two
    modules are stand-ins (`_StandIn`), taken out of ``sys.modules`` again at once: the help
    drawn is the same, and any later ``import rich.markdown`` gets the real module.
    """
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins: dict[str, types.ModuleType] = {}
    for module, name in _UNUSED_BY_HELP.items():
        if module not in sys.modules:
            stand_ins[module] = types.ModuleType(module)
            setattr(stand_ins[module], name, _StandIn(name, (), {"_module": module}))
    sys.modules.update(stand_ins)
    try:
        importlib.import_module("typer.rich_utils")
    finally:
        for module, stand_in in stand_ins.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]


class LazyCommand(TyperCommand):
    """
    A command not loaded yet: its name and one-line summary, and where its function is.

    The group's help lists it by its summary; anything else asks `LazyCommands` for the real
    command, which imports the module then.
    """

    def __init__(
        self,
        *,
        target: str,
        command_class: type[TyperCommand],
        pretty_exceptions_short: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.command_class = command_class
        self.pretty_exceptions_short = pretty_exceptions_short

    def load(self) -> Any:
        """
        The real command: the target's module imported, its function made a ``command_class``.

        Built the way `HelpTyper.command` would have registered it, so it is the same command.
        """
        module, _, name = self.target.partition(":")
        callback = getattr(importlib.import_module(module), name)
        info = CommandInfo(
            name=self.name,
            cls=self.command_class,
            callback=callback,
            options_metavar=self.options_metavar or "[OPTIONS]",
        )
        return typer.main.get_command_from_info(
            info,
            pretty_exceptions_short=self.pretty_exceptions_short,
            rich_markup_mode=self.rich_markup_mode,
        )


class LazyCommands(MutableMapping[str, Any]):
    """
    A group's commands by name, each `LazyCommand` loaded the first time it is looked up.

    Click reaches a group's commands through ``group.commands`` (``get_command``, and
    ``typer.main.get_command(app).commands`` in tools and tests), so loading on lookup keeps
    every reader seeing real commands; listing names loads nothing. `peek` is the one way to
    a command without loading it, for the group's own help.
    """

    def __init__(self, commands: MutableMapping[str, Any]) -> None:
        self._commands = dict(commands)

    def peek(self, name: str) -> Any:
        """
        The command as it is now (a `LazyCommand` if not loaded yet), or None.
        """
        return self._commands.get(name)

    def __getitem__(self, name: str) -> Any:
        command = self._commands[name]
        if isinstance(command, LazyCommand):
            command = self._commands[name] = command.load()
        return command

    def __setitem__(self, name: str, command: Any) -> None:
        self._commands[name] = command

    def __delitem__(self, name: str) -> None:
        del self._commands[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._commands)

    def __len__(self) -> int:
        return len(self._commands)
