"""
Tests of `tailkit check`'s rule: two intervals apart, one error rate for the family of lines.

The world and ledgers of ``tests/test_check.py``; plans given their own intervals here. Every
ledger is seeded and every figure exact, so nothing depends on the machine's speed.
"""

from __future__ import annotations

import dataclasses
import math

from pathlib import Path
from typing import Any

import pytest

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
from tailkit.check.lowlevel import at_level, line_level, rate, ratio
from tailkit.config import Plan, PlanInterval, StepInterval, parse_plan
from tests.test_check import T0, World, _line, ledger, plan_yaml


def _kinds(report: CheckReport, scope: str, figure: str) -> list[str]:
    return [c.kind for c in report.line(scope, figure).causes]


def _with_intervals(plan: Plan, share: float) -> Plan:
    """The plan with every prediction given an interval of +-``share`` of its value."""

    def around(value: float, ceiling: float = math.inf) -> tuple[float, float]:
        return (value * (1 - share), min(value * (1 + share), max(ceiling, value)))

    steps = {}
    for name, step in plan.steps.items():
        p = step.predicted
        assert p is not None
        interval = StepInterval(level=0.95, p50_s=around(p.p50_s), p99_s=around(p.p99_s),
                                hedge_rate=around(p.hedge_rate, 1.0))  # fmt: skip
        steps[name] = dataclasses.replace(step, predicted=dataclasses.replace(p, interval=interval))
    w = plan.predicted
    assert w is not None
    interval_w = PlanInterval(level=0.95, p50_s=around(w.p50_s), p99_s=around(w.p99_s),
                              miss_rate=around(w.miss_rate, 1.0),
                              extra_attempts=around(w.extra_attempts))  # fmt: skip
    return dataclasses.replace(
        plan, steps=steps, predicted=dataclasses.replace(w, interval=interval_w)
    )


def _replace_step(plan: Plan, name: str, **predicted: Any) -> Plan:
    step = plan.steps[name]
    assert step.predicted is not None
    new = dataclasses.replace(step.predicted, **predicted)
    return dataclasses.replace(
        plan, steps={**plan.steps, name: dataclasses.replace(step, predicted=new)}
    )


@pytest.fixture
def plan() -> Plan:
    """The calibrated plan of the test world, with +-10 % intervals."""
    return _with_intervals(parse_plan(plan_yaml(World())), 0.10)


# --- the rule ---------------------------------------------------------------------------------


def test_the_line_level_holds_the_family_at_the_stated_level() -> None:
    """M lines, 2m intervals, each missing (1 - level) / 2m: Bonferroni's share per interval."""
    assert 0.975 == line_level(0.95, 0) == line_level(0.95, 1)
    assert 1 - 0.05 / 32 == pytest.approx(line_level(0.95, 16))


def test_an_estimate_is_read_again_at_another_level() -> None:
    """A rate or a ratio read again at 99 % is the exact interval of its count at 99 %."""
    assert rate(12, 400, level=0.99) == at_level(rate(12, 400), 0.99)
    assert ratio(30, 900, level=0.999) == at_level(ratio(30, 900), 0.999)


def test_a_thin_prediction_that_the_old_rule_flagged_now_holds(tmp_path: Path, plan: Plan) -> None:
    """Predicted 6.5 % [4–9 %] against 8.4 % observed: outside its 95 %, 22 % off: it holds."""
    thin = _replace_step(
        plan, "draft", hedge_rate=0.065,
        interval=StepInterval(level=0.95, p50_s=(13.5, 16.5), p99_s=(35.0, 45.0),
                              hedge_rate=(0.04, 0.09)),
    )  # fmt: skip
    report = check_plan(thin, ledger(tmp_path / "l.jsonl", World(), 2000, seed=21))
    line = report.line("draft", "hedge_rate")
    # the old rule: the plan's point outside the observed 95 % interval and more than 15 % off
    assert 0.065 not in line.observed
    assert abs(0.065 - line.observed.value) > 0.15 * line.observed.value
    assert HOLDS == line.verdict
    assert line.reason.startswith("the intervals overlap at 99.")
    assert (HOLDS, 0) == (report.verdict, report.exit_code)


def test_without_an_interval_the_prediction_is_judged_from_its_basis(tmp_path: Path) -> None:
    """A plan without intervals: each line says its interval comes from the basis's calls."""
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(World(), calls=300), encoding="utf-8")
    report = check_plan(path, ledger(tmp_path / "l.jsonl", World(), 500, seed=22))
    judged = report.line("draft", "p50_s").judged
    assert judged is not None
    assert "from its basis of 300 calls (the plan has no interval)" == judged.source
    # 300 calls against 500 runs: the plan's interval is sqrt(500 / 300) times the observed's
    obs = judged.observed
    assert (judged.high - 15.0) == pytest.approx((obs.high - obs.value) * math.sqrt(500 / 300))
    assert (HOLDS, 0) == (report.verdict, report.exit_code)


def test_a_thirty_percent_slower_route_drifts_and_is_named(tmp_path: Path, plan: Plan) -> None:
    """Route a/m 30 % slower on draft, 3,000 runs: it drifted, and the cause names a/m (draft)."""
    slow = World().changed("draft", median_s=15.0 * 1.3)
    report = check_plan(plan, ledger(tmp_path / "l.jsonl", slow, 3000, seed=23))
    assert (DRIFTED, 1) == (report.verdict, report.exit_code)
    line = report.line("draft", "p50_s")
    assert DRIFTED == line.verdict
    assert "slower route" == line.causes[0].kind
    assert "a/m (draft): first attempts' p50" in (line.cause or "")
    assert HOLDS == report.line("extract", "p50_s").verdict
    assert 1 - 0.05 / (2 * report.judged) == pytest.approx(report.line_level)


# --- failed runs, outages and refusals ----------------------------------------------------------


def _outage_ledger(path: Path, runs: int, failing: int) -> Path:
    """``runs`` runs; in the first ``failing`` draft's route answers 503 twice: no winner."""
    rows = []
    for i in range(runs):
        run = f"o{i}"
        at = T0.replace(minute=i % 60, hour=9 + i // 60)
        rows.append(_line(run, "extract", 0, "primary", at, total_s=3.0, winner=True))
        rows.append(_line(run, "tag", 0, "primary", at, total_s=1.0, winner=True))
        draft_at = at.replace(second=3)
        if i < failing:
            bad = {"status": "error", "http_status": 503, "error_type": "ServiceUnavailable"}
            rows.append(_line(run, "draft", 0, "primary", draft_at, total_s=0.4, **bad))
            rows.append(_line(run, "draft", 1, "retry", draft_at.replace(microsecond=400_000),
                              total_s=0.4, attrs={"started_by": "error"}, **bad))  # fmt: skip
        else:
            rows.append(_line(run, "draft", 0, "primary", draft_at, total_s=15.0, winner=True))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_failed_runs_are_censored_never_fast_in_p50(tmp_path: Path, plan: Plan) -> None:
    """60 of 100 runs fail in half a second: the p50 is not their 3.8 s but the others' 18 s."""
    obs = observe(plan, _outage_ledger(tmp_path / "l.jsonl", 100, 60))
    assert (100, 60) == (obs.runs, obs.missed_failed)
    assert 18.0 == obs.p50_s.value  # the 40 finished runs, every failed one "more than" 3.8 s
    assert 60 == len(obs.durations.unfinished_s)
    draft = obs.step("draft")
    assert (60, 15.0) == (draft.failed_calls, draft.p50_s.value)


def test_an_outage_is_named_as_a_cause(tmp_path: Path, plan: Plan) -> None:
    """Draft's route fails 160 of 200 attempts with 503s: the miss rate drifts, outage named."""
    report = check_plan(plan, _outage_ledger(tmp_path / "l.jsonl", 120, 80))
    line = report.line(WORKFLOW, "miss_rate")
    assert DRIFTED == line.verdict
    assert "outage" in _kinds(report, WORKFLOW, "miss_rate")
    assert "a/m (draft) failed 160 of 200 attempts (80%)" in (line.cause or "")
    assert "unexplained" not in _kinds(report, WORKFLOW, "miss_rate")
    draft = report.observation.step("draft")
    assert [("a/m", 200, 160)] == [(r.route, r.attempts, r.failed) for r in draft.routes]


def test_throttle_refusals_count_as_denials_and_are_named(tmp_path: Path, plan: Plan) -> None:
    """Retries and hedges a throttle refused, and 429s, are counted and named, not unexplained."""
    rows = []
    for i in range(200):
        run, at = f"t{i}", T0.replace(hour=10 + i // 60, minute=i % 60)
        rows.append(_line(run, "extract", 0, "primary", at, total_s=3.0, winner=True))
        rows.append(_line(run, "tag", 0, "primary", at, total_s=1.0, winner=True))
        draft_at = at.replace(second=3)
        if i % 3:  # a 429: the throttle refused the retry at once; one after its Retry-After
            rows += [
                _line(run, "draft", 0, "primary", draft_at, status="rate_limited",
                      http_status=429, total_s=0.1, attrs={"retry_denied": "throttle"}),
                _line(run, "draft", 1, "retry", draft_at.replace(second=13), total_s=15.0,
                      winner=True, attrs={"started_by": "error"}),
            ]  # fmt: skip
        else:
            rows.append(_line(run, "draft", 0, "primary", draft_at, total_s=15.0, winner=True,
                              attrs={"cutoff": "ttft", "hedge_denied": "throttle"}))  # fmt: skip
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    report = check_plan(plan, path)
    draft = report.observation.step("draft")
    assert (0, 200, 133) == (draft.denied_budget, draft.denied_throttle, draft.rate_limited)
    line = report.line(WORKFLOW, "p50_s")
    assert DRIFTED == line.verdict
    assert "throttle refusals" in _kinds(report, WORKFLOW, "p50_s")
    assert "throttles refused 200 extra attempts" in (line.cause or "")
    assert "rate limited 133 attempts (429): a/m (draft) 133" in (line.cause or "")
    assert "throttle refusals" in _kinds(report, "draft", "hedge_rate")


def test_cant_tell_lines_stay_out_of_the_family(tmp_path: Path, plan: Plan) -> None:
    """40 runs: the p99s can't tell and say why; the family is the lines that can."""
    report = check_observation(plan, observe(plan, ledger(tmp_path / "l.jsonl", World(), 40,
                                                          seed=24)))  # fmt: skip
    cant = [x for x in report.lines if x.verdict == CANT_TELL]
    assert {x.figure for x in cant} == {"p99_s"}
    assert all("a p99 needs at least" in x.reason for x in cant)
    assert report.judged == len(report.lines) - len(cant)
    assert 1 - 0.05 / (2 * report.judged) == pytest.approx(report.line_level)
