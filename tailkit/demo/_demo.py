"""
`run_demo`: ingest → tail table → calibrate → replay → check → report, on the bundled samples.

The demo proves the loop: the plan's predictions are checked twice, by a replay of the calls
it was calibrated on through the executor and the HTTP adapter (`tailkit.replay`), and by
`tailkit check` reading the replay's with-plan ledger as production's check would. Everything
goes under ``out_dir``; the ledgers are in profile seconds, like the production calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tailkit.check import CheckReport
from tailkit.config import Plan, load_plan, write_plan
from tailkit.errors import TailkitError
from tailkit.replay import PlanEffect, ReplayResult
from tailkit.replay.lowlevel import plan_effect
from tailkit.tails import TailReport


PACKAGED = Path(__file__).resolve().parent / "data"  # in a wheel: see pyproject's force-include
CLONE = Path(__file__).resolve().parents[2] / "data_samples"  # in a clone of the repository
PRODUCTION = "source <> 'tailkit-executor'"  # the tail table and report leave the replay out


@dataclass(frozen=True, slots=True)
class DemoResult:
    """
    What the demo did and where it put it.

    Args:
        out_dir: The demo's folder (store, plan, ledgers, report).
        table: The tail table it showed.
        plan: The calibrated plan.
        replay: The rehearsal: both sides, predicted against observed, and its timing error.
        check: ``tailkit check`` of the plan on the replay's with-plan ledger.
        check_without: The same check on the without-plan ledger (it should drift: those
            runs did not follow the plan).
        report: The report's index.html.

    ``effect`` says whether the plan helps, by a test over the two sides (`plan_effect`).
    """

    out_dir: Path
    table: pl.DataFrame
    plan: Plan
    replay: ReplayResult
    check: CheckReport
    check_without: CheckReport
    report: Path

    @property
    def effect(self) -> PlanEffect:
        """
        Whether the plan helps: an exact test of the two sides' misses and their p99s.
        """
        return plan_effect(self.replay)

    def to_json(self) -> dict[str, object]:
        """
        The ``--json`` document: the replay's, the checks', and ``plan_effect``.

        The replay's sides, fidelity and verdict; the check of each ledger; and the test
        behind "the plan helps" (`PlanEffect.to_json`).
        """
        out = self.replay.to_json()
        out["plan_effect"] = self.effect.to_json()
        out["check"] = self.check.as_dict()
        out["check_without_plan"] = {"verdict": self.check_without.verdict}
        out["plan"] = str(self.out_dir / "plan.yaml")
        out["report"] = str(self.report)
        return out


def run_demo(
    out_dir: str | Path,
    *,
    runs: int = 200,
    time_scale: float | None = None,
    calibrate_runs: int = 20_000,
    replicates: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    replay_progress: Callable[[str, int, int], None] | None = None,
    show_table: Callable[[TailReport], None] | None = None,
) -> DemoResult:
    """
    Run the whole loop on the bundled samples; everything it writes goes under ``out_dir``.

    Args:
        out_dir: Folder for the store, the plan, the ledgers and the report.
        runs: Workflow runs per side (without and with the plan).
        time_scale: Real seconds per profile second when replaying (``None``: chosen by the
            replay so its timing error stays under 2 % of the smallest cutoff).
        calibrate_runs: Simulated runs per candidate in the calibration search.
        replicates: Bootstrap replicates behind the predictions' intervals (``None``: the
            calibrator's default).
        seed: Seed of the calibration, the predictions and the served draws.
        progress: Called with a short message as each phase starts.
        replay_progress: Called with (phase, runs done, runs) during the replay.
        show_table: Called with the tail report (table and verdicts) once it is computed.
    """
    from tailkit.calibration import REPLICATES, calibrate
    from tailkit.check import check_plan
    from tailkit.ingest import ingest_paths
    from tailkit.replay import replay
    from tailkit.report import write_report
    from tailkit.store import Store
    from tailkit.tails import TableQuery, tail_report

    say = progress or (lambda _: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with Store.open(out / "tailkit.duckdb") as store:
        workflow, samples = find_samples(out, say)
        say("ingest the samples")
        ingest_paths(store, samples)
        say("tail table")
        tails = tail_report(
            store, TableQuery(by=("provider", "model"), bucket=(), where=PRODUCTION)
        )
        if show_table is not None:
            show_table(tails)
        home = CLONE.parent if workflow.is_relative_to(CLONE) else PACKAGED.parents[2]
        say(f"calibrate {workflow.relative_to(home).as_posix()}")
        found = calibrate(
            store, load_plan(workflow), runs=calibrate_runs, seed=seed,
            replicates=REPLICATES if replicates is None else replicates,
        )  # fmt: skip
        write_plan(found.plan, out / "plan.yaml")
        say(f"replay the calls it was calibrated on, {runs} runs without and with the plan")
        rehearsal = replay(
            store,
            found.plan,
            runs=runs,
            time_scale=time_scale,
            seed=seed,
            out_dir=out,
            progress=replay_progress,
        )
        say("check the plan against the replay's ledgers (tailkit check)")
        checked = check_plan(found.plan, [rehearsal.sides[1].ledger])
        checked_without = check_plan(found.plan, [rehearsal.sides[0].ledger])
        say("ingest the ledgers back (format trace) and write the report")
        ingest_paths(store, [rehearsal.sides[1].ledger], format="trace")
        report = write_report(
            store, out / "report", plan=found.plan, where=PRODUCTION, replay=rehearsal.to_json()
        )
    return DemoResult(out, tails.table, found.plan, rehearsal, checked, checked_without, report)


def find_samples(out: Path, say: Callable[[str], None]) -> tuple[Path, list[Path]]:
    """
    The sample workflow and the logs to ingest, from the installed package or the clone.

    A wheel ships the workflow and the llmperf measurements as package data, not the 3.4 MB
    production-like log: that one is generated under ``out/samples`` with the generator and
    seed of the committed data_samples/production/calls.parquet (the same bytes, about 2 s).

    Args:
        out: The demo's folder.
        say: Progress messages.

    Returns:
        The workflow file, and the production log and llmperf folder to ingest.

    Raises:
        TailkitError: Neither the package data nor a clone's data_samples/ is there.
    """
    base = PACKAGED if (PACKAGED / "workflow.yaml").is_file() else CLONE
    if not (base / "workflow.yaml").is_file():
        msg = (
            f"{PACKAGED / 'workflow.yaml'}: the demo's sample workflow is missing; "
            "reinstall tailkit (pip install --force-reinstall tailkit) or run from a clone"
        )
        raise TailkitError(msg)
    production = base / "production" / "calls.parquet"
    if not production.is_file():
        from tailkit.demo._generate import SAMPLE_ROWS, SAMPLE_SEED, write_sample

        say(f"generate the production-like sample ({SAMPLE_ROWS:,} calls, seed {SAMPLE_SEED})")
        production = write_sample(out / "samples")[0]
    return base / "workflow.yaml", [production, base / "llmperf-leaderboard"]
