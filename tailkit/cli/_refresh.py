"""
``tailkit refresh``: the drift loop's turn: check the running plan, recalibrate, replace it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tailkit import text
from tailkit.cli._common import (
    READ_MEMORY_LIMIT,
    DbOption,
    InputEdges,
    JsonOption,
    MapOption,
    OutputEdges,
    ReadMemoryLimitOption,
    SetOption,
    SetOverOption,
    StatusMapOption,
    UnitOption,
    buckets_of,
    flag_of,
    library_errors,
    new_console,
    scan_options,
    shown,
)
from tailkit.cli._progress import SearchProgress
from tailkit.store import DEFAULT_DB


if TYPE_CHECKING:
    from rich.console import Console

    from tailkit.refresh import Refresh

BAD_INPUT = 2
"""Exit code for a plan, workflow, ledger or store that cannot be read (as for check)."""

_FIGURES = {
    "p50_s": "p50",
    "p99_s": "p99",
    "miss_rate": "miss rate",
    "extra_attempts": "extra attempts",
    "hedge_rate": "hedge rate",
    "route": "first route",
    "signal": "watches",
    "cutoff_s": "cutoff",
    "on_cutoff": "action",
    "hedge_route": "hedge route",
    "live": "live routing",
}


def _value(figure: str, value: Any) -> str:
    """
    A figure of either plan as the table shows it (``-``: none).
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return shown(value)
    if figure.endswith("_s"):
        return f"{text.number(value, 2)} s"
    if figure in ("miss_rate", "hedge_rate"):
        return f"{value:.2%}"
    return f"{value:.1%}" if figure == "extra_attempts" else text.number(value, 3)


def _step_rows(figures: dict[str, Any] | None) -> dict[str, str]:
    """
    A step's figures as the table's rows: its first route, cutoff, action, then predictions.
    """
    if figures is None:
        return {}
    cutoff = figures["cutoff_s"]
    action = figures["on_cutoff"]
    if figures["hedge_route"] is not None:
        action = f"{action} on {figures['hedge_route']}"
    return {
        "first route": _value("route", figures["route"]),
        "cutoff": "-" if cutoff is None else f"{figures['signal']} at {_value('cutoff_s', cutoff)}",
        "action": shown(action),
        "live routing": _value("live", figures["live"]),
        **{_FIGURES[f]: _value(f, figures[f]) for f in ("p50_s", "p99_s", "hedge_rate")},
    }


def _name(field: str) -> str:
    return flag_of(field, "refresh")


def render(result: Refresh, console: Console) -> None:
    """
    The drifted lines, the ingest, the old plan beside the new one, then what was done.

    Names from the plan and the ledgers are data: markup in them is escaped and control
    characters spelt out (`shown`, `printable`).
    """
    from tailkit.text import printable

    _drift_lines(result, console)
    if result.ingested is not None:
        t = result.ingested.totals()
        where = " into a copy of the store in memory (dry run)" if result.dry_run else ""
        console.print(
            f"ingested {len(result.ingested.files)} ledger file(s){where}: "
            f"{t['rows_in']:,} rows in = {t['stored']:,} stored + {t['rejected']:,} rejected + "
            f"{t['duplicates']:,} duplicates skipped",
            highlight=False,
        )
    if result.since is not None:
        console.print(
            f"recalibrated on the calls since "
            f"{result.since.isoformat(timespec='seconds').replace('+00:00', 'Z')}",
            highlight=False,
        )
    if result.new is not None:
        _plans_table(result, console)
    for warning in result.warnings(_name):
        console.print(printable(f"warning {warning}"), highlight=False, markup=False)
    console.print(printable(result.summary(_name)), highlight=False, markup=False)


def _drift_lines(result: Refresh, console: Console) -> None:
    """
    The check's verdict, then each drifted line: predicted, observed, the kinds of cause.
    """
    from tailkit.check import WORKFLOW
    from tailkit.check.lowlevel import figure_text, observed_text
    from tailkit.text import printable

    report = result.check
    console.print(f"check: {report.summary()}", highlight=False, markup=False)
    for line in report.drifted:
        where = "workflow" if line.scope == WORKFLOW else f"step {line.scope}"
        figure = _FIGURES.get(line.figure, line.figure)
        kinds = ", ".join(dict.fromkeys(c.kind for c in line.causes))
        console.print(
            printable(
                f"  {where} {figure}: predicted {figure_text(line.figure, line.predicted)}, "
                f"observed {observed_text(line.figure, line.observed)}"
                + (f" ({kinds})" if kinds else "")
            ),
            highlight=False,
            markup=False,
        )


def _plans_table(result: Refresh, console: Console) -> None:
    """
    The running plan's figures beside the recalibrated one's, then why a first route moved.
    """
    from rich.table import Table

    from tailkit.text import printable

    table = Table(title="the running plan beside the recalibrated one", title_justify="left")
    for column in ("", "figure", "running", "recalibrated"):
        table.add_column(column, overflow="fold")
    plans = result.as_dict()["workflow"]
    for figure in plans["old"]:
        table.add_row(
            "workflow" if figure == "p50_s" else "",
            _FIGURES[figure],
            _value(figure, plans["old"][figure]),
            _value(figure, (plans["new"] or {}).get(figure)),
        )
    rows = result.steps()
    live = any(row["old"]["live"] or (row["new"] or {}).get("live") for row in rows)
    for row in rows:
        table.add_section()
        before, after = _step_rows(row["old"]), _step_rows(row["new"])
        for i, label in enumerate(before):
            if label == "live routing" and not live:
                continue
            table.add_row(
                shown(row["step"]) if i == 0 else "",
                label,
                before[label],
                after.get(label, "-"),
                style="bold" if after and after.get(label) != before[label] else None,
            )
    console.print(table)
    choices = {} if result.calibration is None else result.calibration.route_choices
    for row in rows:
        if "route" in row["changed"] and row["step"] in choices:
            why = choices[row["step"]].sentence()
            console.print(
                printable(f"first route of {row['step']}: {why}"), highlight=False, markup=False
            )


def refresh(
    plan: Annotated[
        Path, typer.Argument(metavar="PLAN", help="The running plan (YAML): replaced on a drift.")
    ],
    ledgers: Annotated[
        list[str],
        typer.Argument(metavar="LEDGERS", help="The ledger(s) of the running plan's runs."),
    ],
    workflow: Annotated[
        Path,
        typer.Option(
            "--workflow",
            "-w",
            metavar="FILE",
            help="The workflow file the plan was calibrated from.",
        ),
    ],
    db: DbOption = DEFAULT_DB,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            metavar="DURATION|ISO",
            help="Recalibrate on the calls since then: a duration back from the newest call in "
            "the store, ledgers included (6h, 2d, 90m), or an ISO-8601 instant; all: every call.",
        ),
    ] = "6h",
    force: Annotated[
        bool, typer.Option("--force", help="Recalibrate even when nothing drifted.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Write nothing: ingest into a copy of the store in memory, report what would "
            "be written (same exit code).",
        ),
    ] = False,
    backup: Annotated[
        Path | None,
        typer.Option(
            "--backup", metavar="FILE", help="Where to keep the old plan (default: PLAN.prev)."
        ),
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="NAME",
            help="The ledgers' format: trace (the executor's ledger), auto, or a format name.",
        ),
    ] = "trace",
    map_: MapOption = None,
    set_: SetOption = None,
    set_over: SetOverOption = None,
    status_map: StatusMapOption = None,
    unit: UnitOption = None,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            metavar="FRACTION",
            help="The check's relative difference too small to drift.",
        ),
    ] = 0.15,
    min_runs: Annotated[
        int,
        typer.Option("--min-runs", help="The check's fewest runs for a verdict.", min=1),
    ] = 30,
    level: Annotated[
        float,
        typer.Option(
            "--level", metavar="FRACTION", help="The check's family level (as for check)."
        ),
    ] = 0.95,
    runs: Annotated[
        int, typer.Option("--runs", help="Simulated runs per candidate (as for calibrate).", min=1)
    ] = 20_000,
    check_runs: Annotated[
        int, typer.Option("--check-runs", help="Fresh runs that check the new plan.", min=1)
    ] = 100_000,
    seed: Annotated[int, typer.Option("--seed", help="The recalibration's seed.")] = 0,
    replicates: Annotated[
        int,
        typer.Option("--replicates", help="Bootstrap replicates behind the new intervals.", min=0),
    ] = 100,
    min_calls: Annotated[
        int,
        typer.Option(
            "--min-calls", help="Fewest recent calls a step's route needs in its bucket.", min=2
        ),
    ] = 200,
    latency: Annotated[
        str,
        typer.Option(
            "--latency",
            metavar="empirical|lognormal",
            help="empirical: resample the recent calls; lognormal: each route's fit.",
        ),
    ] = "empirical",
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    memory_limit: ReadMemoryLimitOption = READ_MEMORY_LIMIT,
    as_json: JsonOption = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the last line only.")] = False,
) -> None:
    """
    Check the running plan against its ledgers; if it drifted, recalibrate and replace it.

    The drift loop in one command, to schedule (cron, a systemd timer). It checks PLAN against
    the ledgers of its runs as tailkit check does. When a line drifted (or with --force) it
    ingests the ledgers into the store (each call once: the same ledger every time adds only
    its new lines), calibrates the workflow again on the recent calls (--since, 6 hours back
    from the newest call by default) with the running plan's deadline, hedge budget and
    routing (--live when the plan routes live), and writes the new plan over PLAN in one step,
    the old one kept as PLAN.prev (--backup), only when it differs. A service that follows the
    file (tailkit.executor.follow_plan) runs the new plan from its next poll on. Prints the
    drifted lines and the old plan's figures beside the new one's. Exit code 0 nothing drifted
    (the plan stays), 1 a new plan written (with --dry-run: would be), 2 bad input, 3 it
    drifted but the recalibration could not run (too few recent calls: how many and how many
    it needs), the plan stays.

    Example:

        tailkit refresh plan.yaml ledger.jsonl --workflow workflow.yaml --db tailkit.duckdb

        tailkit refresh plan.yaml 'ledgers/*.jsonl' -w workflow.yaml --since 12h --dry-run
    """
    from tailkit.calibration import parse_since
    from tailkit.refresh import refresh as run_refresh

    try:
        options = scan_options(
            map_=map_, set_=set_, set_over=set_over, status_map=status_map, unit=unit
        )
        buckets = buckets_of(input_edges, output_edges)
    except typer.Exit:
        raise typer.Exit(BAD_INPUT) from None  # printed; a bad option is bad input (exit 2)
    with (
        library_errors("refresh", code=BAD_INPUT),
        SearchProgress(enabled=not (as_json or quiet)) as bar,
    ):
        recent = None if since.strip().lower() == "all" else parse_since(since)
        result = run_refresh(
            plan, workflow, ledgers, db=db, since=recent, force=force, dry_run=dry_run,
            backup=backup, format=format, options=options, tolerance=tolerance,
            min_runs=min_runs, level=level, runs=runs, check_runs=check_runs, seed=seed,
            replicates=replicates, min_calls=min_calls, latency=latency, buckets=buckets,
            memory_limit=memory_limit, progress=bar.update,
        )  # fmt: skip
    if as_json:
        typer.echo(result.to_json(_name))
    elif quiet:
        typer.echo(text.printable(result.summary(_name)))
    else:
        render(result, new_console())
    raise typer.Exit(result.exit_code)
