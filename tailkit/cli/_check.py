"""
``tailkit check``: a calibrated plan and its production ledgers in, a verdict per prediction out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tailkit.cli._common import (
    JsonOption,
    MapOption,
    SetOption,
    SetOverOption,
    StatusMapOption,
    UnitOption,
    library_errors,
    new_console,
    said,
    scan_options,
    shown,
)


if TYPE_CHECKING:
    from rich.console import Console

    from tailkit.check import CheckLine, CheckReport

BAD_INPUT = 2
"""Exit code for an unreadable plan or ledger (1 is a drift, 0 holds)."""

_FIGURES = {
    "p50_s": "p50",
    "p99_s": "p99",
    "miss_rate": "miss rate",
    "extra_attempts": "extra attempts",
    "hedge_rate": "hedge rate",
    "explore_share": "explored",
    "off_bounds": "live cutoffs off bounds",
    "off_candidates": "first attempts off candidates",
}


def _figure(line: CheckLine) -> str:
    """
    What a line's figure is called (a route share names its route: data, not markup).
    """
    if line.route is not None:
        return f"first to {line.route}"
    return _FIGURES.get(line.figure, line.figure)


_LIVE_FINDINGS = ("off_bounds", "off_candidates")


def _why(line: CheckLine) -> str:
    from tailkit.check import DRIFTED, HOLDS

    if line.verdict == DRIFTED:
        return shown(", ".join(dict.fromkeys(c.kind for c in line.causes)))
    if line.verdict == HOLDS:
        return ""
    return shown(line.reason)


def render(report: CheckReport, console: Console) -> None:
    """
    The lines as a table, then each drifted line's causes, then the verdict.

    Names from the plan and the ledgers (the workflow, steps, routes) are data: markup in them
    is escaped and control characters spelt out (`shown`, `printable`).
    """
    from rich.table import Table

    from tailkit.check import DRIFTED, WORKFLOW
    from tailkit.check.lowlevel import figure_text, observed_text
    from tailkit.text import printable

    obs = report.observation
    table = Table(
        title=f"plan {shown(obs.workflow)} against {obs.runs:,} runs (deadline "
        f"{obs.deadline_s:g} s; observed with {obs.level:.0%} intervals)",
        title_justify="left",
    )
    for name in ("", "figure", "predicted", f"observed [{obs.level:.0%}]", "n", "verdict", "why"):
        table.add_column(name, justify="right" if name in ("predicted", "n") else "left")
    scope = None
    for line in report.lines:
        style = "bold red" if line.verdict == DRIFTED else None
        label = ""
        if line.scope != scope:
            if scope is not None:
                table.add_section()
            scope = line.scope
            label = shown(scope)
        table.add_row(
            label,
            shown(_figure(line)),
            figure_text(line.figure, line.predicted),
            observed_text(line.figure, line.observed),
            f"{line.observed.n:,}",
            line.verdict,
            _why(line),
            style=style,
        )
    console.print(table)
    for line in report.drifted:
        where = "workflow" if line.scope == WORKFLOW else f"step {line.scope}"
        console.print(
            printable(f"{where} {_figure(line)}: {line.reason}"),
            highlight=False,
            markup=False,
        )
        for cause in line.causes:
            console.print(printable(f"  - {cause}"), highlight=False, markup=False)
    for warning in obs.warnings:
        console.print(printable(f"warning {warning}"), highlight=False, markup=False)
    for note in obs.notes:
        console.print(printable(f"note {said(note, 'check')}"), highlight=False, markup=False)
    if report.judged:
        console.print(
            f"each of the {report.judged} lines that can tell judged at {report.line_level:.2%}"
            f" (observed and predicted intervals apart): a plan that still holds reads drifted "
            f"at most {1 - report.level:.0%} of the time",
            highlight=False,
        )
    if any(line.figure in _LIVE_FINDINGS for line in report.lines):
        console.print(
            "live cutoffs off bounds and first attempts off candidates are findings, not "
            "estimates: one such line is an executor that does not follow the plan",
            highlight=False,
        )
    console.print(report.summary(), highlight=False)


def check(
    plan: Annotated[str, typer.Argument(metavar="PLAN", help="The calibrated plan (YAML).")],
    ledgers: Annotated[
        list[str],
        typer.Argument(
            metavar="LEDGERS", help="The executor's ledger(s), or any log ingest reads."
        ),
    ],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="NAME",
            help="auto, or a format name (tailkit ingest --list-formats).",
        ),
    ] = "auto",
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
            help="Relative difference too small to drift, whatever the intervals.",
        ),
    ] = 0.15,
    min_runs: Annotated[
        int, typer.Option("--min-runs", help="Fewer runs (or step calls): can't tell.", min=1)
    ] = 30,
    level: Annotated[
        float,
        typer.Option(
            "--level",
            metavar="FRACTION",
            help="Family level: a plan that holds reads drifted at most 1 - this of the time.",
        ),
    ] = 0.95,
    as_json: JsonOption = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print the verdict line only, no table.")
    ] = False,
) -> None:
    """
    Check a calibrated plan's predictions against the ledgers of its production runs.

    For the workflow (p50, p99, miss rate, extra attempts per first attempt) and each step (p50,
    p99, hedge rate), the observed figure with its 95% interval (--level) next to the plan's
    prediction. For a step the plan routes live, its decisions too: the share of first attempts
    that explored against 1 / explore_every, the share per candidate route (can't tell: the plan
    predicts none), and as findings any live cutoff outside the plan's cutoff_bounds_s or first
    attempt on a route that is not a candidate (one drifts: the executor does not follow its
    plan). A line drifted only when the observed interval and the plan's own interval are apart,
    each read at 1 - (1 - level) / (2 m) for the m lines that can tell, and the values differ by
    more than --tolerance: a plan that still holds reads drifted at most 5% of the time (1 -
    --level), one error rate for the one exit code. Without an interval in the plan, its
    prediction is judged as an estimate from its basis. A drifted line names its likely causes:
    a slower route, an outage, failed calls, budget denials, throttle refusals (and 429s), a
    thin basis. Too few runs: can't tell. Failed runs count as "more than" where they were last
    seen, never as fast. Exit code 0 when every line holds or can't tell, 1 when any drifted, 2
    on bad input. The ledgers are read as ingest reads logs: --map, --set, --set-over,
    --status-map and --unit mean the same. A ledger whose attempts ran on routes the plan does
    not have is refused (exit 2); runs whose times cannot be true, with a line ingest refused,
    or of another workflow are left out and named, never counted as misses.

    Example:

        tailkit check plan.yaml ledger.jsonl

        tailkit check plan.yaml logs/ --json > check.json || alert "plan drifted"
    """
    from tailkit.check import check_plan

    try:
        options = scan_options(
            map_=map_, set_=set_, set_over=set_over, status_map=status_map, unit=unit
        )
    except typer.Exit:
        # scan_options printed the error; a bad option is bad input here (exit 2, not 1).
        raise typer.Exit(BAD_INPUT) from None
    with library_errors("check", code=BAD_INPUT):
        report = check_plan(
            plan,
            ledgers,
            format=format,
            options=options,
            tolerance=tolerance,
            min_runs=min_runs,
            level=level,
        )
    if as_json:
        typer.echo(report.to_json())
    elif quiet:
        typer.echo(report.summary())
    else:
        render(report, new_console())  # the table only: --json and --quiet print plain text
    raise typer.Exit(report.exit_code)
