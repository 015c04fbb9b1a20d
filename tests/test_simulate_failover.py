"""
The simulator's failover and watched repeats: the engine and the plain-Python reference agree.

A step's error retry goes to its failover route (its hedge route on another provider) and is
watched by the step's cutoffs, as is an upgrade; a cutoff on a retry draws its attempt from
slot 3. On random workflows, every run, the vectorized engine and the reference say the same.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailkit.simulation import RouteSample, WorkflowModel
from tailkit.simulation._couple import AFTER_RETRY, RETRY, action_route, repeat_route, step_indexes
from tailkit.simulation._reference import reference_run
from tailkit.simulation.lowlevel import Draws, StepModel, simulate_runs


def _route(rng: np.random.Generator, error_rate: float) -> RouteSample:
    return RouteSample.from_latencies(
        rng.lognormal(rng.uniform(0, 2), rng.uniform(0.2, 1.0), 500),
        ttft_s=rng.lognormal(-1, 0.8, 500),
        error_rate=error_rate,
        error_s=rng.uniform(0, 6, 20),
        invalid_rate=float(rng.choice([0.0, 0.15])),
    )


@pytest.mark.parametrize(("seed", "shared"), [(s, s % 2 == 1) for s in range(6)])
def test_failover_and_watched_repeats_engine_equals_reference(seed: int, shared: bool) -> None:
    """Failing routes with failover routes, every action: engine and reference, run by run."""
    rng = np.random.default_rng(100 + seed)
    failing = [_route(rng, float(rng.choice([0.2, 0.4]))) for _ in range(2)]
    healthy = [_route(rng, 0.0) for _ in range(2)]
    routes = failing + healthy
    steps = []
    for i in range(5):
        hedge = routes[int(rng.integers(4))]
        action = str(rng.choice(["hedge", "retry", "downgrade", "fail"]))
        steps.append(
            StepModel(
                f"s{i}",
                (i - 1,) if i else (),
                bool(rng.random() < 0.7),
                failing[int(rng.integers(2))],
                signal=str(rng.choice(["total", "ttft"])),
                cutoff_s=float(rng.uniform(0.5, 8.0)),
                action=action,
                second=None if action == "retry" else hedge,  # a retry stays (as built)
                upgrade=routes[int(rng.integers(4))] if rng.random() < 0.5 else None,
                hedge=hedge,
                failover=hedge if rng.random() < 0.7 else None,
                reserve_s=float(rng.choice([0.0, rng.uniform(0, 5)])),
                total_cutoff_s=float(rng.choice([math.inf, rng.uniform(0.5, 10.0)])),
                shares=tuple((r, float(rng.choice([0.0, 0.5, 0.9]))) for r in routes)
                if shared
                else (),
            )
        )
    model = WorkflowModel(tuple(steps), deadline_s=float(rng.choice([math.inf, 25.0])))
    draws = Draws(600, seed=seed, keep=True)
    outcome = simulate_runs(model, draws)
    uniforms = [step_indexes(s, draws.stack(s.name)) for s in model.steps]
    for r in range(600):
        end, ok, extras = reference_run(model, [[int(x) for x in u[:, r]] for u in uniforms])
        assert outcome.end_s[r] == pytest.approx(end, rel=1e-12, abs=1e-12)
        assert outcome.ok[r] == ok
        assert sum(int(o.extra[r]) for o in outcome.steps) == extras
    # the cases this is about happened: retries that fired their step's action
    fired_after_retry = sum(int((o.fired & (o.recovery > 0)).sum()) for o in outcome.steps)
    assert fired_after_retry > 10


def test_repeat_route_is_the_one_rule() -> None:
    """An error's retry fails over; a hedge of a failover goes back to the step's own route."""
    rng = np.random.default_rng(1)
    own, other, small = (_route(rng, 0.1) for _ in range(3))
    step = StepModel("s", (), True, own, action="hedge", second=other, hedge=other, failover=other)
    assert repeat_route(step, RETRY) is other
    assert repeat_route(step, AFTER_RETRY) is own
    assert action_route(step, own) is other
    staying = StepModel("s", (), True, own, action="downgrade", second=small, hedge=other)
    assert repeat_route(staying, RETRY) is own  # no failover route: the same route
    assert repeat_route(staying, AFTER_RETRY) is small
