"""
``tailkit demo``: the whole loop on the bundled samples, result first, then the tail table.
"""

from __future__ import annotations

import json
import os
import time

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tailkit.cli._common import JsonOption, echo, library_errors, new_console, shown
from tailkit.cli._progress import ReplayProgress, phase_lines


if TYPE_CHECKING:
    from tailkit.tails import TailReport


OutOption = Annotated[
    Path, typer.Option("--out", "-o", metavar="DIR", help="Folder for everything it writes.")
]
RunsOption = Annotated[
    int, typer.Option(help="Workflow runs per side (without / with the plan).", min=1)
]
ScaleOption = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        metavar="FACTOR",
        help="Real seconds per profile second when replaying (default: chosen so the "
        "replay's timing error stays under 2% of the smallest cutoff).",
    ),
]
QuickOption = Annotated[
    bool, typer.Option("--quick", help="30 runs, a shorter search, time scale 0.05 (tests).")
]
SeedOption = Annotated[int, typer.Option(help="Seed of the calibration and the served latencies.")]
_SHORT_TABLE = 6  # routes in the terminal's tail table; the report has them all


def demo(
    out: OutOption = Path("demo"),
    runs: RunsOption = 200,
    time_scale: ScaleOption = None,
    quick: QuickOption = False,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print the check's verdict and the report's path only."),
    ] = False,
) -> None:
    """
    Run the whole tailkit loop on the bundled samples and check the plan's predictions.

    Ingests the samples (data_samples/ in a clone; from an installed package, its copy of
    the workflow and the llmperf data, and the production-like log generated under --out
    with seed 7), computes the tail table, calibrates the sample workflow, replays the
    calls it was calibrated on through the executor and the OpenAI adapter (tailkit
    replay: --runs without and with the plan), checks the plan against the with-plan
    ledger (tailkit check), and writes the report. Prints the result first: each side's miss
    rate, p50, p99 and extra attempts, predicted and observed, and the check's verdict; then
    a short tail table. Everything goes under --out (./tailkit.duckdb is not touched).

    Example:

        tailkit demo --out demo/ --runs 200
    """
    from tailkit.cli import _stats_view
    from tailkit.cli._replay import render_replay
    from tailkit.demo import run_demo

    console = new_console(stderr=as_json)
    started = time.perf_counter()
    tables: list[TailReport] = []
    say = phase_lines(console, enabled=not (as_json or quiet))
    with (
        library_errors("demo"),
        ReplayProgress(enabled=not (as_json or quiet) and os.isatty(2)) as bar,
    ):
        result = run_demo(
            out, runs=30 if quick else runs, time_scale=0.05 if quick else time_scale,
            calibrate_runs=4000 if quick else 20_000, replicates=20 if quick else None,
            seed=seed, progress=say, replay_progress=bar, show_table=tables.append,
        )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    check = result.check
    if quiet:
        echo(f"{check.summary()} (tailkit check, with-plan ledger); report: {result.report}")
        return
    render_replay(result.replay, console)
    counts = check.counts()
    console.print(
        f"tailkit check on the with-plan ledger: [bold]{shown(check.verdict)}[/bold] "
        f"({shown(', '.join(f'{n} {v}' for v, n in counts.items() if n))}); on the "
        f"without-plan ledger: {shown(result.check_without.verdict)} (those runs did not "
        "follow the plan)"
    )
    for line in check.drifted:
        console.print(f"  drifted: {shown(line.scope)} {shown(line.figure)}: {shown(line.reason)}")
    if tables:
        console.print(
            f"\nthe tail per route (the {_SHORT_TABLE} busiest; all of them in the report)"
        )
        _stats_view.render_table(tables[0], ["provider", "model"], console, limit=_SHORT_TABLE)
    console.print(f"plan: {shown(result.out_dir / 'plan.yaml')}")
    ledgers = result.replay.sides[0].ledger, result.replay.sides[1].ledger
    console.print(f"ledgers: {shown(ledgers[0])}, {shown(ledgers[1])}")
    console.print(f"report: {shown(result.report)}")
    console.print(f"done in {time.perf_counter() - started:.0f} s")
