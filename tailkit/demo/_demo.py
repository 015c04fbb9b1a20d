"""
`run_demo`: ingest → tail table → calibrate → serve → run without and with the plan → report.

Serving is time-scaled (``time_scale`` real seconds per profile second), so the plan runs
scaled too: its deadline and cutoffs are multiplied by the same factor, and the ledger lines
are written back in profile seconds, so that the traces, the plan's predictions and the
production calls all speak the same unit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tailkit._stats import TailReport
from tailkit.config import Plan, dump_plan, load_plan
from tailkit.executor import Attempt, Executor, HedgeBudget, JsonlSink, Ledger
from tailkit.executor._ledger import AttemptRecord


ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data_samples"
MESSAGES = [{"role": "user", "content": "Write the next part of the account brief."}]


@dataclass(frozen=True, slots=True)
class Side:
    """
    One side of the comparison: the workflow run ``runs`` times under one plan.

    Args:
        label: ``without plan`` or ``with plan``.
        runs: Runs.
        miss_rate: Share of runs that failed or missed the deadline.
        p50_s: Median end-to-end seconds (profile time).
        p99_s: 99th percentile.
        attempts: Attempts in the ledger.
        first_attempts: First attempts (one per step and run started).
    """

    label: str
    runs: int
    miss_rate: float
    p50_s: float
    p99_s: float
    attempts: int
    first_attempts: int


@dataclass(frozen=True, slots=True)
class DemoResult:
    """
    What the demo did and where it put it.

    Args:
        out_dir: The demo's folder (store, plan, ledgers, report).
        table: The tail table it showed.
        plan: The calibrated plan (profile seconds).
        before: The workflow without cutoffs.
        after: The workflow with the calibrated plan.
        report: The report's index.html.
    """

    out_dir: Path
    table: pl.DataFrame
    plan: Plan
    before: Side
    after: Side
    report: Path


def _scaled(plan: Plan, factor: float) -> Plan:
    """
    The plan with every duration multiplied by ``factor`` (to run on a time-scaled server).
    """

    def times(step: Any) -> Any:
        fields = ("ttft_cutoff_s", "stall_cutoff_s", "cutoff_s")
        values = {f: getattr(step, f) * factor for f in fields if getattr(step, f) is not None}
        predicted = step.predicted
        if predicted is not None:
            predicted = dataclasses.replace(
                predicted, p50_s=predicted.p50_s * factor, p99_s=predicted.p99_s * factor
            )
        return dataclasses.replace(step, predicted=predicted, **values)

    steps = {name: times(step) for name, step in plan.steps.items()}
    return dataclasses.replace(plan, deadline_s=plan.deadline_s * factor, steps=steps)


class _ProfileSink(JsonlSink):
    """
    A JSON-lines ledger in profile seconds (the executor measured scaled real seconds).
    """

    def __init__(self, path: Path, factor: float) -> None:
        super().__init__(path)
        self._factor = factor

    def write(self, line: str, record: AttemptRecord) -> None:
        def back(value: float | None) -> float | None:
            return None if value is None else value / self._factor

        rescaled = dataclasses.replace(
            record,
            ttft_s=back(record.ttft_s),
            total_s=back(record.total_s),
            censored_at_s=back(record.censored_at_s),
        )
        super().write(rescaled.to_json(), rescaled)


async def _run_side(
    plan: Plan,
    url: str,
    runs: int,
    *,
    factor: float,
    ledger_path: Path,
    label: str,
    concurrency: int,
) -> Side:
    from tailkit.adapters.openai import chat_attempt

    scaled = _scaled(plan, factor)
    ledger = Ledger(_ProfileSink(ledger_path, factor))
    # the budget's window shrinks with time, like every other duration of the plan
    budget = HedgeBudget(plan.hedge_budget, window_s=60.0 * factor)
    executor = Executor(scaled, ledger=ledger, budget=budget)
    async with chat_attempt(url, MESSAGES, stream=True) as chat:

        def call(attempt: Attempt) -> Any:
            # the server knows each route by its name ("provider/model")
            return chat(dataclasses.replace(attempt, model=attempt.route))

        gate = asyncio.Semaphore(concurrency)  # server and client share one process

        async def one(i: int) -> Any:
            async with gate:
                return await executor.run(call, run_id=f"{label[:4]}-{i}")

        results = await asyncio.gather(*(one(i) for i in range(runs)))
    ledger.close()
    ends = sorted(r.elapsed_s / factor for r in results)
    missed = sum(1 for r in results if not r.ok or r.elapsed_s > scaled.deadline_s)
    counts = ledger.counts()
    lines = ledger_path.read_text(encoding="utf-8").splitlines()
    firsts = sum(1 for line in lines if json.loads(line)["attempt"] == 0)
    return Side(
        label=label,
        runs=runs,
        miss_rate=missed / runs,
        p50_s=_quantile(ends, 0.5),
        p99_s=_quantile(ends, 0.99),
        attempts=counts["attempts"],
        first_attempts=firsts,
    )


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]


def run_demo(
    out_dir: str | Path,
    *,
    runs: int = 200,
    time_scale: float = 0.05,
    concurrency: int = 25,
    calibrate_runs: int = 20_000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    show_table: Callable[[TailReport], None] | None = None,
) -> DemoResult:
    """
    Run the whole loop on the bundled samples; everything it writes goes under ``out_dir``.

    Args:
        out_dir: Folder for the store, the plan, the ledgers and the report.
        runs: Workflow runs per side (without and with the plan).
        time_scale: Real seconds per profile second when serving (0.05: 20 times faster).
        concurrency: Runs in flight at once (the server streams every token as a chunk, and
            it shares the process with the client).
        calibrate_runs: Simulated runs per candidate in the calibration search.
        seed: Seed of the calibration and of the served latencies.
        progress: Called with a short message as each phase starts.
        show_table: Called with the tail report (table and verdicts) once it is computed.
    """
    from tailkit._stats import TableQuery, tail_report
    from tailkit.calibrate import calibrate, workflow_of
    from tailkit.ingest import ingest_paths
    from tailkit.report import write_report
    from tailkit.serve import Server, profile_from_stats
    from tailkit.store import Store

    say = progress or (lambda _: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    production = "source <> 'tailkit-executor'"
    with Store.open(out / "tailkit.duckdb") as store:
        say("ingest the samples")
        ingest_paths(
            store, [SAMPLES / "production" / "calls.parquet", SAMPLES / "llmperf-leaderboard"]
        )
        say("tail table")
        tails = tail_report(
            store, TableQuery(by=("provider", "model"), bucket=(), where=production)
        )
        table = tails.table
        if show_table is not None:
            show_table(tails)
        say("calibrate data_samples/workflow.yaml")
        found = calibrate(
            store, load_plan(SAMPLES / "workflow.yaml"), runs=calibrate_runs, seed=seed
        )
        (out / "plan.yaml").write_text(dump_plan(found.plan), encoding="utf-8")
        config = profile_from_stats(table.to_dicts(), time_scale=time_scale)
        # ten tokens per streamed chunk: the same timing, a tenth of the events to parse
        models = {k: dataclasses.replace(m, chunk_tokens=10) for k, m in config.models.items()}
        config = dataclasses.replace(config, models=models, seed=seed)
        say(f"serve the measured tails on loopback and run the workflow {runs} times per side")
        without = workflow_of(found.plan)  # the same workflow, every step waiting

        async def both() -> tuple[Side, Side]:
            async with Server(config) as server:
                before = await _run_side(without, server.url, runs, factor=time_scale,
                                         ledger_path=out / "ledger-without-plan.jsonl",
                                         label="without plan", concurrency=concurrency)  # fmt: skip
                after = await _run_side(found.plan, server.url, runs, factor=time_scale,
                                        ledger_path=out / "ledger-with-plan.jsonl",
                                        label="with plan", concurrency=concurrency)  # fmt: skip
            return before, after

        before, after = asyncio.run(both())
        say("ingest the ledgers back (--format trace)")
        ingest_paths(store, [out / "ledger-with-plan.jsonl"], format="trace")
        say("write the report")
        report = write_report(store, out / "report", plan=found.plan, where=production)
    return DemoResult(out, table, found.plan, before, after, report)


def side_rows(result: DemoResult) -> list[Mapping[str, Any]]:
    """
    The before/after comparison as rows for a table.
    """
    return [
        {
            "side": side.label,
            "runs": side.runs,
            "miss_rate": side.miss_rate,
            "p50_s": side.p50_s,
            "p99_s": side.p99_s,
            "extra_attempts": side.attempts / max(side.first_attempts, 1) - 1,
        }
        for side in (result.before, result.after)
    ]
