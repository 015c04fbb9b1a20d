"""
Options and helpers every command shares.

Light at import (typer and tailkit's vocabulary only): every command imports it, ``tailkit
docs`` and ``tailkit check`` included, so `ScanOptions` and `Buckets` are imported where they
are built, not here (``tailkit.formats`` loads every format's module).
"""

from __future__ import annotations

import contextlib

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from tailkit.errors import TailkitError
from tailkit.text import Advice, printable


if TYPE_CHECKING:
    from rich.console import Console

    from tailkit.formats import ScanOptions
    from tailkit.record import Buckets


_FLAGS = {
    "mapping": "--map",
    "sets": "--set",
    "overrides": "--set-over",
    "window_s": "--window",
    "deadline_s": "--deadline",
    "idle_timeout_s": "--idle-timeout",
    "stats_json": "--from-stats",
}
"""Library fields whose flag is not ``--`` and the field's name with dashes."""

_COMMAND_FLAGS = {
    "calibrate": {"path": "--out"},
    "races": {
        "caller_options.unit": "--harness-unit",
        "callee_options.unit": "--tool-unit",
        "caller_options.mapping": "--harness-map",
        "callee_options.mapping": "--tool-map",
    },
}
"""Fields that one command sets with a flag of its own (races reads two logs)."""


def flag_of(field: str, command: str | None = None) -> str:
    """
    The flag that sets the library parameter ``field`` in ``command``.

    ``min_calls`` is ``--min-calls`` (dashes for underscores), unless a table above says
    otherwise; ``caller_options.unit`` is ``--unit`` unless the command names it.
    """
    own = _COMMAND_FLAGS.get(command or "", {})
    if field in own:
        return own[field]
    if field.startswith("-"):  # a caller that named the flag itself
        return field
    field = field.rpartition(".")[2]
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def shown(value: object) -> str:
    """
    A name from the data (a model, step, provider, file) as text for a rich console.

    Control characters are spelt out (`tailkit.text.printable`) and ``[`` that could open a
    rich tag is escaped: a step called ``[/]`` prints as itself instead of crashing the
    command, and ``[link=…]`` never becomes a live link. Every name printed through rich goes
    through here; text that is not markup (a ``rich.text.Text``, plain ``print``) needs only
    ``printable``. Put no tag right after it: a name ending in a backslash would print the tag.
    """
    from rich.markup import escape  # only the commands that print need rich

    # rich doubles a trailing backslash so that a tag may follow (it would escape the tag's
    # "["): shown as a whole, the name would then print with two. The space keeps it single;
    # nothing here writes a tag right after a name.
    return escape(printable(value) + " ")[:-1]


def echo(line: object = "", *, err: bool = False) -> None:
    """
    Print a plain line that may hold names from the data (``typer.echo``).

    Control characters are spelt out by `tailkit.text.printable`: a newline in a name cannot
    forge a second line, an escape sequence cannot move the cursor.
    """
    typer.echo(printable(line), err=err)


PIPE_WIDTH = 100_000
"""The width of a console that is not a terminal: wide enough that no line is ever cut."""


def new_console(*, stderr: bool = False) -> Console:
    """
    The console a command prints its tables and lines through (stdout, or ``stderr``).

    A terminal gets its own width, and a name too long for its column folds onto the next line
    (each table's columns fold, never end in ``…``). A pipe or a file gets the whole table on
    unwrapped lines whatever ``COLUMNS`` says: output piped to a file or ``grep`` is complete.
    Emoji codes stay as typed: a model named ``:fire:`` prints as ``:fire:``.
    """
    from rich.console import Console

    terminal = Console(stderr=stderr, emoji=False)
    if terminal.is_terminal:
        return terminal
    return Console(stderr=stderr, emoji=False, width=PIPE_WIDTH)


def said(message: object, command: str | None = None) -> str:
    """
    A library warning or note as the command line shows it: its parameters spelt as flags.

    Library advice (`tailkit.text.Advice`) names parameters; any other text is shown as is.
    The text is exact (for ``--json``); a terminal line prints it through `printable` (plain)
    or `shown` (rich markup), since a message may quote a name from the data.
    """
    if isinstance(message, Advice):
        return message.render(lambda field: flag_of(field, command))
    return str(message)


def error_text(error: TailkitError, command: str | None = None) -> str:
    """
    A library error as the command line shows it: its parameter spelt as the flag.
    """
    return error.render(lambda field: flag_of(field, command))


def fail_with(error: TailkitError, command: str | None = None, *, code: int = 1) -> NoReturn:
    """
    Print ``Error: …`` for a library error (its parameter spelt as the flag) and exit.

    The message may quote a name or a path from the data: its control characters are spelt
    out (`tailkit.text.printable`), so the error stays one line that moves no cursor.
    """
    typer.echo(f"Error: {printable(error_text(error, command))}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def library_errors(command: str | None = None, *, code: int = 1) -> Iterator[None]:
    """
    Turn a `TailkitError` raised inside into ``Error: …`` on stderr and exit ``code``.
    """
    try:
        yield
    except TailkitError as exc:
        fail_with(exc, command, code=code)


DbOption = Annotated[
    Path, typer.Option("--db", metavar="FILE", help="The DuckDB store file.", show_default=True)
]
MemoryLimitOption = Annotated[
    str | None,
    typer.Option(
        "--memory-limit",
        metavar="SIZE",
        help="Cap DuckDB's memory, e.g. 2GB; beyond it DuckDB spills to disk "
        "(default: DuckDB's, 80% of RAM).",
    ),
]
READ_MEMORY_LIMIT = "1GB"  # what stats, calibrate and simulate let DuckDB hold, unless told
ReadMemoryLimitOption = Annotated[
    str,
    typer.Option(
        "--memory-limit",
        metavar="SIZE",
        help="Cap DuckDB's memory, e.g. 4GB; beyond it DuckDB spills to disk, so a store of "
        "any size fits.",
        show_default=True,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
InputEdges = Annotated[
    str | None,
    typer.Option(
        "--input-edges", metavar="EDGES", help="Input-token bucket edges, e.g. 0,1k,4k,16k,64k."
    ),
]
OutputEdges = Annotated[
    str | None,
    typer.Option(
        "--output-edges",
        metavar="EDGES",
        help="Output-token bucket edges, e.g. 0,64,256,600,1200,2400.",
    ),
]
MapOption = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        metavar="FIELD=COLUMN",
        help="Read FIELD from this column, e.g. total_s=latency (repeatable).",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="FIELD=VALUE",
        help="Give every row this value, e.g. provider=openai (repeatable); refused when the "
        "file has that column (see --set-over).",
    ),
]
SetOverOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set-over",
        metavar="FIELD=VALUE",
        help="Give every row this value, replacing the file's own FIELD column, e.g. "
        "provider=azure (repeatable).",
    ),
]
StatusMapOption = Annotated[
    list[str] | None,
    typer.Option(
        "--status-map",
        metavar="VALUE=STATUS",
        help="Read this status value as one of ok, error, timeout, cancelled, "
        "invalid, rate_limited, e.g. 429=rate_limited (repeatable; case-insensitive). "
        "true/false, 1/0 and yes/no are read as ok/error without it.",
    ),
]
UnitOption = Annotated[
    str | None, typer.Option("--unit", metavar="s|ms", help="Unit of duration columns: s or ms.")
]


def pairs(values: list[str] | None, flag: str, shape: str = "COLUMN=VALUE") -> dict[str, str]:
    """
    ``KEY=VALUE`` option values as a dict (spaces around either side dropped).
    """
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{flag} takes {shape}, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def scan_options(
    *,
    map_: list[str] | None,
    set_: list[str] | None,
    set_over: list[str] | None,
    status_map: list[str] | None,
    unit: str | None,
) -> ScanOptions:
    """
    The `ScanOptions` of ``--map``, ``--set``, ``--set-over``, ``--status-map`` and ``--unit``.
    """
    from tailkit.formats import ScanOptions

    sets, over = pairs(set_, "--set"), pairs(set_over, "--set-over")
    for name in sets.keys() & over.keys():
        fail(f"--set {name} and --set-over {name} both given; keep one")
    return ScanOptions(
        mapping=pairs(map_, "--map"),
        sets={**sets, **over},
        unit=unit,
        status_map=pairs(status_map, "--status-map", "VALUE=STATUS"),
        overrides=frozenset(over),
    )


def fail(message: str) -> NoReturn:
    """
    Print ``Error: message`` on stderr and exit 1 (control characters spelt out: `fail_with`).
    """
    typer.echo(f"Error: {printable(message)}", err=True)
    raise typer.Exit(1)


def buckets_of(input_edges: str | None, output_edges: str | None) -> Buckets:
    """
    Bucket edges from ``--input-edges`` / ``--output-edges`` (defaults where not given).
    """
    from tailkit.record import Buckets

    try:
        default = Buckets()
        return Buckets(
            Buckets.parse_edges(input_edges) if input_edges else default.input_edges,
            Buckets.parse_edges(output_edges) if output_edges else default.output_edges,
        )
    except ValueError as exc:
        fail(str(exc))
