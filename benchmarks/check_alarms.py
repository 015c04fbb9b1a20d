"""
How often `tailkit check` cries wolf, and how often it sees a real slowdown.

A known world: a four-step workflow (``extract`` -> ``draft`` -> ``review``, and an optional
``tag``; 16 lines to judge) over five routes, each a lognormal with a first token at 30 % of
the total. ``extract`` hedges to ``b/fast`` at a total-age cutoff, ``draft`` to ``b/big`` at a
TTFT cutoff; the others wait.

A plan is calibrated as ``tailkit calibrate`` fills in its predictions: ``--basis`` calls per
route are drawn from the world and `tailkit.calibration.predict` simulates the plan on them,
with its bootstrap intervals (``--replicates``), writing ``predicted`` and ``basis``. Each
plan is then checked against ``--ledgers`` production ledgers of ``--runs`` runs, written as
the executor writes them (one JSON line per attempt: hedges, cut losers, winners) by playing
each run attempt by attempt on fresh draws of the world: the same cutoffs, the same
deadline-aware reserve (read from the simulator's model of the plan), attempts independent as
the simulator assumes, and no deadline cut (a late run finishes late, as the simulator counts
it). The ledgers are read by `tailkit.check.observe`, as ``tailkit check`` reads them, and
judged by `check_observation` at ``--level``.

Cases: no drift (the world the plan was calibrated on) and a slowdown (route ``a/big``, which
``draft`` calls first, ``--slowdown`` slower: every latency times 1.3). A false alarm is a
ledger of the unchanged world whose exit code is 1; a detection is a ledger of the slowed world
whose exit code is 1, and it is *named* when a drifted line's cause names ``a/big``. The old
rule (the plan's point inside the observed 95 % interval, or within 15 %, each line alone) is
replayed on the same lines for comparison. Each share comes with its Clopper-Pearson 95 %
interval for the Monte Carlo error.

Run: ``python3 benchmarks/check_alarms.py`` (about 15 minutes on 2 busy cores; ``--plans 4
--ledgers 2 --replicates 20`` for a quick look). Exits 0 whatever it finds.
"""

from __future__ import annotations

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from tailkit.calibration import predict
from tailkit.check import DRIFTED, CheckReport, check_observation, observe
from tailkit.config import Basis, Plan, parse_plan
from tailkit.simulation import RouteSample, workflow_model


WORKFLOW_YAML = """\
tailkit_plan: 1
workflow: alarms
deadline_s: 45
hedge_budget: 0.2
routes:
  a/fast: {provider: a, model: fast}
  b/fast: {provider: b, model: fast}
  a/big: {provider: a, model: big}
  b/big: {provider: b, model: big}
  c/small: {provider: c, model: small}
steps:
  extract:
    route: a/fast
    signal: total
    cutoff_s: 5.0
    on_cutoff: hedge
    hedge_route: b/fast
  draft:
    depends_on: [extract]
    route: a/big
    signal: ttft
    ttft_cutoff_s: 6.0
    on_cutoff: hedge
    hedge_route: b/big
  review:
    depends_on: [draft]
    route: a/fast
  tag:
    depends_on: [extract]
    required: false
    route: c/small
"""

ROUTES: dict[str, tuple[float, float]] = {  # route -> (median seconds, sigma of log latency)
    "a/fast": (3.0, 0.5),
    "b/fast": (3.3, 0.5),
    "a/big": (15.0, 0.4),
    "b/big": (16.0, 0.4),
    "c/small": (1.0, 0.3),
}
TTFT_SHARE = 0.3
SLOWED = "a/big"
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def route_draw(rng: np.random.Generator, route: str, n: int, slow: dict[str, float]) -> Any:
    """
    ``n`` latencies of a route in seconds (times its slowdown factor).
    """
    median, sigma = ROUTES[route]
    return median * slow.get(route, 1.0) * np.exp(sigma * rng.standard_normal(n))


def calibrated(plan: Plan, basis: int, *, seed: int, replicates: int, runs: int) -> Plan:
    """
    The plan with ``predicted`` and ``basis`` filled in from ``basis`` calls per route.
    """
    rng = np.random.default_rng([seed, basis, 17])
    measured = {}
    for route in ROUTES:
        total = route_draw(rng, route, basis, {})
        measured[route] = RouteSample.from_latencies(total, ttft_s=total * TTFT_SHARE)
    samples = {
        (name, route): measured[route]
        for name, step in plan.steps.items()
        for route in (step.route, step.hedge_route)
        if route is not None
    }
    found = predict(None, plan, samples=samples, runs=runs, replicates=replicates, seed=seed)
    steps = {
        name: dataclasses.replace(
            step,
            predicted=found.step_prediction(name),
            basis=Basis(calls=basis, bucket="all", quantile=None, censored=0.0),
        )
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps, predicted=found.plan_prediction())


def _iso(at: float) -> str:
    return (T0 + timedelta(seconds=at)).replace(tzinfo=None).isoformat(
        timespec="microseconds"
    ) + "Z"


class Ledger:
    """
    Writes runs of a plan over a world as the executor's ledger lines.
    """

    def __init__(self, plan: Plan, slow: dict[str, float], rng: np.random.Generator) -> None:
        truth = {
            (name, route): RouteSample.lognormal(*ROUTES[route], ttft_share=TTFT_SHARE)
            for name, step in plan.steps.items()
            for route in (step.route, step.hedge_route)
            if route is not None
        }
        self.model = {s.name: s for s in workflow_model(plan, truth).steps}
        self.plan, self.slow, self.rng = plan, slow, rng
        self.lines: list[str] = []

    def _line(self, run: str, step: str, attempt: int, route: str, at: float, **kw: Any) -> None:
        provider, model = route.split("/")
        record = {
            "call_id": f"{run}-{step}-{attempt}", "run_id": run, "step": step,
            "attempt": attempt, "role": "primary" if attempt == 0 else "hedge",
            "provider": provider, "model": model, "started_at": _iso(at), "ttft_s": None,
            "total_s": None, "input_tokens": 500, "output_tokens": 200, "status": "ok",
            "error_type": None, "http_status": None, "censored_at_s": None,
            "abandoned": False, "idempotency_key": f"{run}-{step}", "deadline_at": None,
            "winner": False, "attrs": {},
        }  # fmt: skip
        record.update(kw)
        self.lines.append(json.dumps(record))

    def step(self, run: str, name: str, run_at: float, start_s: float) -> float:
        """
        One step call starting ``start_s`` into the run; returns its duration in seconds.
        """
        step, model = self.plan.steps[name], self.model[name]
        at = run_at + start_s
        total = float(route_draw(self.rng, step.route, 1, self.slow)[0])
        ttft = total * TTFT_SHARE
        cut = model.cutoff_s
        if math.isfinite(self.plan.deadline_s):
            cut = min(max(self.plan.deadline_s - model.reserve_s - start_s, 0.0), cut)
        watched = ttft if model.signal == "ttft" else total
        acts = model.action == "hedge" and watched > cut
        if not acts:
            self._line(run, name, 0, step.route, at, total_s=total, ttft_s=ttft, winner=True)
            return total
        hedge = step.hedge_route
        assert hedge is not None
        second = float(route_draw(self.rng, hedge, 1, self.slow)[0])
        fired = {"cutoff": model.signal}
        started = {"started_by": "cutoff"}
        if total <= cut + second:  # the first attempt wins the race; the hedge is cut
            self._line(run, name, 0, step.route, at, total_s=total, ttft_s=ttft, winner=True,
                       attrs=fired)  # fmt: skip
            self._line(run, name, 1, hedge, at + cut, status="cancelled",
                       censored_at_s=total - cut, attrs=started)  # fmt: skip
            return total
        self._line(run, name, 0, step.route, at, status="cancelled", censored_at_s=cut + second,
                   ttft_s=ttft if ttft < cut + second else None, attrs=fired)  # fmt: skip
        self._line(run, name, 1, hedge, at + cut, total_s=second, ttft_s=second * TTFT_SHARE,
                   winner=True, attrs=started)  # fmt: skip
        return cut + second

    def runs(self, count: int, *, prefix: str) -> list[str]:
        """
        ``count`` runs (``extract``, then ``draft`` and ``tag``, then ``review``).
        """
        for i in range(count):
            run, at = f"{prefix}-{i:05d}", 90.0 * i
            extract = self.step(run, "extract", at, 0.0)
            draft = extract + self.step(run, "draft", at, extract)
            self.step(run, "tag", at, extract)
            self.step(run, "review", at, draft)
        return self.lines


def old_rule(report: CheckReport) -> bool:
    """
    Whether the rule before this study would have said drifted (point vs 95 %, or 15 %).
    """
    for line in report.lines:
        est, pred = line.observed, line.predicted
        enough = est.n >= 30 and (line.figure != "p99_s" or est.n >= 368)
        if not enough or math.isnan(est.value) or est.low <= pred <= est.high:
            continue
        both = math.isfinite(est.value)
        if both and abs(pred - est.value) <= 0.15 * max(abs(pred), abs(est.value)):
            continue
        return True
    return False


def _named(report: CheckReport) -> bool:
    return any(SLOWED in (line.cause or "") for line in report.drifted)


def study(args: argparse.Namespace) -> dict[str, Any]:
    """
    Every case: per basis and runs, the share of ledgers that drifted (and were named).
    """
    plan = parse_plan(WORKFLOW_YAML)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for basis in args.bases:
            for p in range(args.plans):
                seed = args.seed * 1000 + p
                found = calibrated(
                    plan, basis, seed=seed, replicates=args.replicates, runs=args.sim_runs
                )
                for runs in args.runs:
                    for case, slow in (("none", {}), ("slowdown", {SLOWED: 1 + args.slowdown})):
                        for k in range(args.ledgers):
                            rng = np.random.default_rng([seed, runs, k, len(slow)])
                            lines = Ledger(found, slow, rng).runs(runs, prefix=f"r{p}-{k}")
                            path = Path(tmp) / "ledger.jsonl"
                            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
                            obs = observe(found, path, level=args.level)
                            report = check_observation(found, obs)
                            rows.append({
                                "basis": basis, "runs": runs, "case": case, "plan": p,
                                "drifted": report.verdict == DRIFTED, "named": _named(report),
                                "old_rule": old_rule(report), "judged": report.judged,
                                "lines": [f"{x.scope} {x.figure}" for x in report.drifted],
                            })  # fmt: skip
                if not args.json:
                    print(f"basis {basis}: plan {p + 1} of {args.plans} "
                          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)  # fmt: skip
    return {"args": {k: v for k, v in vars(args).items() if k != "json"},
            "cells": cells(rows), "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def _share(k: int, n: int) -> dict[str, float | int]:
    from tailkit.check.lowlevel import rate

    est = rate(k, n)
    return {"k": k, "n": n, "share": est.value, "low": est.low, "high": est.high}


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """
    One cell per (case, basis, runs): drifted, named and old-rule shares, and the lines seen.
    """
    out = []
    keys = sorted({(r["case"], r["basis"], r["runs"]) for r in rows})
    for case, basis, runs in keys:
        mine = [r for r in rows if (r["case"], r["basis"], r["runs"]) == (case, basis, runs)]
        lines: dict[str, int] = {}
        for r in mine:
            for line in r["lines"]:
                lines[line] = lines.get(line, 0) + 1
        out.append({
            "case": case, "basis": basis, "runs": runs,
            "drifted": _share(sum(r["drifted"] for r in mine), len(mine)),
            "named": _share(sum(r["named"] for r in mine), len(mine)),
            "old_rule": _share(sum(r["old_rule"] for r in mine), len(mine)),
            "lines_judged": float(np.mean([r["judged"] for r in mine])),
            "drifted_lines": dict(sorted(lines.items(), key=lambda kv: -kv[1])),
        })  # fmt: skip
    return out


def _pct(cell: dict[str, Any]) -> str:
    return f"{cell['share']:.1%} [{cell['low']:.1%}–{cell['high']:.1%}] ({cell['k']}/{cell['n']})"


def table(doc: dict[str, Any]) -> str:
    """
    The study as two Markdown tables: false alarms, then detection.
    """
    out = ["False alarms (no drift): share of ledgers whose exit code is 1", "",
           "| basis calls | runs | new rule | old rule | lines judged |",
           "|---|---|---|---|---|"]  # fmt: skip
    for c in doc["cells"]:
        if c["case"] == "none":
            out.append(f"| {c['basis']:,} | {c['runs']:,} | {_pct(c['drifted'])} | "
                       f"{_pct(c['old_rule'])} | {c['lines_judged']:.1f} |")  # fmt: skip
    slow = doc["args"]["slowdown"]
    out += ["", f"Detection ({SLOWED} {slow:.0%} slower): share of ledgers whose exit code is 1, "
            f"and whose causes name {SLOWED}", "",
            "| basis calls | runs | detected | named | old rule |",
            "|---|---|---|---|---|"]  # fmt: skip
    for c in doc["cells"]:
        if c["case"] == "slowdown":
            out.append(f"| {c['basis']:,} | {c['runs']:,} | {_pct(c['drifted'])} | "
                       f"{_pct(c['named'])} | {_pct(c['old_rule'])} |")  # fmt: skip
    return "\n".join(out)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    """
    Run the study and print its tables (or ``--json``).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bases",
        type=_ints,
        default=[300, 3000],
        help="calls per route each plan is calibrated on (300,3000)",
    )
    parser.add_argument(
        "--runs", type=_ints, default=[300, 3000], help="runs per production ledger (300,3000)"
    )
    parser.add_argument("--plans", type=int, default=25, help="plans per basis (25)")
    parser.add_argument(
        "--ledgers", type=int, default=4, help="ledgers per plan, runs size and case (4)"
    )
    parser.add_argument(
        "--replicates",
        type=int,
        default=100,
        help="bootstrap replicates behind each plan's intervals (100)",
    )
    parser.add_argument(
        "--sim-runs",
        type=int,
        default=100_000,
        help="simulated runs behind each plan's point predictions (100000)",
    )
    parser.add_argument(
        "--slowdown",
        type=float,
        default=0.3,
        help=f"how much slower {SLOWED} gets in the slowdown case (0.3)",
    )
    parser.add_argument("--level", type=float, default=0.95, help="check's family level (0.95)")
    parser.add_argument("--seed", type=int, default=0, help="seed of everything (0)")
    parser.add_argument("--json", action="store_true", help="print the study as JSON")
    args = parser.parse_args(argv)
    doc = study(args)
    print(json.dumps(doc, indent=2) if args.json else table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
