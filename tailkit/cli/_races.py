"""
``tailkit races``: a harness's log and its tool's log in, the races between their clocks out.
"""

from __future__ import annotations

import json

from typing import TYPE_CHECKING, Annotated

import typer

from tailkit import text
from tailkit.cli._common import JsonOption, fail, library_errors, new_console, shown
from tailkit.ingest import ScanOptions


if TYPE_CHECKING:
    from tailkit.races import RaceReport, Spread


def _mapping(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            fail(f"{flag} takes FIELD=SOURCE_COLUMN, e.g. total_s=latency, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _s(value: float | None, digits: int = 3) -> str:
    return text.number(value, digits)


def _spread_row(name: str, spread: Spread, unit: str = "s") -> tuple[str, ...]:
    digits = 3 if unit == "s" else 2
    return (
        name,
        str(spread.n),
        *(_s(v, digits) for v in (spread.p50, spread.p90, spread.p99, spread.max)),
    )


def _render(report: RaceReport) -> None:
    from rich.table import Table

    console = new_console()
    for line in report.findings():
        console.print(shown(line), highlight=False)
    table = Table(title="distributions (seconds; budget share as a fraction)", title_justify="left")
    for column in ("quantity", "n", "p50", "p90", "p99", "max"):
        table.add_column(
            column, justify="left" if column == "quantity" else "right", overflow="fold"
        )
    table.add_row(*_spread_row("t-zero gap", report.t_zero_gap))
    table.add_row(*_spread_row("budget share eaten by the gap", report.budget_share, "share"))
    table.add_row(*_spread_row("budget the tool really had", report.budget_real))
    table.add_row(*_spread_row("budget the tool believed it had", report.budget_believed))
    console.print(table)
    if report.abandoned:
        late = Table(title="finished after the harness gave up", title_justify="left")
        for column in ("key", "step", "harness status", "late s", "side-effecting"):
            late.add_column(column, overflow="fold")
        for call in report.abandoned:
            late.add_row(
                shown(call.key), shown(call.step or "-"), shown(call.caller_status),
                _s(call.late_s), "yes" if call.side_effecting else "",
            )  # fmt: skip
        console.print(late)
    if report.duplicates:
        dup = Table(title="executed more than once", title_justify="left")
        for column in ("key", "step", "executions"):
            dup.add_column(column, overflow="fold")
        for d in report.duplicates:
            dup.add_row(shown(d.key), shown(d.step or "-"), str(d.executions))
        console.print(dup)
    if report.replans:
        plans = Table(title="re-planned steps", title_justify="left")
        for column in ("run", "step", "keys", "executed"):
            plans.add_column(column, overflow="fold")
        for r in report.replans:
            plans.add_row(shown(r.run_id or "-"), shown(r.step), str(r.keys), str(r.executed))
        console.print(plans)


def races(
    harness_log: Annotated[
        str, typer.Argument(metavar="HARNESS_LOG", help="The caller's log, e.g. the ledger.")
    ],
    tool_log: Annotated[
        str, typer.Argument(metavar="TOOL_LOG", help="The callee's log, e.g. the access log.")
    ],
    harness_map: Annotated[
        list[str] | None,
        typer.Option(
            "--harness-map",
            metavar="FIELD=COLUMN",
            help="Read FIELD from this column of the harness log (repeatable).",
        ),
    ] = None,
    tool_map: Annotated[
        list[str] | None,
        typer.Option(
            "--tool-map",
            metavar="FIELD=COLUMN",
            help="Read FIELD from this column of the tool log (repeatable).",
        ),
    ] = None,
    harness_unit: Annotated[
        str | None,
        typer.Option("--harness-unit", metavar="s|ms", help="Unit of the harness log's durations."),
    ] = None,
    tool_unit: Annotated[
        str | None,
        typer.Option("--tool-unit", metavar="s|ms", help="Unit of the tool log's durations."),
    ] = None,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            metavar="SECONDS",
            help="Seconds after a send in which a receive may pair by time.",
        ),
    ] = 1.0,
    side_effecting: Annotated[
        list[str] | None,
        typer.Option(
            "--side-effecting",
            metavar="STEP",
            help="A step whose calls are not idempotent (repeatable).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """
    Find the races between a harness and its tool: two logs of the same calls, two clocks.

    Pairs each harness attempt with the tool's record of it (idempotency key, then call id,
    then - reported as such - the nearest receive within --window seconds), estimates the clock
    skew, and reports the t-zero gap, calls the tool finished after the harness gave up,
    duplicate executions and re-plans, whether the tool honoured the deadline, and the budget it
    really had against the one it believed it had.

    Example:

        tailkit races ledger.jsonl access.jsonl --side-effecting pay --window 0.5
    """
    from tailkit.races import find_races

    with library_errors("races"):
        report = find_races(
            harness_log,
            tool_log,
            caller_options=ScanOptions(
                mapping=_mapping(harness_map, "--harness-map"), unit=harness_unit
            ),
            callee_options=ScanOptions(mapping=_mapping(tool_map, "--tool-map"), unit=tool_unit),
            window_s=window,
            side_effecting=side_effecting or (),
        )
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    _render(report)
