"""
``tailkit report``: the store (and a plan, and executor traces) as one HTML page plus PNGs.
"""

from __future__ import annotations

import json
import os

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tailkit.cli._common import (
    DbOption,
    InputEdges,
    JsonOption,
    OutputEdges,
    buckets_of,
    echo,
    fail,
    flag_of,
    library_errors,
    new_console,
)
from tailkit.cli._progress import phase_lines
from tailkit.errors import OutOfMemoryError, QueryError
from tailkit.store import DEFAULT_DB, Store


if TYPE_CHECKING:
    from tailkit.report import ReportResult


def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for index.html and the PNGs.")],
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
    replay: Annotated[
        Path | None,
        typer.Option("--replay", help="tailkit replay --json output: the replay beside the plan."),
    ] = None,
    min_calls: Annotated[
        int,
        typer.Option(
            "--min-calls",
            help="Fewest calls a step's route needs in its bucket for the policy comparison "
            "(--plan).",
            min=2,
        ),
    ] = 200,  # tailkit.simulation.DEFAULT_MIN_CALLS, without importing numpy for --help
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress and no findings on stderr.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """
    Write an HTML report (figures embedded, opens offline) and its PNGs.

    Latency CCDFs with the lognormal fit, the p99/p50 bucket heatmap and
    tail growth, TTFT vs generation, fit diagnostics; with --plan the
    workflow DAG and the policy comparison; with --replay the replayed
    figures beside the simulated ones; with executor traces in the store,
    hedges, skipped actions and observed vs predicted p99.

    Prints the path of index.html on stdout, and the page's findings on
    stderr (progress too, on a terminal; --quiet for neither). With --json,
    prints the paths and the findings as one JSON document: index, figures,
    headline, calls, routes, heaviest_tail, left_out, plan, sections.

    Example:

        tailkit report -o reports/today/ --db calls.duckdb --plan plan.yaml
    """
    from tailkit.config import load_plan
    from tailkit.report import write_report_result

    names = tuple(n.strip() for n in by.split(",") if n.strip())
    if not names:
        fail(f"--by takes comma-separated column names, got {by!r}")
    buckets = buckets_of(input_edges, output_edges)
    say = None
    if not quiet and os.isatty(2):
        say = phase_lines(new_console(stderr=True))
    with library_errors("report"):
        try:
            loaded = load_plan(plan) if plan is not None else None
            found = None
            if races is not None:
                from tailkit.races import find_races

                found = find_races(*races)
            rehearsal = _replay_document(replay) if replay is not None else None
            with Store.open(db, read_only=True) as store:
                result = write_report_result(
                    store, out, plan=loaded, by=names, title=title, where=where,
                    max_routes=max_routes, races=found, replay=rehearsal, buckets=buckets,
                    min_calls=min_calls, progress=say,
                    field_name=lambda field: flag_of(field, "report"),
                )  # fmt: skip
        except QueryError as exc:
            if not where or isinstance(exc, OutOfMemoryError):
                raise
            fail(f"--where {where!r} is not a valid filter: {exc}")
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    if not quiet:
        typer.echo(summary(result), err=True, nl=False)
    echo(result.index)


def summary(result: ReportResult) -> str:
    """
    The findings as text: the page's headline line, then one indented line per finding.

    A finding may quote a route's name: each line is spelt `tailkit.text.printable`, so that
    a name cannot add a line or move the cursor.
    """
    from tailkit.text import printable

    lines = [result.headline, *(f"  {f}" for f in result.findings())]
    return "".join(f"{printable(line)}\n" for line in lines)


def _replay_document(path: Path) -> dict[str, Any]:
    """
    A ``tailkit replay --json`` document, or an error naming the file and the fix.
    """
    fix = "write it with: tailkit replay PLAN --json > replay.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(f"{path}: no such replay file; {fix}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"{path}: cannot read it as JSON ({exc}); {fix}")
    if not isinstance(document, dict) or not isinstance(document.get("sides"), list):
        fail(f"{path}: not a tailkit replay document (no 'sides' list); {fix}")
    return document
