"""
Options and helpers every command shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tailkit.record import Buckets


DbOption = Annotated[Path, typer.Option("--db", help="The DuckDB store file.", show_default=True)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
InputEdges = Annotated[
    str | None,
    typer.Option("--input-edges", help="Input-token bucket edges, e.g. 0,1k,4k,16k,64k."),
]
OutputEdges = Annotated[
    str | None,
    typer.Option("--output-edges", help="Output-token bucket edges, e.g. 0,64,256,600,1200,2400."),
]
MapOption = Annotated[
    list[str] | None,
    typer.Option("--map", help="FIELD=SOURCE_COLUMN, e.g. total_s=latency (repeatable)."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="FIELD=VALUE for every row, e.g. provider=openai."),
]
UnitOption = Annotated[
    str | None, typer.Option("--unit", help="Unit of duration columns: s or ms.")
]


def fail(message: str) -> NoReturn:
    """
    Print ``Error: message`` on stderr and exit 1.
    """
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(1)


def buckets_of(input_edges: str | None, output_edges: str | None) -> Buckets:
    """
    Bucket edges from ``--input-edges`` / ``--output-edges`` (defaults where not given).
    """
    try:
        default = Buckets()
        return Buckets(
            Buckets.parse_edges(input_edges) if input_edges else default.input_edges,
            Buckets.parse_edges(output_edges) if output_edges else default.output_edges,
        )
    except ValueError as exc:
        fail(str(exc))
