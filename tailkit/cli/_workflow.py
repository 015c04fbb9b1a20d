"""
``tailkit calibrate`` and ``tailkit simulate``: a workflow file in, a plan and its numbers out.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tailkit import text
from tailkit.cli._common import (
    READ_MEMORY_LIMIT,
    DbOption,
    InputEdges,
    JsonOption,
    OutputEdges,
    ReadMemoryLimitOption,
    buckets_of,
    echo,
    library_errors,
    new_console,
    said,
    shown,
)
from tailkit.cli._progress import SearchProgress
from tailkit.store import DEFAULT_DB, Store


if TYPE_CHECKING:
    from rich.console import Console

    from tailkit.calibration import Calibration, Prediction
    from tailkit.config import Plan
    from tailkit.simulation import SimResult


RunsOption = Annotated[int, typer.Option("--runs", help="Simulated workflow runs.", min=1)]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed: the same seed, the same numbers.")]
Latency = Annotated[
    str,
    typer.Option(
        "--latency",
        metavar="empirical|lognormal",
        help="empirical: resample the measured calls; lognormal: each route's fitted lognormal.",
    ),
]
MinCalls = Annotated[
    int,
    typer.Option("--min-calls", help="Fewest calls a step's route needs in its bucket.", min=2),
]


def _seconds(value: float | None) -> str:
    """
    Seconds with one decimal, as the tables print them (``∞`` unbounded, ``-`` none).
    """
    return text.number(value, 1)


BudgetOption = Annotated[
    float | None,
    typer.Option(
        metavar="FRACTION", help="Extra attempts per first attempt allowed (default: the file's)."
    ),
]
DeadlineOption = Annotated[
    float | None,
    typer.Option(metavar="SECONDS", help="End-to-end deadline in seconds (default: the file's)."),
]


def calibrate(
    workflow: Annotated[
        Path, typer.Argument(metavar="WORKFLOW", help="The workflow (or plan) YAML file.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="Where to write the plan.")
    ],
    db: DbOption = DEFAULT_DB,
    budget: BudgetOption = None,
    deadline: DeadlineOption = None,
    runs: RunsOption = 20_000,
    check_runs: Annotated[
        int, typer.Option("--check-runs", help="Fresh runs that check the plan found.", min=1)
    ] = 100_000,
    seed: SeedOption = 0,
    replicates: Annotated[
        int,
        typer.Option(
            "--replicates",
            help="Bootstrap replicates of the measured calls behind the predictions' 95% "
            "intervals (0: no intervals).",
            min=0,
        ),
    ] = 100,
    min_calls: MinCalls = 200,
    latency: Latency = "empirical",
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    as_json: JsonOption = False,
    memory_limit: ReadMemoryLimitOption = READ_MEMORY_LIMIT,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print nothing but errors and warnings (stderr)."),
    ] = False,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Write a live block on each step with candidates or a cutoff: the executor "
            "then sends each first attempt to the candidate with the best recent latency and "
            "lets the cutoff follow that route's recent quantile, within the bounds written.",
        ),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION|ISO",
            help="Calibrate on recent calls only: a duration back from the newest call in the "
            "store (6h, 2d, 90m) or an ISO-8601 instant (UTC if no zone).",
        ),
    ] = None,
) -> None:
    """
    Choose each step's cutoff and action so the workflow keeps its deadline; write the plan.

    Reads each step's route latency from the store (in the bucket of its expected tokens),
    searches every step's signal (total or TTFT), cutoff and action (hedge, retry, downgrade,
    fail, wait) by simulating the whole workflow, within the hedge budget, and writes the
    plan with its predictions, each with a 95% interval that includes the uncertainty of the
    measured calls. A step that lists candidates also gets its first route chosen among them,
    and its basis says why. Then compares it with no cutoffs, sequential retry at p95 and
    hedging at p95 everywhere. Warns on stderr when the deadline is out of reach, the plan may
    overspend its hedge budget, or thin samples make the interval wide.

    Example:

        tailkit calibrate data_samples/workflow.yaml --out plan.yaml --budget 0.05 --deadline 90
    """
    from tailkit.calibration import calibrate as run_calibration
    from tailkit.calibration import parse_since
    from tailkit.config import load_plan, write_plan
    from tailkit.simulation import compare_policies

    buckets = buckets_of(input_edges, output_edges)
    with library_errors("calibrate"):
        recent = None if since is None else parse_since(since)
        plan = load_plan(workflow)
        with (
            Store.open(db, read_only=True, memory_limit=memory_limit) as store,
            SearchProgress(enabled=not (as_json or quiet)) as bar,
        ):
            found = run_calibration(
                store, plan, budget=budget, deadline_s=deadline, runs=runs,
                check_runs=check_runs, seed=seed, buckets=buckets, min_calls=min_calls,
                latency=latency, replicates=replicates, progress=bar.update, live=live,
                since=recent,
            )  # fmt: skip
        policies = compare_policies(found.plan, found.samples, runs=check_runs, seed=seed + 1)
        write_plan(found.plan, out)
    if as_json:
        typer.echo(json.dumps(_calibration_json(found, policies, out), indent=2))
    elif not quiet:
        _print_calibration(found, policies, out, runs=runs, check_runs=check_runs)
    for warning in found.warnings:
        echo(f"Warning: {said(warning, 'calibrate')}", err=True)


def _print_calibration(
    found: Calibration, policies: dict[str, SimResult], out: Path, *, runs: int, check_runs: int
) -> None:
    """
    The plan table, the policy comparison, how the search went and where the plan is.
    """
    console = new_console()
    _plan_table(found.plan, console, kinds=found.tail_kinds)
    if found.since is not None:
        console.print(f"calls since {found.since.isoformat(timespec='seconds')}")
    _route_lines(found, console)
    _sharing_lines(found.plan, console)
    console.print("cutoffs beside the watched one (total beside TTFT, stall):")
    for line in found.notes:
        console.print(f"  {shown(said(line, 'calibrate'))}", highlight=False)
    _policy_table(found.plan, policies, console, prediction=found.prediction)
    console.print(
        f"searched {found.search.evaluated:,} candidates in {found.search.passes} passes "
        f"({runs:,} runs each); checked on {check_runs:,} fresh runs"
    )
    prediction = found.prediction
    if prediction.replicates:
        console.print(
            f"the plan's intervals: 95%, from {prediction.replicates:,} bootstrap replicates of "
            f"the measured calls ({prediction.replicate_runs:,} runs each); other rows: "
            "± one Monte Carlo standard error"
        )
    console.print(f"wrote {shown(out)}")


def simulate(
    plan_file: Annotated[
        Path, typer.Argument(metavar="PLAN", help="The plan (or workflow) YAML file.")
    ],
    db: DbOption = DEFAULT_DB,
    budget: BudgetOption = None,
    deadline: DeadlineOption = None,
    runs: RunsOption = 100_000,
    seed: SeedOption = 0,
    min_calls: MinCalls = 200,
    latency: Latency = "empirical",
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    as_json: JsonOption = False,
    memory_limit: ReadMemoryLimitOption = READ_MEMORY_LIMIT,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print the plan's line only, no table.")
    ] = False,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            metavar="N",
            min=1,
            help="Runs in flight at once, for steps that route live: each batch of N runs "
            "decides from what the runs before it observed (1: one after another).",
        ),
    ] = 16,
    fixed: Annotated[
        bool,
        typer.Option(
            "--fixed",
            help="Ignore the plan's live blocks: every step on its own route at its plan's "
            "cutoff, as Executor(live=False) runs it.",
        ),
    ] = False,
) -> None:
    """
    Simulate a plan next to no cutoffs, sequential retry at p95 and hedging at p95 everywhere.

    Every policy runs on the same random numbers against the store's measured latency; the
    table shows each one's deadline miss rate, end-to-end p50/p90/p99 and extra attempts.
    --deadline and --budget replace the file's, as for calibrate.

    Example:

        tailkit simulate plan.yaml --runs 200000 --deadline 45
    """
    from tailkit.config import load_plan
    from tailkit.simulation import compare_policies, load_samples
    from tailkit.simulation.lowlevel import check_run_count, with_overrides

    buckets = buckets_of(input_edges, output_edges)
    with library_errors("simulate"):
        check_run_count(runs, name="runs")
        plan = with_overrides(load_plan(plan_file), deadline_s=deadline, budget=budget)
        with Store.open(db, read_only=True, memory_limit=memory_limit) as store:
            samples = load_samples(
                store, plan, buckets=buckets, min_calls=min_calls, seed=seed, latency=latency
            )
        policies = compare_policies(
            plan, samples, runs=runs, seed=seed, concurrency=concurrency, live=not fixed
        )
    if as_json:
        payload = {"plan": str(plan_file), "workflow": plan.workflow,
                   "policies": {k: v.as_dict() for k, v in policies.items()}}  # fmt: skip
        typer.echo(json.dumps(payload, indent=2))
    elif quiet:
        typer.echo(policy_line(plan, policies))
    else:
        _policy_table(plan, policies, new_console())


def policy_line(plan: Plan, policies: dict[str, SimResult]) -> str:
    """
    The plan's (else no cutoffs') simulated figures in one line, for ``--quiet``.
    """
    from tailkit.simulation import POLICY_TITLES

    key = "plan" if "plan" in policies else next(iter(policies))
    result = policies[key]
    return (
        f"{POLICY_TITLES.get(key, key)}: miss rate {result.miss_rate:.2%} ± "
        f"{result.miss_rate_se:.2%}, p50 {_seconds(result.p50_s)} s, p99 "
        f"{_seconds(result.p99_s)} s, extra attempts {result.extra_attempts:.1%} "
        f"({result.runs:,} runs, deadline {plan.deadline_s:g} s)"
    )


def _route_lines(found: Calibration, console: Console) -> None:
    """
    Per step with candidate routes, each one's figures and which went first (and live mode).
    """
    if not found.route_choices:
        return
    console.print("first route among the candidates (workflow miss rate, p99, extra attempts):")
    for name in found.plan.order():
        choice = found.route_choices.get(name)
        if choice is not None:
            console.print(f"  {shown(name)}: {shown(choice.sentence())}", highlight=False)
    live = [n for n in found.plan.order() if found.plan.steps[n].live is not None]
    if live:
        console.print(
            f"live routing and cutoffs (the executor follows recent latency): {', '.join(live)}",
            highlight=False,
        )


def _sharing_lines(plan: Plan, console: Console) -> None:
    """
    What the plan assumed a repeat attempt shares with the first, per step, and from what.
    """
    console.print("correlation of a repeat (hedge, retry, downgrade) with the attempt it repeats:")
    for name in plan.order():
        basis = plan.steps[name].basis
        shared = None if basis is None else basis.shared
        if shared is None:
            continue
        console.print(
            f"  {shown(name)}: {shared.other_provider:.2f} on another provider, "
            f"{shared.same_provider:.2f} on the same ({shown(shared.source)}; more in "
            "basis.shared)",
            highlight=False,
        )


def _calibration_json(
    found: Calibration, policies: dict[str, SimResult], out: Path
) -> dict[str, Any]:
    import yaml

    from tailkit.config import dump_plan

    plan = yaml.safe_load(dump_plan(found.plan))
    return {
        "out": str(out),
        "plan": plan,
        "search": {"evaluated": found.search.evaluated, "passes": found.search.passes},
        "prediction": found.prediction.as_dict(),
        "tail_kinds": found.tail_kinds,
        "route_choice": {name: c.as_dict() for name, c in found.route_choices.items()},
        "since": None if found.since is None else found.since.isoformat(),
        "warnings": [said(w, "calibrate") for w in found.warnings],
        "notes": [said(n, "calibrate") for n in found.notes],
        "policies": {k: v.as_dict() for k, v in policies.items()},
    }


def _plan_table(plan: Plan, console: Console, *, kinds: dict[str, str] | None = None) -> None:
    """
    One row per step: its route, sample, cutoff and predictions (and its route's tail kind).
    """
    from rich.table import Table

    table = Table(title=f"plan {shown(plan.workflow)} (deadline {plan.deadline_s:g} s)")
    for name in ("step", "route", *(("tail",) if kinds else ()), "bucket", "calls", "watch",
                 "cutoff s", "action", "p50 s", "p99 s", "hedge rate"):  # fmt: skip
        table.add_column(
            name,
            justify="right" if name.endswith(("s", "calls", "rate")) else "left",
            overflow="fold",
        )
    for name in plan.order():
        step = plan.steps[name]
        cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
        action = step.on_cutoff
        if action == "hedge":
            action = f"hedge on {step.hedge_route}"
        elif action == "downgrade":
            action = f"downgrade to {step.downgrade_route}"
        pred, basis = step.predicted, step.basis
        table.add_row(
            shown(name) + ("" if step.required else " (optional)"),
            shown(step.route),
            *((shown(kinds.get(name, "?")),) if kinds else ()),
            shown(basis.bucket) if basis else "",
            f"{basis.calls:,}" if basis else "",
            step.signal if cutoff is not None else "-",
            _seconds(cutoff) if cutoff is not None else "-",
            shown(action),
            _seconds(pred.p50_s) if pred else "",
            _seconds(pred.p99_s) if pred else "",
            f"{pred.hedge_rate:.1%}" if pred else "",
        )
    console.print(table)


def _policy_table(
    plan: Plan,
    policies: dict[str, SimResult],
    console: Console,
    *,
    prediction: Prediction | None = None,
) -> None:
    from rich.table import Table

    from tailkit.simulation import POLICY_TITLES

    some = next(iter(policies.values()))
    table = Table(
        title=f"{shown(plan.workflow)}: {some.runs:,} simulated runs, deadline "
        f"{plan.deadline_s:g} s, hedge budget {plan.hedge_budget:.0%}"
    )
    for name in ("policy", "miss rate", "p50 s", "p90 s", "p99 s", "extra attempts",
                 "extra tokens/run"):  # fmt: skip
        table.add_column(name, justify="left" if name == "policy" else "right", overflow="fold")
    for key, result in policies.items():
        over = result.extra_attempts > plan.hedge_budget + 1e-9
        miss = f"{result.miss_rate:.2%} ± {result.miss_rate_se:.2%}"
        extra = f"{result.extra_attempts:.1%}"
        if key == "plan" and prediction is not None and prediction.replicates:
            miss = f"{result.miss_rate:.2%} ({text.percent_span(*prediction.miss_rate.bounds)})"
            extra += f" ({text.percent_span(*prediction.extra_attempts.bounds)})"
        table.add_row(
            shown(POLICY_TITLES.get(key, key)),
            miss,
            _seconds(result.p50_s),
            _seconds(result.p90_s),
            _seconds(result.p99_s),
            extra + (" (over budget)" if over else ""),
            f"{result.extra_tokens:,.0f}",
        )
    console.print(table)
