"""
``tailkit report``: the store (and a plan, and executor traces) as one HTML page plus PNGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailkit.cli._common import DbOption, fail
from tailkit.errors import QueryError, TailkitError
from tailkit.store import DEFAULT_DB, Store


def report(
    out: Annotated[Path, typer.Option("--out", help="Folder for index.html and the PNGs.")],
    db: DbOption = DEFAULT_DB,
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="A calibrated plan: adds the workflow section."),
    ] = None,
    by: Annotated[
        str, typer.Option(help="Call-record columns that make a route, comma-separated.")
    ] = "provider,model",
    where: Annotated[
        str | None, typer.Option(help="SQL filter on call-record columns (tail sections).")
    ] = None,
    title: Annotated[str, typer.Option(help="Title of the page.")] = "tailkit report",
    max_routes: Annotated[
        int, typer.Option("--max-routes", help="Biggest routes shown per figure.")
    ] = 8,
    races: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--races", help="HARNESS_LOG TOOL_LOG: add what tailkit races finds."),
    ] = None,
) -> None:
    """
    Write an HTML report (figures embedded, opens offline) and its PNGs; print its path.

    Latency CCDFs with the lognormal fit, the p99/p50 bucket heatmap and tail growth, TTFT vs
    generation, fit diagnostics; with --plan the workflow DAG and the policy comparison; with
    executor traces in the store, hedges, skipped actions and observed vs predicted p99.

    Example:

        tailkit report --out reports/today/ --db calls.duckdb --plan plan.yaml
    """
    from tailkit.config import load_plan
    from tailkit.report import write_report

    names = tuple(n.strip() for n in by.split(",") if n.strip())
    if not names:
        fail(f"--by takes comma-separated column names, got {by!r}")
    try:
        loaded = load_plan(plan) if plan is not None else None
        found = None
        if races is not None:
            from tailkit.races import find_races

            found = find_races(*races)
        with Store.open(db, read_only=True) as store:
            index = write_report(
                store, out, plan=loaded, by=names, title=title, where=where,
                max_routes=max_routes, races=found,
            )  # fmt: skip
    except QueryError as exc:
        fail(f"--where {where!r} is not a valid filter: {exc}" if where else str(exc))
    except TailkitError as exc:
        fail(str(exc))
    typer.echo(str(index))
