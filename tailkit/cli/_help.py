"""
Help that reads well at any width: prose reflowed once, examples kept, value types as words.

Typer's rich help keeps a docstring's single newlines and then wraps again at the terminal's
width, so a docstring wrapped at 100 columns comes out with a break in mid-sentence at 80.
`HelpCommand` joins each prose paragraph into one line and lets rich wrap it; lines indented in
the docstring (the examples) stay as written, and an example too wide for the terminal is
continued with a shell backslash rather than broken anywhere. Options show a word for their
value (``FILE``, ``N``, ``SECONDS``, ``FIELD=VALUE``) instead of ``<path>`` / ``<list[str]>``:
the option's own ``metavar`` where it gives one, else a word for its type; flags show none.

Commands load lazily (`HelpTyper.lazy_command`): the app names each command's module and its
one-line summary, and imports the module only when the command is run or its own help is asked
for, so ``tailkit --help`` and a short command do not pay for every command's imports (DuckDB,
NumPy, SciPy behind ``stats``; see `tailkit.cli._startup`).
"""

from __future__ import annotations

import functools
import inspect
import re

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args, get_origin

import typer

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandInfo

from tailkit.cli._startup import LazyCommand, LazyCommands, Shortcuts, import_rich_help


_BULLET = re.compile(r"(?:[-*•]|\d+[.)])\s")
_TYPE_WORDS: dict[Any, str] = {Path: "PATH", int: "N", float: "NUMBER", str: "TEXT"}
_PADDING = 2  # typer pads the help text by one column on each side
_CONTINUED = 4  # extra indent of an example's continuation lines


def reflow(text: str) -> str:
    """
    A help text with each prose paragraph on one line, for the console to wrap.

    Lines indented in the text (examples) and list items (``-``, ``*``, ``1.``) keep their own
    lines; blank lines stay; anything after a form feed is dropped, as click does.

    Args:
        text: A docstring or help string, indented or not.

    Returns:
        The text, dedented, with prose paragraphs joined by single spaces.
    """
    out: list[str] = []
    prose = False  # whether the last line of ``out`` is prose that the next line continues
    for line in inspect.cleandoc(text).partition("\f")[0].splitlines():
        if not line.strip():
            out.append("")
            prose = False
        elif line[0].isspace():
            out.append(line.rstrip())
            prose = False
        elif prose and not _BULLET.match(line):
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
            prose = True
    return "\n".join(out).strip("\n")


def _shell_words(line: str) -> list[str]:
    """
    A command line split at the spaces outside quotes (the quotes kept).
    """
    words, word, quote = [], "", ""
    for char in line.strip():
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == " ":
            if word:
                words.append(word)
            word = ""
            continue
        word += char
    return [*words, word] if word else words


def fit_example(line: str, width: int) -> list[str]:
    """
    An example line as it fits in ``width`` columns, continued with a backslash where too wide.

    Args:
        line: One indented line of a docstring's example block.
        width: Columns available to the text.

    Returns:
        The line unchanged when it fits (or has a single word), else its continuation lines,
        each but the last ending in a backslash. A quoted argument is never split, and an
        option stays on the line of its value.
    """
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()))
    words: list[str] = []
    for word in _shell_words(line):
        if words and words[-1].startswith("-") and not word.startswith("-"):
            words[-1] += " " + word  # an option and its value: one unit
        else:
            words.append(word)
    if len(words) < 2:
        return [line]
    lines, current = [], indent + words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current = indent + " " * _CONTINUED + word
        else:
            current += " " + word
    return [*lines, current]


def _fit_examples(text: str, width: int) -> str:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(fit_example(line, width) if line[:1].isspace() else [line])
    return "\n".join(out)


def _type_word(annotation: Any) -> str:
    """
    The word for a value of this type: ``PATH``, ``N``, ``NUMBER``, ``TEXT`` (else ``VALUE``).
    """
    if get_origin(annotation) is list:
        return _type_word(get_args(annotation)[0])
    if get_origin(annotation) is tuple:
        return " ".join(_type_word(a) for a in get_args(annotation))
    return _TYPE_WORDS.get(annotation, "VALUE")


def name_values(params: list[Any]) -> None:
    """
    Give every option a word for its value (flags none) and every argument an upper-case name.

    An explicit ``metavar`` is kept. Arguments lose typer's type column: their name says it.
    Every parameter also checks a value not given, or plain text, without pydantic
    (`Shortcuts`).

    Args:
        params: The command's parameters (changed in place).
    """
    for param in params:
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = param.name.upper()
            param.__class__ = _WordArgument
        elif isinstance(param, TyperOption):
            if param.metavar is None:
                flag = param.is_flag or param.count
                param.metavar = "" if flag else _type_word(param.type_descriptor.annotation)
            param.__class__ = _PlainOption


class _PlainOption(TyperOption):
    """
    An option that checks a value not given, or plain text, without pydantic (`Shortcuts`).
    """

    def get_runtime_param(self) -> Any:
        """
        Typer's coercion once built; before that, the shortcuts in front of it.
        """
        if self._runtime_param is None:
            return Shortcuts(super().get_runtime_param)
        return super().get_runtime_param()


class _WordArgument(TyperArgument):
    """
    An argument whose help row shows its name only (``PLAN``), no ``<path>`` type label.

    It checks a value not given, or plain text, without pydantic, as `_PlainOption` does.
    """

    def get_runtime_param(self) -> Any:
        """
        Typer's coercion once built; before that, the shortcuts in front of it.
        """
        if self._runtime_param is None:
            return Shortcuts(super().get_runtime_param)
        return super().get_runtime_param()

    def display_type_rich(self, ctx: Any) -> str | None:
        """
        No type label: the argument's name says what it is.
        """
        return None


@contextmanager
def _escaped(objects: list[Any]) -> Iterator[None]:
    """
    The ``help`` of each object escaped for rich markup while the help is drawn.

    Typer reads help text as rich markup, which eats a bracketed word such as ``[note]``.
    """
    from rich.markup import escape  # help only: rich is not imported to run a command

    saved = [obj.help for obj in objects]
    try:
        for obj in objects:
            if obj.help:
                obj.help = escape(obj.help)
        yield
    finally:
        for obj, text in zip(objects, saved, strict=True):
            obj.help = text


def _width() -> int:
    from rich.console import Console
    from typer import rich_utils

    return Console(width=rich_utils.MAX_WIDTH).width


class _HelpFlag:
    """
    Strictly private: ``--help`` as a flag without a value word (a mixin before typer's class).

    Its value is checked without pydantic (`Shortcuts`): not given, it is None.
    """

    def get_help_option(self, ctx: Any) -> Any:
        """
        The ``--help`` option, a flag without a value word.
        """
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
            if isinstance(option, TyperOption):
                option.__class__ = _PlainOption  # not given, it is None: no pydantic for it
        return option


class HelpCommand(_HelpFlag, TyperCommand):
    """
    A typer command whose ``--help`` reflows prose, keeps examples and names values by words.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = reflow(self.help)
        name_values(self.params)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """
        Draw the help with the examples fitted to the terminal and markup escaped.
        """
        import_rich_help()
        saved = self.help
        if saved:
            self.help = _fit_examples(saved, _width() - _PADDING)
        try:
            with _escaped([self, *self.get_params(ctx)]):
                super().format_help(ctx, formatter)
        finally:
            self.help = saved


class HelpGroup(_HelpFlag, TyperGroup):
    """
    The command group: its own help reflowed, its commands listed by their first sentence.

    Its commands are `LazyCommands`: the list in ``--help`` is drawn from the summaries,
    without importing any command's module.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = reflow(self.help)
        self.commands = LazyCommands(self.commands)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """
        The commands' names in the order they were registered, none of them loaded.
        """
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """
        The command of that name, loaded; while the group's help is drawn, its summary only.
        """
        if self._listing:
            return self.commands.peek(cmd_name)  # type: ignore[attr-defined]
        return super().get_command(ctx, cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """
        Draw the help with every help text escaped for rich markup, commands by summary.
        """
        import_rich_help()
        self._listing = True
        try:
            names = self.list_commands(ctx)
            commands = [c for c in (self.get_command(ctx, n) for n in names) if c]
            with _escaped([self, *commands, *self.get_params(ctx)]):
                super().format_help(ctx, formatter)
        finally:
            self._listing = False


class HelpTyper(typer.Typer):
    """
    A `typer.Typer` whose commands are `HelpCommand` unless given another ``cls``.
    """

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[Any], Any]:
        """
        Register a command, as `typer.Typer.command`, with `HelpCommand` as its class.
        """
        return super().command(name, cls=cls or HelpCommand, **kwargs)

    def lazy_command(self, name: str, target: str, summary: str) -> None:
        """
        Register a command whose module is imported only when the command is used.

        Args:
            name: The command's name (``stats``).
            target: Where its function is, ``module:function``.
            summary: The first paragraph of its help, as ``tailkit --help`` lists it (a test
                holds it to the function's docstring).
        """

        def not_loaded() -> None:
            raise AssertionError(target)  # the group loads the command before running it

        not_loaded.__doc__ = summary
        not_loaded.__name__ = target.rpartition(":")[2]
        cls = functools.partial(
            LazyCommand,
            target=target,
            command_class=HelpCommand,
            pretty_exceptions_short=self.pretty_exceptions_short,
        )
        self.registered_commands.append(
            CommandInfo(
                name=name,
                cls=cls,  # type: ignore[arg-type]  # typer calls it as a class
                callback=not_loaded,
                help=summary,
                options_metavar=self._info_val_str("options_metavar"),
            )
        )
