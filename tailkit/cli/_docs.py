"""
``tailkit docs``: the reference pages, wherever tailkit is installed.
"""

from __future__ import annotations

import json

from typing import Annotated

import typer

from tailkit.cli._common import JsonOption, fail
from tailkit.errors import TailkitError


def docs(
    name: Annotated[
        str | None,
        typer.Argument(metavar="PAGE", help="A page to print: stats, calibrate, plan, executor, …"),
    ] = None,
    path: Annotated[
        bool, typer.Option("--path", help="Print the page's file path instead of its text.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """
    List the reference pages, or print one (Markdown).

    The pages ship with tailkit: one per command (its options and what it does), the executor,
    the call record (every field --map accepts, units, rules), the plan file, the deadline rule
    and its headers, the ledger, and the formats ingest reads.

    Example:

        tailkit docs

        tailkit docs stats

        tailkit docs call-record --path
    """
    from tailkit._docs import docs_dir, page, pages

    try:
        if name is None:
            found = pages()
            folder = docs_dir()
        else:
            one = page(name)
    except TailkitError as exc:
        fail(str(exc))
    if name is None:
        if as_json:
            rows = [{"name": p.name, "title": p.title, "summary": p.summary,
                     "path": str(p.path)} for p in found]  # fmt: skip
            typer.echo(json.dumps({"folder": str(folder), "pages": rows}, indent=2))
            return
        width = max(len(p.name) for p in found)
        for p in found:
            typer.echo(f"{p.name:<{width}}  {p.title}: {p.summary}")
        typer.echo(f"in {folder}; print one with: tailkit docs NAME")
        return
    if as_json:
        typer.echo(json.dumps({"name": one.name, "title": one.title, "path": str(one.path),
                               "text": one.path.read_text(encoding="utf-8")}))  # fmt: skip
    elif path:
        typer.echo(str(one.path))
    else:
        typer.echo(one.path.read_text(encoding="utf-8"), nl=False)
