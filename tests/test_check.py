"""
Tests of `tailkit.check` and ``tailkit check``: synthetic ledgers with known distributions.

A small world: ``extract`` then ``draft`` (both required, hedging from route ``a/m`` to
``b/m``) and an optional ``tag``. Each step's latency is lognormal; a share of calls hedges;
some first attempts are refused their hedge or fail and are retried. The plan's predictions
are the world's true figures (Monte Carlo with many more runs than the ledger), so a ledger
drawn from the same world must hold and a ledger from a changed world must drift.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from typer.testing import CliRunner

from tailkit.check import (
    CANT_TELL,
    DRIFTED,
    HOLDS,
    WORKFLOW,
    CheckReport,
    check_observation,
    check_plan,
    observe,
)
from tailkit.check.lowlevel import observed_quantiles, rate, ratio
from tailkit.cli import app
from tailkit.config import parse_plan
from tailkit.errors import ConfigError, IngestError
from tailkit.ingest import ScanOptions


T0 = datetime(2026, 5, 4, 9, 0, 0, tzinfo=UTC)
DEADLINE_S = 40.0
Z99 = 2.3263478740408408  # standard normal 0.99 quantile
runner = CliRunner()


@dataclass(frozen=True)
class StepWorld:
    """One step: lognormal latency, and the shares of calls that hedge, are refused, fail."""

    median_s: float
    sigma: float
    hedge: float = 0.0
    denied: float = 0.0
    errors: float = 0.0
    required: bool = True


@dataclass(frozen=True)
class World:
    """The whole workflow: extract, then draft (required) and tag (optional)."""

    steps: dict[str, StepWorld] = field(
        default_factory=lambda: {
            "extract": StepWorld(3.0, 0.5, hedge=0.05),
            "draft": StepWorld(15.0, 0.4, hedge=0.10),
            "tag": StepWorld(1.0, 0.3, required=False),
        }
    )

    def changed(self, step: str, **kw: Any) -> World:
        """The same world with one step changed."""
        return World({**self.steps, step: dataclasses.replace(self.steps[step], **kw)})


def truth(world: World, *, runs: int = 400_000, seed: int = 99) -> dict[str, float]:
    """The world's workflow figures, by Monte Carlo over many more runs than any ledger."""
    rng = np.random.default_rng(seed)
    e, d = (
        world.steps[n].median_s * np.exp(world.steps[n].sigma * rng.standard_normal(runs))
        for n in ("extract", "draft")
    )
    end = e + d
    hedges = sum(s.hedge * (1 - s.denied) for s in world.steps.values())
    return {
        "p50_s": float(np.quantile(end, 0.5)),
        "p99_s": float(np.quantile(end, 0.99)),
        "miss_rate": float(np.mean(end > DEADLINE_S)),
        "extra_attempts": hedges / len(world.steps),
    }


def plan_yaml(world: World, *, calls: int = 5000, drop_predictions: bool = False) -> str:
    """A calibrated plan whose predictions are the world's true figures."""
    lines = [
        "tailkit_plan: 1",
        "workflow: brief",
        f"deadline_s: {DEADLINE_S}",
        "hedge_budget: 0.1",
        "routes:",
        "  a/m: {provider: a, model: m}",
        "  b/m: {provider: b, model: m}",
        "steps:",
    ]
    deps = {"extract": "[]", "draft": "[extract]", "tag": "[extract]"}
    for name, s in world.steps.items():
        hedged = s.hedge > 0
        lines += [
            f"  {name}:",
            f"    depends_on: {deps[name]}",
            f"    required: {'true' if s.required else 'false'}",
            "    route: a/m",
            f"    on_cutoff: {'hedge' if hedged else 'wait'}",
        ]
        if hedged:
            lines += ["    signal: ttft", "    ttft_cutoff_s: 2.0", "    hedge_route: b/m"]
        if not drop_predictions:
            p99 = s.median_s * math.exp(Z99 * s.sigma)
            rate_ = s.hedge * (1 - s.denied)
            lines += [
                f"    predicted: {{p50_s: {s.median_s}, p99_s: {p99:.4f}, hedge_rate: {rate_}}}",
                f"    basis: {{calls: {calls}, bucket: 'in 0-1k / out 0-64', quantile: 0.9, "
                "censored: 0.0}",
            ]
    if not drop_predictions:
        t = truth(world)
        lines.append(
            f"predicted: {{p50_s: {t['p50_s']:.4f}, p99_s: {t['p99_s']:.4f}, "
            f"miss_rate: {t['miss_rate']:.5f}, extra_attempts: {t['extra_attempts']:.5f}}}"
        )
    return "\n".join(lines) + "\n"


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _line(run: str, step: str, attempt: int, role: str, start: datetime, **kw: Any) -> str:
    record: dict[str, Any] = {
        "call_id": f"{run}-{step}-{attempt}",
        "run_id": run,
        "step": step,
        "attempt": attempt,
        "role": role,
        "provider": "b" if role == "hedge" else "a",
        "model": "m",
        "started_at": _iso(start),
        "ttft_s": None,
        "total_s": None,
        "input_tokens": 500,
        "output_tokens": None,
        "status": "ok",
        "error_type": None,
        "http_status": None,
        "censored_at_s": None,
        "abandoned": False,
        "idempotency_key": f"{run}-{step}",
        "deadline_at": None,
        "winner": False,
        "attrs": {},
    }
    record.update(kw)
    return json.dumps(record)


def _step_lines(
    rng: np.random.Generator, run: str, name: str, s: StepWorld, start: datetime
) -> tuple[list[str], float]:
    """The ledger lines of one step call, and its duration in seconds."""
    d = float(s.median_s * math.exp(s.sigma * rng.standard_normal()))

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    if rng.random() < s.errors:
        # the first attempt fails at once and is retried: a recovery attempt, not a cutoff's
        return [
            _line(run, name, 0, "primary", start, status="error", total_s=0.2),
            _line(run, name, 1, "retry", at(0.2), total_s=d - 0.2, winner=True),
        ], d
    if rng.random() < s.hedge:
        if rng.random() < s.denied:
            attrs = {"cutoff": "ttft", "hedge_denied": "budget"}
            return [_line(run, name, 0, "primary", start, total_s=d, winner=True, attrs=attrs)], d
        cut = {"cutoff": "ttft"}
        return [
            _line(run, name, 0, "primary", start, status="cancelled", censored_at_s=d, attrs=cut),
            _line(run, name, 1, "hedge", at(0.3 * d), total_s=0.7 * d, winner=True),
        ], d
    return [_line(run, name, 0, "primary", start, total_s=d, winner=True)], d


def _completed(rows: list[str]) -> list[str]:
    """The extract lines of a test, and a draft that won in each of their runs (a whole run)."""
    runs = dict.fromkeys(json.loads(x)["run_id"] for x in rows)
    after = T0 + timedelta(seconds=5.0)
    return rows + [_line(r, "draft", 0, "primary", after, total_s=1.0, winner=True) for r in runs]


def ledger(path: Path, world: World, runs: int, *, seed: int) -> Path:
    """Write ``runs`` runs of ``world`` as the executor's JSON lines."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    for i in range(runs):
        run, start = f"run-{seed}-{i:05d}", T0 + timedelta(seconds=60.0 * i)
        lines, d_extract = _step_lines(rng, run, "extract", world.steps["extract"], start)
        out += lines
        after = start + timedelta(seconds=d_extract)
        for name in ("draft", "tag"):
            lines, _ = _step_lines(rng, run, name, world.steps[name], after)
            out += lines
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def world() -> World:
    """The world the plan was calibrated on."""
    return World()


@pytest.fixture
def plan_file(tmp_path: Path, world: World) -> Path:
    """The calibrated plan of that world."""
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(world), encoding="utf-8")
    return path


def _kinds(report: CheckReport, scope: str, figure: str) -> list[str]:
    return [c.kind for c in report.line(scope, figure).causes]


# --- the intervals ---------------------------------------------------------------------------


def test_clopper_pearson_matches_its_closed_forms() -> None:
    """0 of n and n of n have closed-form exact bounds: 1 - 0.025**(1/n) and its mirror."""
    none, every = rate(0, 10), rate(10, 10)
    assert (0.0, 0.0) == (none.value, none.low)
    assert 1 - 0.025 ** (1 / 10) == pytest.approx(none.high, rel=1e-9)
    assert 0.025 ** (1 / 10) == pytest.approx(every.low, rel=1e-9)
    assert 1.0 == every.high


def test_garwood_interval_at_zero_events_is_minus_log_alpha_over_n() -> None:
    """No extra attempts in 1,000 first attempts: the upper bound is -ln(0.025) / 1000."""
    est = ratio(0, 1000)
    assert 0.0 == est.value == est.low
    assert -math.log(0.025) / 1000 == pytest.approx(est.high, rel=1e-9)
    assert 1000 == est.n


def test_quantiles_of_units_cut_at_the_deadline_are_bounded_below_only() -> None:
    """Half the runs cut by the deadline: the p99 is more than what was seen, unbounded above."""
    (p99,) = observed_quantiles([1.0 + i / 100 for i in range(200)], [40.0] * 200, (0.99,))
    assert math.isinf(p99.value)
    assert math.isinf(p99.high)
    assert p99.low >= 2.0
    assert "Kaplan-Meier" == p99.method


# --- observing ------------------------------------------------------------------------------


def test_observation_counts_runs_hedges_denials_and_recoveries(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """Every count of the observation is the count written into the ledger."""
    w = world.changed("draft", hedge=0.5, denied=0.5).changed("extract", errors=0.2)
    path = ledger(tmp_path / "l.jsonl", w, 300, seed=3)
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    obs = observe(plan_file, path)
    draft, extract = obs.step("draft"), obs.step("extract")
    assert 300 == obs.runs == draft.calls == extract.calls
    hedges = sum(1 for x in lines if x["step"] == "draft" and x["role"] == "hedge")
    denied = sum(1 for x in lines if x["step"] == "draft" and x["attrs"].get("hedge_denied"))
    retries = sum(1 for x in lines if x["step"] == "extract" and x["role"] == "retry")
    assert (hedges, hedges) == (draft.cutoff_attempts, draft.extra_attempts)
    assert hedges / 300 == draft.hedge_rate.value
    assert denied == draft.denied_budget > 0
    assert retries == extract.recovery_attempts > 0
    firsts = sum(1 for x in lines if x["attempt"] == 0)
    extras = sum(1 for x in lines if x["attempt"] > 0)
    assert (firsts, extras / firsts) == (obs.first_attempts, obs.extra_attempts.value)


def test_run_latency_ends_with_its_last_step_an_optional_one_cut_at_the_deadline(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """An optional step ends the run (no later than the deadline); late or lost steps miss."""
    start = T0

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    rows = []
    for i in range(40):
        run = f"r{i}"
        rows += [
            _line(run, "extract", 0, "primary", at(0), total_s=2.0, winner=True),
            _line(run, "draft", 0, "primary", at(2.0), total_s=10.0, winner=True),
            _line(run, "tag", 0, "primary", at(2.0), total_s=30.0, winner=True),
        ]
    rows[-2] = _line("r39", "draft", 0, "primary", at(2.0), total_s=50.0, winner=True)
    rows[-5] = _line("r38", "draft", 0, "primary", at(2.0), status="timeout", censored_at_s=38.0)
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    obs = observe(plan_file, path)
    assert (40, 1, 1) == (obs.runs, obs.missed_late, obs.missed_failed)
    assert min(32.0, DEADLINE_S) == obs.p50_s.value  # tag, optional, ends last
    assert 2 / 40 == obs.miss_rate.value


# --- verdicts -------------------------------------------------------------------------------


def test_a_ledger_drawn_from_the_predicted_world_holds(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """2,000 runs of the calibrated world: every line holds and the exit code is 0."""
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", world, 2000, seed=1))
    assert ((), ()) == (report.observation.left_out, report.observation.warnings)
    assert [] == [(x.scope, x.figure, x.reason) for x in report.lines if x.verdict != HOLDS]
    assert (HOLDS, 0) == (report.verdict, report.exit_code)
    assert 13 == len(report.lines)


def test_a_slower_route_drifts_and_is_named(tmp_path: Path, world: World, plan_file: Path) -> None:
    """The draft step's route 1.6 times slower: its p50 and the run's drift, named."""
    slow = world.changed("draft", median_s=24.0)
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", slow, 500, seed=2))
    assert (DRIFTED, 1) == (report.verdict, report.exit_code)
    draft = report.line("draft", "p50_s")
    assert DRIFTED == draft.verdict
    assert ["slower route"] == _kinds(report, "draft", "p50_s")
    assert "a/m (draft)" in (draft.cause or "")
    assert "slower route" in _kinds(report, WORKFLOW, "p50_s")
    assert "slower route" in _kinds(report, WORKFLOW, "miss_rate")
    assert HOLDS == report.line("extract", "p50_s").verdict


def test_refused_hedges_are_named_as_budget_denials(tmp_path: Path, plan_file: Path) -> None:
    """The hedge budget refuses 80 % of draft's hedges: its hedge rate drifts below, denied."""
    refused = World().changed("draft", denied=0.8)
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", refused, 500, seed=4))
    line = report.line("draft", "hedge_rate")
    assert DRIFTED == line.verdict
    assert line.observed.high < 0.10
    assert ["budget denials"] == _kinds(report, "draft", "hedge_rate")
    assert "refused" in (line.cause or "")


def test_the_executors_older_skip_sentences_count_as_denials(
    tmp_path: Path, plan_file: Path
) -> None:
    """attrs.action_skipped 'hedge budget spent' is a budget denial, 'provider b throttled' one."""
    rows = [
        _line(f"r{i}", "extract", 0, "primary", T0, total_s=2.0, winner=True, attrs=attrs)
        for i, attrs in enumerate(
            [{"action_skipped": "hedge budget spent"}] * 3
            + [{"action_skipped": "provider b throttled"}] * 2
            + [{"action_skipped": "not idempotent"}]
        )
    ]
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(_completed(rows)) + "\n", encoding="utf-8")
    extract = observe(plan_file, path).step("extract")
    assert (3, 2) == (extract.denied_budget, extract.denied_throttle)


def test_what_started_an_extra_attempt_is_read_when_the_ledger_says(
    tmp_path: Path, plan_file: Path
) -> None:
    """attrs.started_by decides: an error's retry after a cut first attempt is no cutoff's."""
    cut = {"cutoff": "ttft"}
    rows = [
        _line("r1", "extract", 0, "primary", T0, status="cancelled", censored_at_s=2.0, attrs=cut),
        _line("r1", "extract", 1, "retry", T0, total_s=1.0, winner=True,
              attrs={"started_by": "error"}),
        _line("r2", "extract", 0, "primary", T0, status="cancelled", censored_at_s=2.0, attrs=cut),
        _line("r2", "extract", 1, "retry", T0, total_s=1.0, winner=True),
        _line("r3", "extract", 0, "primary", T0, status="cancelled", censored_at_s=2.0, attrs=cut),
        _line("r3", "extract", 1, "hedge", T0, total_s=1.0, winner=True,
              attrs={"started_by": "cutoff"}),
    ]  # fmt: skip
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(_completed(rows)) + "\n", encoding="utf-8")
    extract = observe(plan_file, path).step("extract")
    assert (3, 2, 1) == (extract.extra_attempts, extract.cutoff_attempts, extract.recovery_attempts)


def test_a_thin_basis_is_named(tmp_path: Path, world: World) -> None:
    """A plan calibrated on 300 calls per step: a drift names the thin basis too."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_yaml(world, calls=300), encoding="utf-8")
    slow = world.changed("draft", median_s=24.0)
    report = check_plan(plan, ledger(tmp_path / "l.jsonl", slow, 200, seed=5))
    assert ["slower route", "thin basis"] == _kinds(report, "draft", "p50_s")
    assert "draft on 300 calls" in (report.line("draft", "p50_s").cause or "")


def test_the_predictions_own_interval_holding_the_observation_holds(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """The plan's interval overlapping the observed one holds; a wide one apart is thin."""
    slow = world.changed("draft", median_s=24.0)
    obs = observe(plan_file, ledger(tmp_path / "l.jsonl", slow, 200, seed=5))
    plan = parse_plan(plan_file.read_text(encoding="utf-8"))
    draft = plan.steps["draft"]
    assert draft.predicted is not None
    wide = types.SimpleNamespace(
        p50_s=draft.predicted.p50_s,
        p99_s=draft.predicted.p99_s,
        hedge_rate=draft.predicted.hedge_rate,
        interval={"p50_s": (10.0, 30.0)},
    )
    plan = dataclasses.replace(
        plan,
        steps={**plan.steps, "draft": dataclasses.replace(draft, predicted=wide)},  # type: ignore[arg-type]
    )
    line = check_observation(plan, obs).line("draft", "p50_s")
    assert (HOLDS, "the plan's interval") == (line.verdict, line.judged and line.judged.source)
    assert line.reason.startswith("the intervals overlap at ")
    wide.interval = {"p50_s": (5.0, 16.0)}
    report = check_observation(plan, obs)
    assert ["slower route", "thin basis"] == _kinds(report, "draft", "p50_s")
    assert "own interval [5.00 s–16.00 s] is wide" in (report.line("draft", "p50_s").cause or "")
    wide.interval = {"p50_s": (14.0, 16.0)}
    assert ["slower route"] == _kinds(check_observation(plan, obs), "draft", "p50_s")


def test_error_retries_are_recovery_not_extra_attempts(tmp_path: Path, plan_file: Path) -> None:
    """A quarter of first attempts fail and are retried: the budget's figure is unmoved."""
    failing = World().changed("tag", errors=0.25).changed("extract", errors=0.25)
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", failing, 500, seed=6))
    line = report.line(WORKFLOW, "extra_attempts")
    cutoffs = report.observation.cutoff_attempts
    assert line.observed == cutoffs
    assert cutoffs.low <= truth(World())["extra_attempts"] <= cutoffs.high
    assert report.observation.extra_attempts.value > cutoffs.value + 0.02  # retries counted apart


def test_too_few_runs_cant_tell(tmp_path: Path, world: World, plan_file: Path) -> None:
    """12 runs: every line says can't tell and why, and that is not a drift (exit 0)."""
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", world, 12, seed=7))
    assert {CANT_TELL} == {x.verdict for x in report.lines}
    assert "only 12 runs; a verdict needs at least 30" == report.line(WORKFLOW, "p50_s").reason
    assert (HOLDS, 0) == (report.verdict, report.exit_code)


def test_a_p99_cant_tell_below_the_runs_its_interval_needs(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """200 runs judge the p50s but not the p99s, which need 692 at the family's line level."""
    report = check_plan(plan_file, ledger(tmp_path / "l.jsonl", world, 200, seed=8))
    p99 = report.line(WORKFLOW, "p99_s")
    assert CANT_TELL == p99.verdict
    # at 1 - 0.05 / 26 for all 13 lines a p99 needs 692 runs; the 9 others are then judged
    assert "needs at least 692 to be bounded above at the 99.81%" in p99.reason
    assert 1 - 0.05 / 18 == pytest.approx(report.line_level)
    assert CANT_TELL == report.line("draft", "p99_s").verdict
    assert HOLDS == report.line("draft", "p50_s").verdict


def test_within_the_tolerance_holds_outside_the_interval(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """A p50 10 % off with 2,000 runs is outside its interval but within 15 %: it holds."""
    off = world.changed("extract", median_s=3.3)
    obs = observe(plan_file, ledger(tmp_path / "l.jsonl", off, 2000, seed=9))
    line = check_observation(plan_file, obs).line("extract", "p50_s")
    assert 3.0 not in line.observed
    assert (HOLDS, "within 15% of the observed value") == (line.verdict, line.reason)
    strict = check_observation(plan_file, obs, tolerance=0.0).line("extract", "p50_s")
    assert DRIFTED == strict.verdict


def test_several_ledgers_are_one_observation(tmp_path: Path, world: World, plan_file: Path) -> None:
    """A ledger split in two files observes the same runs as the whole."""
    whole = ledger(tmp_path / "whole.jsonl", world, 100, seed=10)
    lines = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "one.jsonl").write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    (tmp_path / "two.jsonl").write_text("".join(lines[len(lines) // 2 :]), encoding="utf-8")
    both = observe(plan_file, [tmp_path / "one.jsonl", tmp_path / "two.jsonl"])
    assert observe(plan_file, whole).steps == both.steps
    assert 100 == both.runs


def test_other_column_names_are_mapped_as_for_ingest(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """A ledger whose run id column is named trace reads with mapping run_id=trace."""
    path = ledger(tmp_path / "l.jsonl", world, 40, seed=11)
    renamed = [
        json.dumps({("trace" if k == "run_id" else k): v for k, v in json.loads(x).items()})
        for x in path.read_text(encoding="utf-8").splitlines()
    ]
    path.write_text("\n".join(renamed) + "\n", encoding="utf-8")
    with pytest.raises(IngestError, match="no run of this plan's steps"):
        observe(plan_file, path)
    obs = observe(plan_file, path, options=ScanOptions(mapping={"run_id": "trace"}))
    assert 40 == obs.runs


def test_lines_left_out_are_noted(tmp_path: Path, world: World, plan_file: Path) -> None:
    """Lines of a step the plan lacks, and lines without a start, are left out and noted."""
    path = ledger(tmp_path / "l.jsonl", world, 40, seed=13)
    extra = [
        _line("run-13-00000", "polish", 0, "primary", T0, total_s=1.0, winner=True),
        _line("run-13-00001", "tag", 9, "retry", T0, total_s=1.0).replace(
            f'"started_at": "{_iso(T0)}"', '"started_at": null'
        ),
    ]
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(extra) + "\n")
    obs = observe(plan_file, path)
    assert 1 == obs.untimed
    assert (
        "1 lines of plan steps have no started_at and were left out",
        "lines of steps the plan does not have were left out: polish (1)",
    ) == obs.notes
    assert 40 == obs.runs


# --- bad input ------------------------------------------------------------------------------


def test_a_plan_without_predictions_is_refused(tmp_path: Path, world: World) -> None:
    """An uncalibrated plan: 'calibrate it first', naming the file."""
    plan = tmp_path / "workflow.yaml"
    plan.write_text(plan_yaml(world, drop_predictions=True), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"workflow\.yaml: no predictions: calibrate it first"):
        observe(plan, ledger(tmp_path / "l.jsonl", world, 5, seed=12))


def test_a_ledger_of_other_steps_is_refused_by_name(tmp_path: Path, plan_file: Path) -> None:
    """A ledger with no run of the plan's steps names the file and the fix."""
    other = tmp_path / "other.jsonl"
    other.write_text(_line("r1", "summarize", 0, "primary", T0, total_s=1.0) + "\n", "utf-8")
    with pytest.raises(IngestError, match=r"other\.jsonl.*no run of this plan's steps"):
        observe(plan_file, other)


# --- the command ----------------------------------------------------------------------------


def test_cli_exit_codes_hold_drift_and_bad_input(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """Exit 0 when it holds, 1 when it drifted, 2 for a missing plan, ledger or bad --map."""
    good = str(ledger(tmp_path / "good.jsonl", world, 2000, seed=1))
    slow = str(ledger(tmp_path / "slow.jsonl", world.changed("draft", median_s=24.0), 500, seed=2))
    held = runner.invoke(app, ["check", str(plan_file), good])
    assert 0 == held.exit_code, held.output
    assert held.output.rstrip().endswith("holds: 13 of 13 lines hold, over 2,000 runs")
    drifted = runner.invoke(app, ["check", str(plan_file), slow])
    assert 1 == drifted.exit_code, drifted.output
    assert "slower route: a/m (draft): first attempts' p50" in drifted.output
    for args, message in (
        ([str(tmp_path / "nope.yaml"), good], "nope.yaml"),
        ([str(plan_file), str(tmp_path / "nope.jsonl")], "nope.jsonl"),
        ([str(plan_file), good, "--map", "run_id"], "--map takes COLUMN=VALUE"),
        ([str(plan_file), good, "--set-over", "provider"], "--set-over takes COLUMN=VALUE"),
        ([str(plan_file), good, "--status-map", "done=fine"], "'fine' is not a status"),
    ):
        result = runner.invoke(app, ["check", *args])
        assert 2 == result.exit_code, result.output
        assert message in result.stderr
        assert result.stderr.startswith("Error: ")


def test_cli_reads_ledgers_with_the_options_of_ingest(
    tmp_path: Path, world: World, plan_file: Path
) -> None:
    """--status-map and --set-over work as for ingest: a ledger saying done for ok holds."""
    good = ledger(tmp_path / "good.jsonl", world, 2000, seed=1)
    done = tmp_path / "done.jsonl"
    done.write_text(good.read_text("utf-8").replace('"status": "ok"', '"status": "done"'), "utf-8")
    refused = runner.invoke(app, ["check", str(plan_file), str(done)])
    held = runner.invoke(app, ["check", str(plan_file), str(done), "--status-map", "done=ok"])
    over = runner.invoke(app, ["check", str(plan_file), str(good), "--set-over", "model=m"])
    # without --status-map every run lost its winners to ingest: nothing to judge, no misses
    assert 2 == refused.exit_code, refused.output
    assert "ingest refused a line of theirs" in refused.stderr
    assert "status 'done' is not one of ok" in refused.stderr
    assert "Read its columns as they are meant (--status-map, --map, --unit)" in refused.stderr
    assert 0 == held.exit_code, held.output
    assert held.output.rstrip().endswith("holds: 13 of 13 lines hold, over 2,000 runs")
    assert 0 == over.exit_code, over.output


def test_cli_refuses_a_level_outside_zero_one(tmp_path: Path, plan_file: Path) -> None:
    """--level 95 (a percentage) is bad input: exit 2, naming the value and the fix."""
    good = str(ledger(tmp_path / "good.jsonl", World(), 40, seed=14))
    result = runner.invoke(app, ["check", str(plan_file), good, "--level", "95"])
    assert 2 == result.exit_code
    assert "level must be a confidence level in (0, 1), e.g. 0.95, got 95.0" in result.stderr


def test_cli_json_has_the_documented_shape(tmp_path: Path, world: World, plan_file: Path) -> None:
    """--json: verdict, workflow and steps, each line with predicted, observed and verdict."""
    slow = ledger(tmp_path / "slow.jsonl", world.changed("draft", median_s=24.0), 500, seed=2)
    result = runner.invoke(app, ["check", str(plan_file), str(slow), "--json"])
    assert 1 == result.exit_code
    doc = json.loads(result.stdout)
    assert DRIFTED == doc["verdict"]
    assert 500 == doc["workflow"]["runs"]
    assert ["extract", "draft", "tag"] == [s["step"] for s in doc["steps"]]
    line = doc["steps"][1]["p50_s"]
    assert {"predicted", "observed", "verdict", "reason", "judged", "cause", "causes"} == set(line)
    assert {"value", "low", "high", "n", "method"} == set(line["observed"])
    assert {"level", "observed", "predicted", "predicted_from"} == set(line["judged"])
    assert (15.0, 500, DRIFTED) == (line["predicted"], line["observed"]["n"], line["verdict"])
    assert "slower route" == line["causes"][0]["kind"]
    held = doc["steps"][0]["p50_s"]
    assert HOLDS == held["verdict"]
    assert "cause" not in held
    for figure in ("p50_s", "p99_s", "miss_rate", "extra_attempts"):
        assert {"predicted", "observed", "verdict", "reason"} <= set(doc["workflow"][figure])


# --- the real executor, on a virtual clock ---------------------------------------------------

EXECUTED = """\
tailkit_plan: 1
workflow: pair
deadline_s: 30
hedge_budget: 0.5
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  first:
    route: a/m
    predicted: {p50_s: 1.0, p99_s: 1.0, hedge_rate: 0.0}
    basis: {calls: 5000, bucket: "in 0-1k / out 0-64", quantile: null, censored: 0.0}
  second:
    depends_on: [first]
    route: a/m
    signal: ttft
    ttft_cutoff_s: 1.0
    on_cutoff: hedge
    hedge_route: b/m
    predicted: {p50_s: 2.0, p99_s: 2.5, hedge_rate: 0.25}
    basis: {calls: 5000, bucket: "in 0-1k / out 0-64", quantile: 0.75, censored: 0.0}
predicted: {p50_s: 3.0, p99_s: 3.5, miss_rate: 0.0, extra_attempts: 0.125}
"""


def _execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, slow_s: float) -> Path:
    """Run the plan 400 times through the executor; every 4th ``second`` call is stuck."""
    import asyncio

    import tailkit.executor._attempt as attempt_module

    from tailkit.executor import FINAL, Attempt, Executor, Ledger, MemorySink
    from tests._fakeloop import VirtualLoop

    loop = VirtualLoop()
    # the ledger's started_at is wall-clock time: make it follow the virtual clock
    epoch_s = T0.timestamp()
    monkeypatch.setattr(
        attempt_module, "time", types.SimpleNamespace(time=lambda: epoch_s + loop.time())
    )

    async def fn(a: Attempt) -> Any:
        index = int((a.run_id or "r-0").split("-")[1])
        if a.step == "first":
            ttft_s, total_s = 0.5, 1.0
        elif a.route == "b/m":
            ttft_s, total_s = 0.2, 1.5
        else:
            ttft_s, total_s = (5.0, 6.0) if index % 4 == 0 else (0.5, 2.0 + slow_s)
        await asyncio.sleep(ttft_s)
        yield "token"
        await asyncio.sleep(total_s - ttft_s)
        yield FINAL

    sink = MemorySink()
    executor = Executor(parse_plan(EXECUTED), ledger=Ledger(sink))

    async def main() -> None:
        async def one(i: int) -> None:
            await asyncio.sleep(10.0 * i)
            await executor.run(fn, run_id=f"r-{i}")

        await asyncio.gather(*(one(i) for i in range(400)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    path = tmp_path / "ledger.jsonl"
    path.write_text("\n".join(sink.lines) + "\n", encoding="utf-8")
    plan = tmp_path / "pair.yaml"
    plan.write_text(EXECUTED, encoding="utf-8")
    return path


def test_the_executors_own_ledger_is_observed_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real executor on a virtual clock: every figure is the one the attempts imply."""
    path = _execute(tmp_path, monkeypatch, slow_s=0.0)
    report = check_plan(tmp_path / "pair.yaml", path)
    obs = report.observation
    second = obs.step("second")
    assert (400, 0, 0) == (obs.runs, obs.missed_late, obs.missed_failed)
    # the executor's own runs are on the plan's routes, with true times: none left out
    assert ((), ()) == (obs.left_out, obs.warnings)
    assert (100, 100, 0.25) == (
        second.cutoff_attempts,
        second.extra_attempts,
        second.hedge_rate.value,
    )
    assert 0.125 == obs.extra_attempts.value
    # hedged calls: cutoff at 1.0 s, then the hedge's 1.5 s
    assert (2.0, 2.5) == pytest.approx((second.p50_s.value, second.p99_s.value), abs=1e-5)
    assert (3.0, 3.5) == pytest.approx((obs.p50_s.value, obs.p99_s.value), abs=1e-5)
    # 400 runs bound a p99 at 95 %, not at the level each of the 8 other lines is judged at
    assert {("workflow", "p99_s"), ("first", "p99_s"), ("second", "p99_s")} == {
        (x.scope, x.figure) for x in report.lines if x.verdict == CANT_TELL
    }
    assert [] == [(x.scope, x.figure) for x in report.lines if x.verdict == DRIFTED]


def test_the_executors_ledger_of_a_slower_route_drifts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run with route a/m a second slower on step second: it drifted, slower route."""
    path = _execute(tmp_path, monkeypatch, slow_s=1.0)
    report = check_plan(tmp_path / "pair.yaml", path)
    line = report.line("second", "p50_s")
    assert (DRIFTED, 1) == (line.verdict, report.exit_code)
    assert 3.0 == pytest.approx(line.observed.value, abs=1e-5)
    assert ["slower route"] == _kinds(report, "second", "p50_s")
    assert HOLDS == report.line("first", "p50_s").verdict
