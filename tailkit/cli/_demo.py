"""
``tailkit demo``: the whole loop on the bundled samples, with progress and a before/after table.
"""

from __future__ import annotations

import os
import time

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tailkit.cli._common import fail
from tailkit.errors import TailkitError


if TYPE_CHECKING:
    from tailkit._stats import TailReport


OutOption = Annotated[Path, typer.Option("--out", "-o", help="Folder for everything it writes.")]
RunsOption = Annotated[
    int, typer.Option(help="Workflow runs per side (without / with the plan).", min=1)
]
ScaleOption = Annotated[
    float, typer.Option("--time-scale", help="Real seconds per profile second when serving.")
]
QuickOption = Annotated[bool, typer.Option("--quick", help="30 runs and a shorter search (tests).")]
SeedOption = Annotated[int, typer.Option(help="Seed of the calibration and the served latencies.")]


def demo(
    out: OutOption = Path("demo"),
    runs: RunsOption = 200,
    time_scale: ScaleOption = 0.05,
    quick: QuickOption = False,
    seed: SeedOption = 0,
) -> None:
    """
    Run the whole tailkit loop on the bundled samples and show what the plan changes.

    Ingests data_samples/, prints the tail table, calibrates data_samples/workflow.yaml,
    replays the measured tails with `tailkit serve` on 127.0.0.1, runs the workflow without
    and with the plan through the executor and the OpenAI adapter, ingests the ledger back,
    writes the report, and prints before/after p50, p99 and miss rate. Everything goes under
    --out (its own store: ./tailkit.duckdb is not touched).

    Example:

        tailkit demo --out demo/ --runs 200
    """
    from rich.console import Console
    from rich.table import Table

    from tailkit.cli import _stats_view
    from tailkit.demo import run_demo
    from tailkit.demo._demo import side_rows

    console = Console(width=None if os.isatty(1) else 160)
    started = time.perf_counter()

    def say(message: str) -> None:
        elapsed = time.perf_counter() - started
        console.print(f"[bold]>[/bold] {message}  [dim]({elapsed:.0f} s)[/dim]")

    def show(tails: TailReport) -> None:
        _stats_view.render_table(tails, ["provider", "model"], console)

    try:
        result = run_demo(
            out, runs=30 if quick else runs, time_scale=time_scale,
            calibrate_runs=4000 if quick else 20_000, seed=seed, progress=say, show_table=show,
        )  # fmt: skip
    except TailkitError as exc:
        fail(str(exc))
    table = Table(title=f"the sample workflow, {result.before.runs} runs per side "
                        f"(deadline {result.plan.deadline_s:g} s, profile seconds)")  # fmt: skip
    for name in ("", "miss rate", "p50 s", "p99 s", "extra attempts"):
        table.add_column(name, justify="left" if not name else "right")
    for row in side_rows(result):
        table.add_row(
            str(row["side"]), f"{row['miss_rate']:.1%}", f"{row['p50_s']:.1f}",
            f"{row['p99_s']:.1f}", f"{row['extra_attempts']:.1%}",
        )  # fmt: skip
    console.print(table)
    console.print(f"plan: {result.out_dir / 'plan.yaml'}")
    console.print(f"report: {result.report}")
    console.print(f"done in {time.perf_counter() - started:.0f} s")
