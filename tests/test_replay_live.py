"""
`tailkit replay` of a plan that routes live: candidates served, live routing simulated alike.

A step with two candidate routes, ``a/m`` (a light tail) and ``b/m`` (a heavy one: three calls
in ten stall three times longer), so that live routing's choice matters: the executor should
send most first attempts to ``a/m`` and every ``explore_every``-th to ``b/m``. The replay
serves both from the store, runs the executor (which follows ``live`` blocks), simulates the
live model as rehearsals in batches of the rehearsal's own runs in flight, and compares each
side's figures and the share of first attempts per route; served slower than measured, a route
loses its share and the replay differs.
"""

from __future__ import annotations

import dataclasses
import json
import math

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rich.console import Console

from tailkit.calibration import calibrate
from tailkit.check import observe
from tailkit.cli._replay import render_replay
from tailkit.config import LiveRouting, Plan, parse_plan
from tailkit.ingest import ingest_paths
from tailkit.replay import ReplayResult, replay
from tailkit.replay._tables import ServedModels, served_models
from tailkit.replay.lowlevel import MAX_ERROR_SHARE, runs_in_flight
from tailkit.simulation import RouteSample
from tailkit.store import Store


RUNS = 100
DRIFT_RUNS = 60

WORKFLOW = """
tailkit_plan: 1
workflow: pick
deadline_s: 90
hedge_budget: 0.2
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
steps:
  draft:
    route: a/m
    candidates: [a/m, b/m]
    expected_tokens: {input: 2000, output: 300}
    hedge_route: c/m
"""
# per route: median total seconds, the share of calls that stall, how much longer they take
ROUTES = {"a": (20.0, 0.03, 3.0), "b": (22.0, 0.3, 3.0), "c": (21.0, 0.0, 1.0)}
EXPLORE_EVERY = 10


def _calls(path: Path, *, per_route: int = 1500, seed: int = 1) -> None:
    """A log of three routes: lognormal calls, some stalled; b/m's tail is the heavy one."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as out:
        for provider, (median, stalls, slower) in ROUTES.items():
            for i in range(per_route):
                total = median * math.exp(0.2 * rng.standard_normal())
                if rng.random() < stalls:
                    total *= slower
                row = {
                    "call_id": f"{provider}-{i}", "provider": provider, "model": "m",
                    "input_tokens": 2000, "output_tokens": 300, "status": "ok",
                    "ttft_s": round(0.3 * total, 4), "total_s": round(total, 4),
                }  # fmt: skip
                out.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Plan]:
    """A store of the three routes, and the workflow calibrated live (explore every 10th)."""
    folder = tmp_path_factory.mktemp("replay-live")
    _calls(folder / "calls.jsonl")
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [folder / "calls.jsonl"]).ok
        found = calibrate(
            store, parse_plan(WORKFLOW), runs=4000, check_runs=20_000, seed=2, live=True,
            replicates=0,
        )  # fmt: skip
    step = found.plan.steps["draft"]
    assert step.live is not None
    # explore often enough that a short rehearsal sees the other route
    step = dataclasses.replace(
        step,
        live=dataclasses.replace(step.live, explore_every=EXPLORE_EVERY, window=50, min_calls=10),
    )
    return db, dataclasses.replace(found.plan, steps={"draft": step})


def _judged(result: ReplayResult) -> bool:
    """Whether the replay kept time; else it must say it can't tell, and why."""
    found = result.fidelity
    if found.ok:
        return True
    assert found.error_share > MAX_ERROR_SHARE, found.describe()
    assert "can't tell" == result.verdict
    assert any("too busy for the figures to mean anything" in n for n in result.notes)
    return False


@pytest.mark.slow
def test_replay_agrees_with_the_simulation_of_a_plan_that_routes_live(
    live: tuple[Path, Plan], tmp_path: Path
) -> None:
    """The executor's live choices and figures agree with the live model simulated alike."""
    db, plan = live
    with Store.open(db, read_only=True) as store:
        result = replay(store, plan, runs=RUNS, out_dir=tmp_path, seed=1)
    before, after = result.sides
    assert () == before.shares
    assert before.concurrency is None
    assert after.concurrency is not None
    assert after.concurrency >= 1
    assert any("simulated from a fresh start, in batches of" in n for n in result.notes)
    shares = {line.route: line for line in after.shares}
    assert {"a/m", "b/m"} == set(shares)
    # one executor: every EXPLORE_EVERY-th decision explores; the light tail wins most others
    seen = observe(plan, [after.ledger]).step("draft").live
    assert seen is not None
    assert (RUNS, RUNS // EXPLORE_EVERY) == (seen.decisions, seen.explored)
    assert 0 == seen.off_bounds == seen.off_candidates
    assert shares["a/m"].observed.value > 0.7
    assert shares["a/m"].predicted > 0.7
    if not _judged(result):
        return
    assert "agrees" == after.verdict, after.to_json()
    assert "agrees" == result.verdict, [s.to_json() for s in result.sides]
    doc = result.to_json()["sides"][1]
    assert {"a/m", "b/m"} == {x["route"] for x in doc["route_shares"]}
    console = Console(record=True, width=140)
    render_replay(result, console)
    assert "draft: first to b/m" in console.export_text()


def _slowed(route: str, factor: float) -> Callable[..., ServedModels]:
    """`served_models`, with one route's served latencies ``factor`` times the measured ones."""

    def served(plan: Plan, samples: Any, **kw: Any) -> ServedModels:
        found = served_models(plan, samples, **kw)
        tables = dict(found.tables)
        model = found.ids[("draft", route)]
        table, chunk = tables[model]

        def times(values: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(factor * v for v in values)

        pause = None if table.pause_s is None else times(table.pause_s)
        pause_at = None if table.pause_at_s is None else times(table.pause_at_s)
        slower = dataclasses.replace(
            table, ttft_s=times(table.ttft_s), total_s=times(table.total_s), pause_s=pause,
            pause_at_s=pause_at,
        )  # fmt: skip
        tables[model] = (slower, chunk)
        return dataclasses.replace(found, tables=tables)

    return served


@pytest.mark.slow
def test_replay_differs_when_the_served_route_drifted(
    live: tuple[Path, Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a/m served five times slower than measured: live routing leaves it, the shares differ."""
    db, plan = live
    monkeypatch.setattr("tailkit.replay._replay.served_models", _slowed("a/m", 5.0))
    with Store.open(db, read_only=True) as store:
        result = replay(store, plan, runs=DRIFT_RUNS, out_dir=tmp_path, seed=1)
    after = result.sides[1]
    shares = {line.route: line for line in after.shares}
    # the simulation, on the measured calls, keeps a/m; the executor sees it slow and leaves it
    assert shares["a/m"].predicted > 0.7
    assert shares["a/m"].observed.value < 0.7
    assert not shares["a/m"].agrees
    assert not shares["b/m"].agrees
    assert "differs" == after.verdict
    assert result.verdict in ("differs", "can't tell")


PLAN = """
tailkit_plan: 1
workflow: pick
deadline_s: 40
hedge_budget: 0.2
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
steps:
  draft:
    route: a/m
    candidates: [a/m, b/m]
    expected_tokens: {input: 2000, output: 300}
    signal: total
    cutoff_s: 8
    on_cutoff: hedge
    hedge_route: c/m
"""


def test_every_candidate_route_is_served() -> None:
    """A step's candidates are served beside its route and hedge route, each its own model."""
    plan = parse_plan(PLAN)
    step = dataclasses.replace(
        plan.steps["draft"],
        live=LiveRouting(
            quantile=0.9, cutoff_bounds_s=(5.0, 20.0), prior_s={"a/m": 6.0, "b/m": 9.0}
        ),
    )
    plan = dataclasses.replace(plan, steps={"draft": step})
    rng = np.random.default_rng(0)
    samples = {
        ("draft", r): RouteSample.from_latencies(np.sort(rng.lognormal(1.5, 0.3, 400)))
        for r in ("a/m", "b/m", "c/m")
    }
    served = served_models(plan, samples)
    assert {("draft", "a/m"), ("draft", "b/m"), ("draft", "c/m")} == set(served.ids)
    assert 3 == len(served.tables)


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def test_runs_in_flight_is_the_mean_count_when_a_run_starts(tmp_path: Path) -> None:
    """Runs 1 s apart that last 3.5 s: each starts beside the three before it, four in flight."""
    t0 = datetime(2026, 12, 6, tzinfo=UTC)
    lines = []
    for i in range(200):
        start = t0 + timedelta(seconds=i)
        for step, offset, took in (("a", 0.0, 1.5), ("b", 1.5, 2.0)):
            at = _iso(start + timedelta(seconds=offset))
            lines.append({"run_id": f"r{i}", "step": step, "started_at": at, "total_s": took})
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    found = runs_in_flight(ledger)
    assert (1 + 2 + 3 + 4 * 197) / 200 == pytest.approx(found)  # the first three: fewer
    one = tmp_path / "one.jsonl"
    one.write_text("".join(json.dumps(x) + "\n" for x in lines[:2]), encoding="utf-8")
    assert 1.0 == runs_in_flight(one)
    assert not math.isnan(found)
