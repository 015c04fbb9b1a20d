"""
Plan-prediction coverage study: how often calibrate's 95 % intervals cover the plan's truth.

A known workflow model stands for the world: two steps in sequence, the first on a lognormal
route with a 3 s cutoff that hedges to a second lognormal route, the second on a heavier-tailed
route (a lognormal body with 6 % of calls ×5 slower), 1 % errors on the first route, a 14 s
deadline. Each replicate draws ``n`` calls per route from the model (50, 300, 3,000), builds
the route samples as the store would hand them over, and asks `tailkit.calibration.predict` for
the plan's figures with their intervals (100 bootstrap replicates of 4,000 runs each, as
calibrate does; ``--quick``: 40). The truth is a large Monte Carlo of the true model through
`tailkit.simulation` (400,000 calls per route, 400,000 runs). A figure's coverage is the share
of replicates whose interval holds the truth, with a Clopper-Pearson 95 % interval for the
Monte Carlo error of the study itself; an interval that calibrate refuses (``.inf`` high end,
stated in the prediction's ``interval_notes``) is counted apart, as refused, not as covering.

One degenerate case: every route answers in exactly the same time, but for 0.4 % of the second
route's calls that take 30 s (past the deadline) and 0.5 % errors on the first: a sample of
300 calls shows 300 identical latencies about one time in three (0.996^300), and few errors.

Cases are rows of `CASES`: a name, calls per route, and a *truth simulator*: a function
``(plan, n, rng) -> (samples_for_the_prediction, truth, sharing)`` where ``truth`` maps each
figure to its true value and ``sharing`` is what the prediction assumes a repeat shares
(``None``: independent draws, right for a world whose attempts are independent).

Dependent attempts: the paired world of `tailkit.demo._paired` (jobs with a size and hidden
work, served on every route with their own noise, transient stalls and provider spells; a
hedge re-does the job). Its samples are ``n`` jobs run on every route, as a benchmark with job
keys gives them; the prediction's sharing is estimated from those pairs as `estimate_sharing`
estimates it from job keys, or, in the "independence assumed" case, left out, as the
simulator did before it modelled sharing.

Full run (``--reps 200``): about 25 minutes on 2 idle cores; ``--quick`` (30 replicates, the
50- and 300-call cases): about 3 minutes. Exits 0 whatever it finds.
"""

from __future__ import annotations

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import functools
import json
import math
import sys
import time
import zlib

from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import stats

from tailkit.calibration import predict
from tailkit.config import Plan, Shared, parse_plan
from tailkit.demo._paired import PairedRoute, PairedWorld, truth_result
from tailkit.simulation import RouteSample, simulate
from tailkit.simulation.lowlevel import (
    DEFAULT_MOMENT,
    SampleKey,
    independent_sharing,
    paired_tail_correlation,
)
from tailkit.store.lowlevel import SLOW_RANK


PLAN = """
tailkit_plan: 1
workflow: coverage
deadline_s: 14
hedge_budget: 0.5
routes:
  fast/a: {provider: fast, model: a}
  other/a: {provider: other, model: a}
  heavy/b: {provider: heavy, model: b}
steps:
  first:
    route: fast/a
    cutoff_s: 3.0
    on_cutoff: hedge
    hedge_route: other/a
  second:
    depends_on: [first]
    route: heavy/b
"""
FIGURES = ("miss_rate", "p50_s", "p99_s", "extra_attempts")
STEP_FIGURES = ("p50_s", "p99_s", "hedge_rate")
TRUTH_CALLS = 400_000
TRUTH_RUNS = 400_000
Array = npt.NDArray[np.float64]
Truth = dict[str, float]
Sharing = dict[str, Shared] | None
TruthSimulator = Callable[
    [Plan, int, np.random.Generator], tuple[dict[SampleKey, RouteSample], Truth, Sharing]
]


@dataclass(frozen=True, slots=True)
class Route:
    """
    One route of the true model: lognormal body, an optional slow share, an error rate.
    """

    median_s: float
    sigma: float
    slow_share: float = 0.0
    slow_factor: float = 1.0
    error_rate: float = 0.0
    constant: bool = False

    def draw(self, n: int, rng: np.random.Generator) -> tuple[Array, int]:
        """
        ``n`` finished latencies and how many failed attempts came with them.
        """
        if self.constant:
            total = np.full(n, self.median_s)
        else:
            total = self.median_s * np.exp(self.sigma * rng.standard_normal(n))
        slow = rng.random(n) < self.slow_share
        total[slow] *= self.slow_factor
        failed = int(rng.binomial(n, self.error_rate / (1.0 - self.error_rate)))
        return total, failed


LOGNORMAL = {
    "fast/a": Route(1.6, 0.45, error_rate=0.01),
    "other/a": Route(1.8, 0.40),
    "heavy/b": Route(3.0, 0.35, slow_share=0.06, slow_factor=5.0),
}
DEGENERATE = {
    "fast/a": Route(2.0, 0.0, error_rate=0.005, constant=True),
    "other/a": Route(2.2, 0.0, constant=True),
    "heavy/b": Route(6.0, 0.0, slow_share=0.004, slow_factor=5.0, constant=True),
}


def _samples(
    plan: Plan, routes: Mapping[str, Route], n: int, rng: np.random.Generator
) -> dict[SampleKey, RouteSample]:
    """
    Route samples of ``n`` drawn calls per route, keyed like `load_samples` keys them.
    """
    made: dict[str, RouteSample] = {}
    for name, route in routes.items():
        total, failed = route.draw(n, rng)
        made[name] = RouteSample.from_latencies(
            total,
            error_rate=failed / (n + failed),
            error_s=np.full(failed, 1.0) if failed else None,
            seed=int(rng.integers(2**31)),
        )
    out: dict[SampleKey, RouteSample] = {}
    for step_name, step in plan.steps.items():
        for route_name in (step.route, step.hedge_route):
            if route_name is not None:
                out[(step_name, route_name)] = made[route_name]
    return out


@functools.cache
def _truth(routes_name: str) -> Truth:
    """
    The true figures: the true model's routes, 400,000 calls each, 400,000 runs.
    """
    plan = parse_plan(PLAN)
    routes = {"lognormal": LOGNORMAL, "degenerate": DEGENERATE}[routes_name]
    rng = np.random.default_rng(zlib.crc32(f"truth {routes_name}".encode()))
    samples = _samples(plan, routes, TRUTH_CALLS, rng)
    result = simulate(plan, samples, runs=TRUTH_RUNS, seed=zlib.crc32(b"truth runs"))
    truth = {k: float(getattr(result, k)) for k in FIGURES}
    for step in result.steps:
        truth |= {f"{step.name}.{k}": float(getattr(step, k)) for k in STEP_FIGURES}
    return truth


def independent_truth(routes_name: str) -> TruthSimulator:
    """
    A truth simulator: independent draws of every attempt from the named true routes.
    """
    routes = {"lognormal": LOGNORMAL, "degenerate": DEGENERATE}[routes_name]

    def simulator(
        plan: Plan, n: int, rng: np.random.Generator
    ) -> tuple[dict[SampleKey, RouteSample], Truth, Sharing]:
        return _samples(plan, routes, n, rng), _truth(routes_name), None

    return simulator


# The dependent world: every attempt of a step does one job (its size and hidden work), a
# hedge on another provider meets its own moment, transient stalls are escaped; see
# tailkit/demo/_paired.py. Not a Gaussian copula: the simulator's assumption is on trial.
PAIRED = PairedWorld({
    "fast/a": PairedRoute("fast", "a", 1.4),
    "other/a": PairedRoute("other", "a", 1.6),
    "heavy/b": PairedRoute("heavy", "b", 2.6),
})  # fmt: skip


@functools.cache
def _paired_truth() -> Truth:
    plan = parse_plan(PLAN)
    result = truth_result(PAIRED, plan, runs=TRUTH_RUNS, seed=zlib.crc32(b"paired truth"))
    truth = {k: float(getattr(result, k)) for k in FIGURES}
    for step in result.steps:
        truth |= {f"{step.name}.{k}": float(getattr(step, k)) for k in STEP_FIGURES}
    return truth


def paired_truth(*, assume_independent: bool) -> TruthSimulator:
    """
    A truth simulator of the paired world: ``n`` jobs run on every route, pairs estimate sharing.

    The sharing is estimated from those pairs as calibrate estimates it from job keys (or,
    with ``assume_independent``, repeats are taken as independent draws, the old simulator).
    """

    def simulator(
        plan: Plan, n: int, rng: np.random.Generator
    ) -> tuple[dict[SampleKey, RouteSample], Truth, Sharing]:
        tokens, hidden = PAIRED.jobs(rng, n)
        seconds = {
            name: PAIRED.attempt_s(name, tokens, hidden, PAIRED.spells(rng, n)[r.provider], rng)
            for name, r in PAIRED.routes.items()
        }
        made = {name: RouteSample.from_latencies(x) for name, x in seconds.items()}
        samples = {
            (step_name, route): made[route]
            for step_name, step in plan.steps.items()
            for route in (step.route, step.hedge_route)
            if route is not None
        }
        if assume_independent:
            return samples, _paired_truth(), independent_sharing(plan)
        sharing = {}
        for step_name, step in plan.steps.items():
            others = [r for r in PAIRED.routes if r != step.route]
            rho = max(paired_tail_correlation(seconds[step.route], seconds[r]) for r in others[:1])
            slow = round((1.0 - SLOW_RANK) * n)  # the slow first attempts it rests on
            sharing[step_name] = Shared(
                rho, min(rho + DEFAULT_MOMENT, 0.95), "job keys", f"{n} paired jobs", slow
            )
        return samples, _paired_truth(), sharing

    return simulator


@dataclass(frozen=True, slots=True)
class Case:
    """
    One row of the study: its name, the calls per route, and its truth simulator.
    """

    name: str
    calls: int
    truth: TruthSimulator


CASES = (
    Case("lognormal + heavy, 50 calls", 50, independent_truth("lognormal")),
    Case("lognormal + heavy, 300 calls", 300, independent_truth("lognormal")),
    Case("lognormal + heavy, 3,000 calls", 3000, independent_truth("lognormal")),
    Case("identical latencies, 300 calls", 300, independent_truth("degenerate")),
    Case("paired jobs, 300 calls", 300, paired_truth(assume_independent=False)),
    Case("paired jobs, 3,000 calls", 3000, paired_truth(assume_independent=False)),
    Case(
        "paired jobs, 3,000 calls, independence assumed",
        3000,
        paired_truth(assume_independent=True),
    ),
)
QUICK_CASES = ("lognormal + heavy, 50 calls", "identical latencies, 300 calls")


def _one(case_index: int, rep: int, *, seed: int, replicates: int) -> dict[str, object]:
    """
    One replicate of one case: per figure, covered (True / False) or refused (None).
    """
    case = CASES[case_index]
    plan = parse_plan(PLAN)
    rng = np.random.default_rng([seed, case_index, rep])
    samples, truth, sharing = case.truth(plan, case.calls, rng)
    found = predict(None, plan, samples=samples, runs=40_000, replicates=replicates,
                    seed=int(rng.integers(2**31)), sharing=sharing)  # fmt: skip
    out: dict[str, object] = {}
    estimates = {k: getattr(found, k) for k in FIGURES}
    for name, step in found.steps.items():
        estimates |= {f"{name}.{k}": getattr(step, k) for k in STEP_FIGURES}
    for key, e in estimates.items():
        if key not in truth:
            continue
        if math.isinf(e.high) and not math.isinf(truth[key]):
            out[key] = None  # refused: not bounded above
        else:
            out[key] = bool(e.low <= truth[key] <= e.high)
    return out


def _coverage(hits: int, n: int) -> tuple[float, float, float]:
    if n == 0:
        return (math.nan, math.nan, math.nan)
    low = 0.0 if hits == 0 else float(stats.beta.ppf(0.025, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(0.975, hits + 1, n - hits))
    return (hits / n, low, high)


def run(
    *, reps: int, seed: int, jobs: int, replicates: int, cases: tuple[str, ...] | None = None
) -> dict[str, object]:
    """
    The study: per case and figure, coverage with its Monte Carlo interval, and refusals.
    """
    chosen = [i for i, c in enumerate(CASES) if cases is None or c.name in cases]
    tasks = [(i, r) for i in chosen for r in range(reps)]
    one = functools.partial(_one, seed=seed, replicates=replicates)
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            found = list(pool.map(one, *zip(*tasks, strict=True)))
    else:
        found = [one(i, r) for i, r in tasks]
    table: dict[str, dict[str, object]] = {}
    for (i, _), result in zip(tasks, found, strict=True):
        row = table.setdefault(CASES[i].name, {})
        for key, covered in result.items():
            cell = row.setdefault(key, {"covered": 0, "given": 0, "refused": 0})
            assert isinstance(cell, dict)
            if covered is None:
                cell["refused"] += 1
            else:
                cell["given"] += 1
                cell["covered"] += int(bool(covered))
    for row in table.values():
        for cell in row.values():
            assert isinstance(cell, dict)
            value, low, high = _coverage(cell["covered"], cell["given"])
            cell |= {"coverage": value, "coverage_low": low, "coverage_high": high}
    return {"reps": reps, "seed": seed, "replicates": replicates, "level": 0.95,
            "cases": table}  # fmt: skip


def _print(doc: Mapping[str, object]) -> None:
    cases = doc["cases"]
    assert isinstance(cases, dict)
    print(f"coverage of calibrate's 95% intervals ({doc['reps']} replicates a case, "
          f"{doc['replicates']} bootstrap replicates each); [Clopper-Pearson 95%]")  # fmt: skip
    for name, row in cases.items():
        print(f"\n{name}")
        for key, cell in row.items():
            if cell["given"]:
                shown = (f"{100 * cell['coverage']:5.1f}% [{100 * cell['coverage_low']:.0f}–"
                         f"{100 * cell['coverage_high']:.0f}%]")  # fmt: skip
            else:
                shown = "    - (no interval given)"
            refused = f"  refused {cell['refused']}" if cell["refused"] else ""
            print(f"  {key:<22} {shown}{refused}")


def main(argv: list[str] | None = None) -> int:
    """
    Run the study; print the table, or JSON with ``--json``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quick = "30 replicates, 40 bootstrap replicates, two cases (~3 min)"
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--reps", type=int, help="replicates per case (default 200; quick 30)")
    boot = "bootstrap replicates per prediction (default 100; quick 40)"
    parser.add_argument("--replicates", type=int, help=boot)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--case", action="append", choices=[c.name for c in CASES],
                        help="only this case (repeatable)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    reps = args.reps or (30 if args.quick else 200)
    replicates = args.replicates or (40 if args.quick else 100)
    cases = tuple(args.case) if args.case else (QUICK_CASES if args.quick else None)
    started = time.perf_counter()
    doc = run(reps=reps, seed=args.seed, jobs=args.jobs, replicates=replicates, cases=cases)
    doc["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc)
        print(f"\n{doc['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
