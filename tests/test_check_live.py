"""
`tailkit check` on a plan that routes live: its decisions on the ledger, judged.

One live step, ``draft``: candidates ``a/m`` (fast) and ``b/m`` (slow), a total cutoff that
follows the chosen route within [10, 30] s, a hedge to ``c/m`` (not a candidate). The ledger
is written as the executor writes a live step's first attempts (``attrs.live``,
``live_value_s``, ``live_calls``, ``live_cutoff_s``): the best route every time but every
``explore_every``-th decision. The plan's predictions are the world's own figures (a large
sample of the same generator), so a faithful ledger holds and each departure shows on its line.
"""

from __future__ import annotations

import json
import math

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from typer.testing import CliRunner

from tailkit.check import CANT_TELL, DRIFTED, HOLDS, check_plan, observe
from tailkit.cli import app


T0 = datetime(2026, 12, 6, 8, 0, 0, tzinfo=UTC)
EVERY = 5
runner = CliRunner()


@dataclass(frozen=True)
class Executor:
    """How the executor that wrote the ledger behaved (the faithful one by default)."""

    explore_every: int = EVERY
    live: bool = True  # writes its decisions
    cutoff_shift_s: float = 0.0  # added to every live cutoff (out of bounds when large)
    off_every: int = 0  # every n-th first attempt goes to c/m, not a candidate
    rerouted: bool = False  # ... and says a breaker moved it there


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _line(
    run: str, attempt: int, role: str, route: str, start: datetime, **kw: Any
) -> dict[str, Any]:
    provider, model = route.split("/")
    record: dict[str, Any] = {
        "call_id": f"{run}-draft-{attempt}", "run_id": run, "step": "draft",
        "attempt": attempt, "role": role, "provider": provider, "model": model,
        "started_at": _iso(start), "ttft_s": None, "total_s": None, "input_tokens": 500,
        "output_tokens": None, "status": "ok", "error_type": None, "http_status": None,
        "censored_at_s": None, "abandoned": False, "idempotency_key": f"{run}-draft",
        "deadline_at": None, "winner": False, "attrs": {},
    }  # fmt: skip
    record.update(kw)
    return record


def _runs(
    runs: int, executor: Executor, *, seed: int
) -> tuple[list[dict[str, Any]], list[float], int]:
    """The ledger lines of ``runs`` runs, their durations, and the hedges among them."""
    rng = np.random.default_rng(seed)
    lines: list[dict[str, Any]] = []
    durations: list[float] = []
    hedges = 0
    for i in range(runs):
        run, start = f"run-{seed}-{i:05d}", T0 + timedelta(seconds=90.0 * i)
        explore = (
            executor.explore_every > 0 and i % executor.explore_every == executor.explore_every - 1
        )
        route = "b/m" if explore else "a/m"
        if executor.off_every and i % executor.off_every == 0:
            route = "c/m"
        median = {"a/m": 10.0, "b/m": 14.0, "c/m": 9.0}[route]
        took = float(median * math.exp(0.3 * rng.standard_normal()))
        cutoff = min(max(median * 1.5, 10.0), 30.0) + executor.cutoff_shift_s
        attrs: dict[str, Any] = {}
        if executor.live:
            attrs = {"live": "explore" if explore else "best", "live_value_s": cutoff,
                     "live_calls": min(i, 50), "live_cutoff_s": cutoff}  # fmt: skip
        if executor.rerouted and route == "c/m":
            attrs["rerouted"] = "a/m: provider a's breaker is open (5 failures)"
        if took <= cutoff:
            lines.append(_line(run, 0, "primary", route, start, total_s=took, winner=True,
                               attrs=attrs))  # fmt: skip
            durations.append(took)
            continue
        hedges += 1
        second = float(9.0 * math.exp(0.3 * rng.standard_normal()))
        lines.append(_line(run, 0, "primary", route, start, status="cancelled",
                           censored_at_s=cutoff, attrs={**attrs, "cutoff": "total"}))  # fmt: skip
        hedge_at = start + timedelta(seconds=cutoff)
        lines.append(_line(run, 1, "hedge", "c/m", hedge_at, total_s=second, winner=True,
                           attrs={"started_by": "cutoff"}))  # fmt: skip
        durations.append(cutoff + second)
    return lines, durations, hedges


def plan_yaml(*, explore_every: int = EVERY, live: bool = True) -> str:
    """The live plan, its predictions the faithful executor's figures over 20,000 runs."""
    _, took, hedges = _runs(20_000, Executor(explore_every=explore_every), seed=999)
    p50, p99 = np.quantile(took, [0.5, 0.99])
    rate = hedges / len(took)
    miss = float(np.mean(np.asarray(took) > 60.0))
    live_block = (
        f"    live: {{quantile: 0.9, cutoff_bounds_s: [10.0, 30.0], prior_s: {{a/m: 15.0, "
        f"b/m: 21.0}}, window: 50, min_calls: 5, explore_every: {explore_every}}}\n"
        if live
        else ""
    )
    return (
        "tailkit_plan: 1\nworkflow: live\ndeadline_s: 60\nhedge_budget: 0.3\nroutes:\n"
        "  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "  c/m: {provider: c, model: m}\nsteps:\n  draft:\n    route: a/m\n"
        "    candidates: [a/m, b/m]\n    signal: total\n    cutoff_s: 15.0\n"
        "    on_cutoff: hedge\n    hedge_route: c/m\n" + live_block
        + f"    predicted: {{p50_s: {p50:.4f}, p99_s: {p99:.4f}, hedge_rate: {rate:.5f}}}\n"
        "    basis: {calls: 5000, bucket: 'in 0-1k / out 0-64', quantile: 0.9, censored: 0.0}\n"
        f"predicted: {{p50_s: {p50:.4f}, p99_s: {p99:.4f}, miss_rate: {miss:.5f}, "
        f"extra_attempts: {rate:.5f}}}\n"
    )  # fmt: skip


def write(tmp_path: Path, executor: Executor, *, runs: int = 500, seed: int = 1) -> Path:
    """A ledger of ``runs`` runs by ``executor``."""
    lines, _, _ = _runs(runs, executor, seed=seed)
    path = tmp_path / f"ledger-{seed}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    """The live plan's file."""
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(), encoding="utf-8")
    return path


def test_a_faithful_live_ledger_is_the_plans_and_holds(plan: Path, tmp_path: Path) -> None:
    """First attempts on a second candidate are on the plan: nothing left out, every line holds."""
    report = check_plan(plan, write(tmp_path, Executor()))
    obs = report.observation
    assert (500, 0) == (obs.runs, obs.left_out_route)
    assert 0 == report.exit_code, [(x.scope, x.figure, x.reason) for x in report.drifted]
    live = obs.step("draft").live
    assert live is not None
    assert (500, 100, 0) == (live.decisions, live.explored, live.undecided)
    assert [("a/m", 400), ("b/m", 100)] == [(r.route, r.first_attempts) for r in live.routes]
    explore = report.line("draft", "explore_share")
    assert (HOLDS, 0.2, 0.2) == (explore.verdict, explore.predicted, explore.observed.value)
    assert explore.judged is not None  # one of the family
    for figure in ("off_bounds", "off_candidates"):
        line = report.line("draft", figure)
        assert (HOLDS, None) == (line.verdict, line.judged), figure
    assert "within [10.00 s–30.00 s]" in report.line("draft", "off_bounds").reason


def test_route_shares_without_a_prediction_cant_tell(plan: Path, tmp_path: Path) -> None:
    """The plan states no share per route: each route's share is shown, and can't tell."""
    report = check_plan(plan, write(tmp_path, Executor()))
    line = report.line("draft", "route_share", "a/m")
    assert CANT_TELL == line.verdict
    assert (0.8, 500) == (line.observed.value, line.observed.n)
    assert line.observed.low < 0.8 < line.observed.high
    assert "states no prediction" in line.reason


def test_route_shares_are_judged_against_a_prediction(plan: Path, tmp_path: Path) -> None:
    """Given the simulation's shares, they hold when they match and drift when they do not."""
    ledger = write(tmp_path, Executor())
    held = check_plan(plan, ledger, route_shares={"draft": {"a/m": 0.8, "b/m": 0.2}})
    assert HOLDS == held.line("draft", "route_share", "a/m").verdict
    assert 0 == held.exit_code
    off = check_plan(plan, ledger, route_shares={"draft": {"a/m": 0.5, "b/m": 0.5}})
    line = off.line("draft", "route_share", "b/m")
    assert DRIFTED == line.verdict
    assert 1 == off.exit_code
    assert ["slower route"] == [c.kind for c in line.causes]
    assert "b/m took 20% of the first attempts against 50% predicted" in line.causes[0].detail


def test_a_live_cutoff_outside_the_bounds_is_a_finding(plan: Path, tmp_path: Path) -> None:
    """Cutoffs past cutoff_bounds_s: the line drifts, naming the first line that shows it."""
    ledger = write(tmp_path, Executor(cutoff_shift_s=12.0))  # b/m: 21 s + 12 > 30 s
    report = check_plan(plan, ledger)
    line = report.line("draft", "off_bounds")
    assert (DRIFTED, None, 1) == (line.verdict, line.judged, report.exit_code)
    assert (100, 500) == (round(line.observed.value * line.observed.n), line.observed.n)
    assert ["executor off plan"] == [c.kind for c in line.causes]
    assert f"{ledger.name} line" in line.causes[0].detail
    assert "live cutoff 33.00 s" in line.causes[0].detail


def test_a_first_attempt_off_the_candidates_is_a_finding(plan: Path, tmp_path: Path) -> None:
    """A first attempt on the hedge route (not a candidate) drifts; one a breaker moved holds."""
    report = check_plan(plan, write(tmp_path, Executor(off_every=25)))
    line = report.line("draft", "off_candidates")
    assert (DRIFTED, 1) == (line.verdict, report.exit_code)
    assert 20 == round(line.observed.value * line.observed.n)
    assert "first attempt on c/m" in line.causes[0].detail
    moved = check_plan(plan, write(tmp_path, Executor(off_every=25, rerouted=True), seed=2))
    assert HOLDS == moved.line("draft", "off_candidates").verdict
    live = moved.observation.step("draft").live
    assert live is not None
    assert 20 == live.rerouted
    assert any("moved by a breaker" in n for n in moved.observation.notes)


def test_exploring_more_than_the_plan_says_drifts(plan: Path, tmp_path: Path) -> None:
    """An executor exploring one decision in two, where the plan says one in five, drifts."""
    report = check_plan(plan, write(tmp_path, Executor(explore_every=2)))
    line = report.line("draft", "explore_share")
    assert (DRIFTED, 0.5) == (line.verdict, line.observed.value)
    assert ["executor off plan"] == [c.kind for c in line.causes]


def test_a_ledger_without_decisions_cant_tell_its_live_lines(plan: Path, tmp_path: Path) -> None:
    """An executor that routed the live step as fixed: its live lines can't tell, with a note."""
    report = check_plan(plan, write(tmp_path, Executor(live=False, explore_every=0)))
    assert CANT_TELL == report.line("draft", "explore_share").verdict
    assert CANT_TELL == report.line("draft", "off_bounds").verdict
    assert any("carries a live decision" in n for n in report.observation.notes)


def test_a_fixed_plan_has_no_live_lines(tmp_path: Path) -> None:
    """Without a live block, a step's candidates are its routes, and nothing live is judged."""
    path = tmp_path / "fixed.yaml"
    path.write_text(plan_yaml(live=False), encoding="utf-8")
    report = check_plan(path, write(tmp_path, Executor(live=False)))
    assert 0 == report.observation.left_out_route
    assert {"p50_s", "p99_s", "hedge_rate"} == {
        x.figure for x in report.lines if x.scope == "draft"
    }
    assert observe(path, write(tmp_path, Executor(live=False))).step("draft").live is None


def test_cli_shows_the_live_lines_in_text_quiet_and_json(plan: Path, tmp_path: Path) -> None:
    """The table names each route's share and the findings; --json keeps them under the step."""
    ledger = str(write(tmp_path, Executor(cutoff_shift_s=12.0)))
    result = runner.invoke(app, ["check", str(plan), ledger])
    assert 1 == result.exit_code, result.output
    shown = (
        "explored",
        "first to a/m",
        "first to b/m",
        "live cutoffs off bounds",
        "first attempts off candidates",
        "executor off plan",
        "findings, not estimates",
    )
    for said in shown:
        assert said in result.output, said
    quiet = runner.invoke(app, ["check", str(plan), ledger, "--quiet"])
    assert 1 == quiet.exit_code
    assert quiet.output.startswith("drifted: ")
    doc = json.loads(runner.invoke(app, ["check", str(plan), ledger, "--json"]).output)
    (step,) = doc["steps"]
    assert (500, 100) == (step["live"]["decisions"], step["live"]["explored"])
    assert {"a/m", "b/m"} == set(step["route_share"])
    assert "can't tell" == step["route_share"]["a/m"]["verdict"]
    assert "drifted" == step["off_bounds"]["verdict"]
    assert "judged" not in step["off_bounds"]
    assert "holds" == step["explore_share"]["verdict"]
