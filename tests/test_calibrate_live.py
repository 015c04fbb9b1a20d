"""
``calibrate(live=True)`` / ``--live``: the ``live`` blocks the executor routes by.
"""

from __future__ import annotations

import math

from pathlib import Path

import numpy as np
import pytest

from typer.testing import CliRunner

from tailkit.calibration import ROUTING_QUANTILE, Calibration
from tailkit.calibration._live import live_routing
from tailkit.cli import app
from tailkit.config import Basis, Step, load_plan, write_plan
from tailkit.fit import quantile
from tailkit.store import Store

from .test_calibrate_routes import ONE_STEP, run, store_of, workflow


STEPS = ONE_STEP.format(route="a/m", candidates="a/m, b/n") + (
    "  after:\n    depends_on: [ask]\n    route: a/m\n"
    "    expected_tokens: {input: 2000, output: 350}\n"
    "  note:\n    depends_on: [ask]\n    route: b/n\n    idempotent: false\n"
    "    expected_tokens: {input: 2000, output: 350}\n"
)
DEADLINE = 25.0


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a/m with a heavy tail (8 % of calls 8x slower), b/n without."""
    return store_of(tmp_path_factory.mktemp("live"), {"a/m": {"tail": 0.08}, "b/n": {}})


@pytest.fixture(scope="module")
def live(db: Path) -> Calibration:
    """The three-step workflow calibrated with live blocks."""
    return run(db, workflow(STEPS, deadline=DEADLINE), live=True)


def _latency(db: Path, route: str) -> np.ndarray:
    provider, model = route.split("/")
    with Store.open(db, read_only=True) as store:
        rows = store.fetchall(
            "SELECT total_s FROM calls WHERE provider = ? AND model = ?", [provider, model]
        )
    return np.sort(np.asarray([r[0] for r in rows], dtype=np.float64))


def test_live_blocks_are_written_and_load_back(live: Calibration, tmp_path: Path) -> None:
    """A step with candidates and one with a cutoff get a block; one that waits does not."""
    plan = live.plan
    ask, after, note = (plan.steps[n] for n in ("ask", "after", "note"))
    assert ask.live is not None
    assert set(ask.live.prior_s) == set(ask.candidates) == {"a/m", "b/n"}
    assert after.cutoff_s is not None or after.ttft_cutoff_s is not None
    assert after.live is not None
    assert set(after.live.prior_s) == {"a/m"}
    assert after.live.explore_every == 0  # one route: nothing to explore
    assert ask.live.explore_every == 50
    assert note.on_cutoff == "wait"
    assert note.live is None  # one route, no cutoff: nothing to follow
    out = tmp_path / "plan.yaml"
    write_plan(plan, out)
    assert load_plan(out) == plan


def test_priors_are_the_route_samples_quantiles(live: Calibration, db: Path) -> None:
    """Each prior is the block's quantile of that route's measured latency."""
    for name in ("ask", "after"):
        step = live.plan.steps[name]
        block = step.live
        assert block is not None
        assert step.basis is not None
        has_cutoff = (step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s) is not None
        expected_q = step.basis.quantile if has_cutoff else ROUTING_QUANTILE
        assert block.quantile == expected_q
        for route, prior in block.prior_s.items():
            measured = quantile(_latency(db, route), block.quantile, presorted=True)
            assert prior == pytest.approx(measured, abs=1e-3), (name, route)
            assert prior == round(live.samples[(name, route)].quantile(block.quantile), 3)


def test_bounds_hold_the_cutoff_and_the_priors_below_the_deadline(live: Calibration) -> None:
    """0 < low <= high < deadline; the cutoff is the top (it follows down), or priors inside."""
    for step in live.plan.steps.values():
        block = step.live
        if block is None:
            continue
        low, high = block.cutoff_bounds_s
        cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
        assert 0 < low <= high < DEADLINE
        if cutoff is not None:
            assert (low, high) == (round(cutoff / 2, 3), cutoff)
        else:  # routing only: around the priors, which nothing clamps
            assert all(low <= seconds <= high for seconds in block.prior_s.values())
        assert block.window >= 10 / (1 - block.quantile) - 1e-9
        assert block.min_calls <= block.window
        assert math.ceil(block.quantile * block.min_calls) < block.min_calls


def test_quantile_windows_and_caps(live: Calibration) -> None:
    """A p99 reads 1,000 calls and needs 100; a cutoff near the deadline caps below it."""
    basis = Basis(calls=1, bucket="b", quantile=0.99, censored=0.0)
    step = Step(name="s", route="a/m", cutoff_s=20.0, on_cutoff="retry", basis=basis)
    samples = {("s", "a/m"): live.samples[("after", "a/m")]}

    ninety_nine = live_routing(step, samples, deadline_s=20.0)

    assert (ninety_nine.window, ninety_nine.min_calls) == (1000, 100)
    assert ninety_nine.cutoff_bounds_s == (10.0, 19.999)
    assert ninety_nine.prior_s == {"a/m": round(samples[("s", "a/m")].quantile(0.99), 3)}


def test_a_plan_without_live_has_no_blocks(db: Path) -> None:
    """live=False (the default) writes none."""
    fixed = run(db, workflow(STEPS, deadline=DEADLINE))
    assert all(step.live is None for step in fixed.plan.steps.values())


def test_cli_live_writes_the_blocks(db: Path, tmp_path: Path) -> None:
    """--live writes them, and the text says which steps route live."""
    source = tmp_path / "workflow.yaml"
    source.write_text(workflow(STEPS, deadline=DEADLINE))
    out = tmp_path / "plan.yaml"
    result = CliRunner().invoke(
        app,
        ["calibrate", str(source), "--out", str(out), "--db", str(db), "--runs", "2000",
         "--check-runs", "4000", "--replicates", "0", "--live"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = load_plan(out)
    assert plan.steps["ask"].live is not None
    assert (
        "live routing and cutoffs (the executor follows recent latency): ask, after"
        in result.stdout
    )


def test_the_prediction_is_the_live_models(live: Calibration) -> None:
    """The plan's predicted fields come from simulating it with its live blocks in force."""
    from tailkit.simulation import simulate

    plan = live.plan
    assert [s.name for s in live.result.live] == ["ask", "after"]
    ask = live.result.live[0]
    assert set(ask.route_share) == {"a/m", "b/n"}
    assert ask.explore_rate == pytest.approx(1 / 50, abs=0.005)
    again = simulate(plan, live.samples, runs=6000, seed=2)  # run's check_runs, seed + 1
    assert plan.predicted is not None
    assert plan.predicted.miss_rate == round(again.miss_rate, 5)
    assert plan.predicted.p99_s == round(again.p99_s, 3)
