"""
The option tables of the command pages in ``docs/``, generated from the commands themselves.

Each command page holds its table between two markers::

    <!-- options: stats -->
    ...the generated table...
    <!-- /options -->

`render` draws the table from the click command typer builds for the app: its usage line, then
one row per argument and visible option with its flags, the word for its value, its default and
its help text. Nothing depends on the terminal's width, so the same commands give the same
bytes anywhere. ``python -m tailkit.cli._reference --write`` rewrites every block in
``docs/*.md``; ``--check`` rewrites nothing and exits 1 naming the pages whose blocks are stale,
which is what the test suite asserts, so an option added without its docs fails CI (the way
datasette and sqlite-utils check their CLI reference with cog). A small generator is used
instead of cog because the blocks are the only generated text in the pages, and cog is not a
dependency. The table is not ``--help`` captured: help is drawn by rich at the terminal's width,
while a table row holds the same facts at any width.

It works on a clone: ``DOCS`` is the repository's ``docs/``, which a wheel ships as package
data that nobody rewrites.
"""

from __future__ import annotations

import re
import sys

from pathlib import Path
from typing import Any

import typer


DOCS = Path(__file__).resolve().parents[2] / "docs"
# <!-- options: NAME --> ... <!-- /options -->, the text between them replaced whole.
BLOCK = re.compile(r"(<!-- options: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /options -->)",
                   flags=re.DOTALL)  # fmt: skip


def commands() -> dict[str, Any]:
    """
    The app's commands by name, as click commands (typer's own copy of click: duck-typed here).
    """
    from tailkit.cli import app

    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _cell(text: str) -> str:
    """
    Text as one Markdown table cell: on one line, its pipes escaped.
    """
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    """
    The default as the table shows it: blank for none, for a flag that is off, for an empty list.
    """
    value: Any = param.default
    if callable(value) or value is None or value is False or value in ((), []):
        return ""
    if value is True:
        return "on"
    return f"`{_cell(str(value))}`"


def _row(param: Any) -> str:
    """
    One table row: an argument (``PATHS...``) or an option with its flags, value word and default.
    """
    if param.param_type_name == "argument":
        word = (param.metavar or param.name or "").upper()
        name = f"`{word}...`" if param.nargs == -1 else f"`{word}`"
        value = "argument" if param.required else "argument, optional"
        return f"| {name} | {value} |  | {_cell(getattr(param, 'help', None) or '')} |"
    flags = ", ".join(f"`{flag}`" for flag in [*param.opts, *param.secondary_opts])
    word = f"`{_cell(param.metavar)}`" if param.metavar else ""
    if param.multiple:
        word = f"{word}, repeatable" if word else "repeatable"
    return f"| {flags} | {word} | {_default(param)} | {_cell(param.help or '')} |"


def render(name: str) -> str:
    """
    The Markdown reference of one command: its usage line and its table of arguments and options.

    Args:
        name: The command's name (``stats``).

    Returns:
        The text that goes between the page's markers, ending in a newline.

    Raises:
        KeyError: No command has that name.
    """
    command = commands()[name]
    ctx = command.context_class(command, info_name=f"tailkit {name}")
    usage = " ".join(command.collect_usage_pieces(ctx))
    rows = [_row(p) for p in command.params if not getattr(p, "hidden", False)]
    return "\n".join([
        f"Usage: `tailkit {name} {usage}`",
        "",
        "| option | value | default | meaning |",
        "|---|---|---|---|",
        *rows,
        "",
    ])  # fmt: skip


def refreshed(text: str) -> str:
    """
    A page's text with every options block drawn again from its command.
    """
    return BLOCK.sub(lambda m: m[1] + render(m["name"]) + m[4], text)


def stale_pages(folder: Path = DOCS, *, write: bool = False) -> list[str]:
    """
    The pages of ``folder`` whose options blocks differ from what the commands generate.

    Args:
        folder: The docs folder.
        write: Rewrite those pages with their blocks drawn again.

    Returns:
        The stale pages' file names, sorted (none when every block is current).
    """
    stale: list[str] = []
    for page in sorted(folder.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        fresh = refreshed(text)
        if fresh != text:
            stale.append(page.name)
            if write:
                page.write_text(fresh, encoding="utf-8")
    return stale


def documented(folder: Path = DOCS) -> set[str]:
    """
    The commands that have an options block somewhere in ``folder``.
    """
    return {m["name"] for page in folder.glob("*.md") for m in BLOCK.finditer(page.read_text())}


def main(argv: list[str], folder: Path = DOCS) -> int:
    """
    ``--write`` rewrites the stale blocks; ``--check`` names the stale pages and exits 1.

    Either exits 1 too when a command has no block in ``folder``.
    """
    if argv not in (["--write"], ["--check"]):
        print("usage: python -m tailkit.cli._reference --write | --check", file=sys.stderr)
        return 2
    stale = stale_pages(folder, write=argv == ["--write"])
    missing = sorted(set(commands()) - documented(folder))
    if missing:
        print(f"no options block for: {', '.join(missing)}", file=sys.stderr)
    if argv == ["--write"]:
        print(f"rewrote {len(stale)} page(s): {', '.join(stale) or 'none'}")
        return 1 if missing else 0
    if stale:
        fix = "regenerate with: python -m tailkit.cli._reference --write"
        print(f"stale options tables in docs/: {', '.join(stale)}; {fix}", file=sys.stderr)
    return 1 if stale or missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
