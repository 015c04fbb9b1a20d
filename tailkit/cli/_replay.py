"""
``tailkit replay``: rehearse a plan against the calls it was calibrated on, and show the result.
"""

from __future__ import annotations

import json
import math
import os

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tailkit import text
from tailkit.cli._common import (
    DbOption,
    InputEdges,
    JsonOption,
    OutputEdges,
    buckets_of,
    echo,
    library_errors,
    new_console,
    said,
    shown,
)
from tailkit.cli._progress import ReplayProgress
from tailkit.store import DEFAULT_DB


if TYPE_CHECKING:
    from rich.console import Console

    from tailkit.replay import ReplayResult, ReplaySide
    from tailkit.replay.lowlevel import RouteShareLine


def _pct(value: float) -> str:
    # one decimal always: the predicted and observed columns line up
    return f"{value:.1%}" if math.isfinite(value) else text.number(value)


def _secs(value: float) -> str:
    return text.number(value, 1)


def _shares(side: ReplaySide) -> tuple[RouteShareLine, ...]:
    # a side as a report reads it back from JSON may predate live plans: no shares
    return tuple(getattr(side, "shares", ()))


def render_replay(result: ReplayResult, console: Console) -> None:
    """
    The comparison table (predicted, observed with its 95 % interval, per side), then notes.
    """
    from rich.table import Table

    deadline = result.plan.deadline_s
    table = Table(
        title=f"{shown(result.plan.workflow)}: replayed {result.sides[0].runs} runs per side "
        f"against the simulation (deadline {deadline:g} s, profile seconds)"
    )
    for name, justify in (("side", "left"), ("figure", "left"), ("predicted", "right"),
                          ("observed (95% interval)", "right"), ("", "left")):  # fmt: skip
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    names = {"miss_rate": "miss rate", "p50_s": "p50 s", "p99_s": "p99 s",
             "extra_attempts": "extra attempts"}  # fmt: skip
    for side in result.sides:
        for i, (key, title) in enumerate(names.items()):
            show = _pct if key in ("miss_rate", "extra_attempts") else _secs
            seen = side.observed[key]
            observed = f"{show(seen.value)} ({show(seen.low)}–{show(seen.high)})"
            if math.isinf(seen.value):  # hidden by runs the deadline cut
                observed = f"more than {show(seen.low)}"
            mark = "agrees" if side.agrees[key] else "[red]differs[/red]"
            if key in side.borderline:
                mark = "[yellow]borderline[/yellow]"
            table.add_row(shown(side.label) if i == 0 else "", title, show(side.predicted[key]),
                          observed, mark)  # fmt: skip
        for line in _shares(side):
            seen = line.observed
            mark = "agrees" if line.agrees else "[red]differs[/red]"
            if line.borderline:
                mark = "[yellow]borderline[/yellow]"
            observed = f"{_pct(seen.value)} ({_pct(seen.low)}–{_pct(seen.high)})"
            title = shown(f"{line.step}: first to {line.route}")
            table.add_row("", title, _pct(line.predicted), observed, mark)
        table.add_section()
    console.print(table)
    verdict = {"agrees": "[green]agrees[/green]", "differs": "[red]differs[/red]",
               "can't tell": "[yellow]can't tell[/yellow]"}[result.verdict]  # fmt: skip
    if any(side.borderline or any(x.borderline for x in _shares(side)) for side in result.sides):
        console.print(
            "borderline: outside its own 95% interval, inside the one that holds for all the "
            "figures together (one replay in three shows such a figure by chance)"
        )
    console.print(verdict_line(result, verdict))
    console.print(shown(result.fidelity.describe()))
    for note in result.notes:
        console.print(f"note: {shown(said(note, 'replay'))}")


def verdict_line(result: ReplayResult, verdict: str | None = None) -> str:
    """
    The replay's verdict and whether the plan helps, by a test over the sides, in one line.

    ``verdict``: the verdict as rich markup draws it (``None``: as the result says it, for a
    plain line); the sentence after it is escaped for markup then, spelt `printable` else.
    """
    sentence = result.effect.sentence()
    sentence = text.printable(sentence) if verdict is None else shown(sentence)
    return f"replay {verdict or result.verdict} with the simulation; {sentence}"


MAX_REPLAY_RUNS = 100_000
"""The most runs per side `tailkit replay` takes: each is a real workflow run, its trace kept."""


def replay(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="A calibrated plan (YAML).")],
    db: DbOption = DEFAULT_DB,
    runs: Annotated[
        int,
        typer.Option(
            "--runs",
            help="Workflow runs per side, at most 100,000 (each is a real run through a local "
            "server, and every run's trace is kept).",
            min=1,
            max=MAX_REPLAY_RUNS,
        ),
    ] = 400,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            metavar="FACTOR",
            help="Real seconds per profile second (default: chosen so the replay's timing "
            "error stays under 2% of the smallest cutoff).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of predictions and draws.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Folder for ledger-without-plan.jsonl, ledger-with-plan.jsonl, the outcome "
            "tables and the server's access log (default: a temporary folder).",
        ),
    ] = None,
    min_calls: Annotated[
        int, typer.Option("--min-calls", help="Fewest calls per step route and bucket.", min=1)
    ] = 200,
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    as_json: JsonOption = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print the verdict's line only, no table or progress."),
    ] = False,
) -> None:
    """
    Rehearse a plan against the calls it was calibrated on, and compare with its predictions.

    Serves every step's routes from the store's measured calls in the step's token bucket
    (what calibrate simulated) on 127.0.0.1, in a process of its own, and runs the workflow
    --runs times without cutoffs and --runs times with the plan through the executor and the
    OpenAI adapter. Each side's miss rate, p50, p99 and extra attempts are shown predicted
    and observed (with a 95% interval); for a plan that routes live, also each live step's
    share of first attempts per candidate route, the simulation played in batches of the
    rehearsal's runs in flight. The replay measures its own timing error and slows
    down, or says "can't tell", when the machine is too busy. Exit 0 when both sides agree
    with their predictions, 1 when they differ or it can't tell.

    Example:

        tailkit replay plan.yaml --db tailkit.duckdb --runs 400 --out replay/
    """
    from tailkit.config import load_plan
    from tailkit.replay import replay as run_replay
    from tailkit.store import Store

    buckets = buckets_of(input_edges, output_edges)
    with library_errors("replay"):
        plan = load_plan(plan_path)
        with (
            Store.open(db, read_only=True) as store,
            ReplayProgress(enabled=not (as_json or quiet) and os.isatty(2)) as bar,
        ):
            result = run_replay(
                store, plan, runs=runs, time_scale=time_scale, seed=seed, out_dir=out,
                buckets=buckets, min_calls=min_calls, progress=bar,
            )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    elif quiet:
        typer.echo(verdict_line(result))
    else:
        render_replay(result, new_console())
        echo(f"ledgers: {result.sides[0].ledger} and {result.sides[1].ledger}")
    if result.verdict != "agrees":
        raise typer.Exit(1)
