"""
``calibrate(live=True)``: each step's ``live`` block, from the plan found and its samples.

What the block holds, and why these numbers (the executor follows the block, the simulator
models it; the algorithm is `tailkit.config.LiveRouting`'s):

- ``quantile``: the calibrated cutoff's own quantile (``basis.quantile``), so that a live
  cutoff sits where the fixed one does while the route behaves as measured, and follows it
  when it drifts. A step without a cutoff on its signal clock routes at `ROUTING_QUANTILE`
  (its p95: a route's tail, not its median, is what makes a run miss) and keeps no cutoff.
- ``prior_s``: per candidate, that quantile of its first attempts' latency on the step's
  signal clock, in the step's bucket: the same route sample the simulator draws from, so the
  executor starts from what the plan was calibrated on.
- ``cutoff_bounds_s``: half the calibrated cutoff to the cutoff itself (the top kept below
  the deadline): the live cutoff follows a route down, never above what was calibrated. A
  window cannot measure above its own cutoff: an attempt cut, cancelled or beaten by its
  hedge counts as slower than any value, and while the route behaves as measured about
  ``1 - quantile`` of the window is such, so the order statistic at the cutoff's quantile
  flips between a measured value and a cut one, and a higher top bound is where the cutoff
  then jumps. On the bundled sample's workflow with candidates the live plan missed 3.9 %
  with a top of twice the cutoff, 3.5 % with 1.25 times, 3.3 % with the cutoff itself,
  against 3.0 % for fixed routing (100,000 simulated runs); in ``benchmarks/peers.py``'s
  one-step case a top of 1.5 times took the live variant's p99 to 32.7 s against 26.7 s
  for the fixed plan. A route that slows down past its cutoff loses its first attempts to
  another candidate instead, where there is one. A step without a cutoff (it routes only)
  states bounds around its priors, which nothing uses.
- ``window``: the last 200 first attempts per route, or more for a high quantile: at least
  10 of them beyond it (`MIN_BEYOND`), so a p99 reads 1,000. Enough to place the quantile,
  few enough to follow a change within a few hundred calls.
- ``min_calls``: until a route's window holds this many the prior stands in: the fewest at
  which the quantile's order statistic is not the window's largest (20 for a p95).
- ``explore_every``: every 50th first attempt of a step with several candidates goes to
  another candidate in turn (2 %), so a route that was slow and recovered is seen again; 0
  for a single route, which has nothing to explore.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tailkit.config import LiveRouting, Plan, Step


if TYPE_CHECKING:
    from tailkit.simulation import RouteSample
    from tailkit.simulation.lowlevel import SampleKey


ROUTING_QUANTILE = 0.95
WINDOW = 200
MIN_BEYOND = 10
MIN_CALLS = 20
EXPLORE_EVERY = 50
_BOUNDS = (0.5, 1.0)
_MS = 1e-3  # the plan's resolution


def signal_cutoff(step: Step) -> float | None:
    """
    The step's cutoff on its signal clock (``None``: none): the one a live cutoff replaces.
    """
    return step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s


def live_wanted(step: Step) -> bool:
    """
    Whether ``calibrate(live=True)`` gives a step a ``live`` block.

    A step with candidate routes (it routes live), and a single-route step with a cutoff on
    its signal clock (its cutoff follows the route). A step that waits on one route has
    nothing to follow; a tool step has no route.
    """
    if step.tool:
        return False
    return len(step.first_routes()) > 1 or signal_cutoff(step) is not None


def prior_s(sample: RouteSample, q: float, signal: str) -> float:
    """
    The ``q`` quantile of a route's first attempts on the ``signal`` clock, to the millisecond.

    A route whose calls carry no time to first token stands in with its total latency.
    """
    value = sample.quantile(q, signal=signal)
    if math.isnan(value):
        value = sample.quantile(q)
    return round(value, 3) if math.isfinite(value) else math.inf


def live_routing(
    step: Step, samples: Mapping[SampleKey, RouteSample], *, deadline_s: float
) -> LiveRouting:
    """
    A step's ``live`` block (see the module doc for each number).

    Args:
        step: The calibrated step (its route, signal, cutoff and ``basis.quantile``).
        samples: Route samples for every route the step may go to first.
        deadline_s: The plan's deadline in seconds.
    """
    cutoff = signal_cutoff(step)
    q = step.basis.quantile if step.basis is not None and cutoff is not None else None
    q = ROUTING_QUANTILE if q is None else q
    routes = step.first_routes()
    prior = {r: prior_s(samples[(step.name, r)], q, step.signal) for r in routes}
    top = math.floor((deadline_s - _MS) * 1000) / 1000  # below the deadline, once rounded
    # around the calibrated cutoff; a step without one (routing only) around its priors
    seen = [cutoff] if cutoff is not None else [v for v in prior.values() if math.isfinite(v)]
    high = min(round(_BOUNDS[1] * max(seen), 3), top) if seen else top
    low = min(max(round(_BOUNDS[0] * min(seen), 3), _MS), high) if seen else min(_MS, high)
    window = max(WINDOW, math.ceil(MIN_BEYOND / (1.0 - q) - 1e-9))
    # the fewest observations whose order statistic at q is not the largest: ceil(q k) < k
    needed = math.ceil(1.0 / (1.0 - q) - 1e-9)
    return LiveRouting(
        quantile=q,
        cutoff_bounds_s=(low, high),
        prior_s=prior,
        window=window,
        min_calls=min(window, max(MIN_CALLS, needed)),
        explore_every=EXPLORE_EVERY if len(routes) > 1 else 0,
    )


def with_live(plan: Plan, samples: Mapping[SampleKey, RouteSample]) -> Plan:
    """
    The plan with a ``live`` block on every step that wants one (`live_wanted`).
    """
    steps = {
        name: dataclasses.replace(
            step, live=live_routing(step, samples, deadline_s=plan.deadline_s)
        )
        if live_wanted(step)
        else step
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps)
