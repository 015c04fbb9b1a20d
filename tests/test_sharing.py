"""
What a repeat attempt shares: the coupled draws, the estimate from the store, and the truth.

The ground truth is the repository's paired world (`tailkit.demo._paired`): jobs with a size
and hidden work, served on several routes with their own noise, transient stalls and provider
spells. It is not a Gaussian copula, so a prediction that holds against it holds against
something other than the simulator's own assumption.
"""

from __future__ import annotations

import dataclasses
import json

from pathlib import Path

import numpy as np
import pytest

from scipy import stats

from tailkit.calibration import calibrate, predict
from tailkit.config import Basis, Plan, Shared, parse_plan
from tailkit.demo._paired import PairedRoute, PairedWorld, benchmark_calls, truth_miss_rate
from tailkit.ingest import ingest_paths
from tailkit.simulation import RouteSample, estimate_sharing
from tailkit.simulation._couple import couple
from tailkit.simulation._sample import TABLE
from tailkit.simulation._sharing import ESCAPE_RANK, SLOW_RANK, _slow_share, tail_correlation
from tailkit.simulation.lowlevel import (
    default_as_independent,
    independent_sharing,
    resample_sharing,
)
from tailkit.store import Store


WORLD = PairedWorld({
    "a/m1": PairedRoute("a", "m1", 3.0),
    "b/m1": PairedRoute("b", "m1", 3.3),
    "a/m2": PairedRoute("a", "m2", 2.0, hidden_exp=1.2),
    "c/m2": PairedRoute("c", "m2", 2.2, hidden_exp=1.2),
    "a/m3": PairedRoute("a", "m3", 4.0),
    "c/m3": PairedRoute("c", "m3", 4.5),
})  # fmt: skip

WORKFLOW = """
tailkit_plan: 1
workflow: paired
deadline_s: 24
hedge_budget: 0.05
routes:
  a/m1: {provider: a, model: m1}
  b/m1: {provider: b, model: m1}
  a/m2: {provider: a, model: m2}
  c/m2: {provider: c, model: m2}
  a/m3: {provider: a, model: m3}
  c/m3: {provider: c, model: m3}
steps:
  s1: {route: a/m1, hedge_route: b/m1}
  s2: {route: a/m2, depends_on: [s1], hedge_route: c/m2}
  s3: {route: a/m3, depends_on: [s2], hedge_route: c/m3}
"""


@pytest.fixture(scope="module")
def paired_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a benchmark of 4,000 jobs run on every route of the world."""
    folder = tmp_path_factory.mktemp("paired")
    rows = benchmark_calls(WORLD, jobs=4000, seed=1)
    (folder / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / "calls.duckdb"
    with Store.open(path) as store:
        assert ingest_paths(store, [folder / "bench.jsonl"]).ok
    return path


def test_coupling_keeps_each_route_as_measured() -> None:
    """A coupled repeat's draws are still uniform over its table: the route's latency is kept."""
    rng = np.random.default_rng(0)
    route = RouteSample.lognormal(5.0, 0.6, error_rate=0.05)
    first = rng.integers(0, TABLE, 200_000).astype(np.uint16)
    raw = rng.integers(0, TABLE, 200_000).astype(np.uint16)

    repeat = couple(first, raw, 0.7, route, route)

    assert stats.kstest(repeat / TABLE, "uniform").pvalue > 1e-3
    assert ((repeat >= route.ok_entries) == (raw >= route.ok_entries)).all()


@pytest.mark.parametrize("rho", [0.0, 0.4, 0.8])
def test_a_slow_first_attempt_finds_its_repeat_slow_as_the_copula_says(rho: float) -> None:
    """Beyond its p95, a first attempt's repeat passes its p75 as often as rho implies."""
    rng = np.random.default_rng(1)
    route = RouteSample.lognormal(5.0, 0.6)
    first = rng.integers(0, TABLE, 400_000).astype(np.uint16)
    raw = rng.integers(0, TABLE, 400_000).astype(np.uint16)

    repeat = couple(first, raw, rho, route, route)
    slow = first > SLOW_RANK * TABLE
    share = float((repeat[slow] > ESCAPE_RANK * TABLE).mean())

    assert share == pytest.approx(_slow_share(rho, SLOW_RANK), abs=0.01)
    assert tail_correlation(share) == pytest.approx(rho, abs=0.03)


def test_job_keys_are_the_evidence_and_say_so(paired_store: Path) -> None:
    """Jobs run on several routes give every step its sharing, its source and the job count."""
    plan = parse_plan(WORKFLOW)
    with Store.open(paired_store, read_only=True) as store:
        sharing = estimate_sharing(store, plan)

    assert set(sharing) == {"s1", "s2", "s3"}
    for shared in sharing.values():
        assert shared.source == "job keys"
        assert "4000 jobs" in shared.evidence or "jobs also run" in shared.evidence
        assert 0.2 < shared.other_provider < 0.8
        assert shared.same_provider >= shared.other_provider


def test_without_evidence_the_default_is_stated(tmp_path: Path) -> None:
    """No job keys, no tokens, no start times: the conservative default, said to be one."""
    rows = [
        {"call_id": str(i), "provider": "p", "model": "m", "total_s": float(x), "status": "ok"}
        for i, x in enumerate(np.random.default_rng(2).lognormal(1.0, 0.5, 300))
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = parse_plan(
        "tailkit_plan: 1\nworkflow: w\ndeadline_s: 30\nroutes: {p/m: {provider: p, model: m}}\n"
        "steps: {s: {route: p/m}}\n"
    )
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [tmp_path / "c.jsonl"])
        shared = estimate_sharing(store, plan)["s"]

    assert ("default", 0.75) == (shared.source, shared.other_provider)
    assert "conservative default" in shared.evidence
    assert "no start times" in shared.evidence


def test_a_default_is_a_range_down_to_independent_repeats() -> None:
    """Bootstrap draws of a default span [0, default]; measured and assumed ones stay put."""
    plan = parse_plan(
        "tailkit_plan: 1\nworkflow: w\ndeadline_s: 30\nroutes: {p/m: {provider: p, model: m}}\n"
        "steps: {s: {route: p/m}, t: {route: p/m, depends_on: [s]}}\n"
    )
    sharing = {
        "s": Shared(0.75, 0.85, "default", "no evidence"),
        "t": Shared(0.3, 0.4, "size regression", "a lower bound"),
    }
    rng = np.random.default_rng(4)
    draws = [resample_sharing(plan, sharing, rng) for _ in range(400)]
    works = np.array([d["s"].other_provider for d in draws])
    assert 0.0 <= works.min() < 0.05
    assert 0.70 < works.max() <= 0.75
    assert all(abs(d["s"].same_provider - d["s"].other_provider - 0.1) < 1e-9 for d in draws)
    assert all(d["t"] == sharing["t"] for d in draws)

    steps = {
        name: dataclasses.replace(
            step,
            basis=Basis(calls=300, bucket="b", quantile=None, censored=0.0, shared=sharing[name]),
        )
        for name, step in plan.steps.items()
    }
    with_basis = dataclasses.replace(plan, steps=steps)
    low = default_as_independent(with_basis)
    assert low is not None
    assert (0.0, 0.0, "assumed") == (
        low["s"].other_provider,
        low["s"].same_provider,
        low["s"].source,
    )
    assert sharing["t"] == low["t"]
    assert default_as_independent(plan) is None  # nothing stated, nothing to span


def _gain(store: Store, plan: Plan, sharing: dict[str, Shared] | None) -> tuple[Plan, float]:
    cal = calibrate(store, plan, sharing=sharing, runs=20_000, check_runs=100_000, replicates=0)
    used = {name: step.basis.shared for name, step in cal.plan.steps.items()}
    none = predict(store, cal.plan, policy="none", replicates=0, sharing=used)  # type: ignore[arg-type]
    return cal.plan, none.miss_rate.value - cal.prediction.miss_rate.value


@pytest.mark.slow
def test_the_gain_a_plan_promises_comes_true_where_repeats_share_the_job(
    paired_store: Path,
) -> None:
    """Paired evidence predicts the world's gain over no plan; independence promises ~2x it."""
    workflow = parse_plan(WORKFLOW)
    with Store.open(paired_store, read_only=True) as store:
        shared_plan, shared_gain = _gain(store, workflow, None)
        free_plan, free_gain = _gain(store, workflow, independent_sharing(workflow))
    truth_none = truth_miss_rate(WORLD, workflow, runs=400_000, seed=3)
    truth_shared = truth_none - truth_miss_rate(WORLD, shared_plan, runs=400_000, seed=3)
    truth_free = truth_none - truth_miss_rate(WORLD, free_plan, runs=400_000, seed=3)

    assert truth_shared > 0.0
    assert shared_gain == pytest.approx(truth_shared, rel=0.35)
    assert free_gain > 1.5 * truth_free


def test_repeat_attempts_in_ledgers_are_the_evidence(tmp_path: Path) -> None:
    """Slow first attempts and their hedges, linked by idempotency key, measure the sharing."""
    rng = np.random.default_rng(5)
    n = 20_000
    tokens, hidden = WORLD.jobs(rng, n)
    spells = WORLD.spells(rng, n)
    first = WORLD.attempt_s("a/m3", tokens, hidden, spells["a"], rng)
    hedge = WORLD.attempt_s("c/m3", tokens, hidden, spells["c"], rng)
    cutoff = float(np.quantile(first, SLOW_RANK))
    rows: list[dict[str, object]] = []
    for i in range(n):
        key = f"k{i}"
        cut = first[i] > cutoff
        rows.append({
            "call_id": f"f{i}", "provider": "a", "model": "m3", "attempt": 0, "role": "primary",
            "status": "cancelled" if cut else "ok", "total_s": None if cut else float(first[i]),
            "censored_at_s": cutoff if cut else None, "idempotency_key": key,
        })  # fmt: skip
        if cut:
            rows.append({
                "call_id": f"h{i}", "provider": "c", "model": "m3", "attempt": 1, "role": "hedge",
                "status": "ok", "total_s": float(hedge[i]), "idempotency_key": key,
            })  # fmt: skip
    for i in range(2_000):  # the hedge route's own first attempts: its p75
        rows.append({
            "call_id": f"c{i}", "provider": "c", "model": "m3", "attempt": 0, "status": "ok",
            "total_s": float(WORLD.attempt_s("c/m3", *WORLD.jobs(rng, 1), np.ones(1), rng)[0]),
        })  # fmt: skip
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = parse_plan(
        "tailkit_plan: 1\nworkflow: w\ndeadline_s: 60\nroutes: {a/m3: {provider: a, model: m3}, "
        "c/m3: {provider: c, model: m3}}\nsteps: {s: {route: a/m3, hedge_route: c/m3}}\n"
    )
    with Store.open(tmp_path / "s.duckdb") as store:
        assert ingest_paths(store, [tmp_path / "ledger.jsonl"]).ok
        shared = estimate_sharing(store, plan)["s"]
    slow = first > cutoff
    truth = tail_correlation(float((hedge[slow] > np.quantile(hedge, ESCAPE_RANK)).mean()))

    assert shared.source == "repeat attempts"
    assert "repeats on another provider" in shared.evidence
    assert shared.other_provider == pytest.approx(truth, abs=0.12)
    assert shared.other_provider > 0.2
