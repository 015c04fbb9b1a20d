"""
What `benchmarks/peers.py` serves and what each variant is told: profiles, plans, timeouts.

The before run (``probe``) sends plain calls to every route a case needs, on models of its own
(``pre-n.*`` not streamed, ``pre-s.*`` streamed, ``pre-w.*`` the workflow's routes). Its
ledger is ingested and calibrated on, as a user would on their own logs: the one-step plan
(total clock), the streamed plan (TTFT clock allowed) and the workflow's plan. The LiteLLM
variants get the same before run: their ``timeout`` is its p95 on the step's route. tailkit's
hedge budget in the one-step cases is the load that timeout spends on the before run (the share
of its calls over it, on the clock the peers time: the whole call, or a stream's first chunk)
plus half a point (what calibrate's feasibility margin needs to reach the same cutoff); the
workflow keeps its own (5 %). The 429 storm runs the one-step plan: storms are not in the
history a plan is calibrated on; nor are outages: the outage case runs it too, provider a (the
step's route) answering 5xx to every request through a window of the schedule (`DOWN`,
`switch_for`; how the window is made: `_peers_outage`); and so does the drift, provider a
2x slower from the schedule's middle on (`slowed`): the history is the before run, not the
drift.

``tailkit-live`` runs the plan ``tailkit calibrate --live`` finds on the same before run for
the written plan with candidate routes: each step's candidates are its route and its fallback
(the route a peer falls back to, `_alternate`: for the one-step cases a and b). Calibrate
chooses each step's first route among them and writes its ``live`` block.
"""

from __future__ import annotations

import dataclasses
import json
import math

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tailkit.calibration import calibrate
from tailkit.config import Plan, dump_plan, parse_plan
from tailkit.ingest import ingest_paths
from tailkit.store import Store


ROOT = Path(__file__).resolve().parent.parent
CASES = ("one-step", "one-step-stream", "workflow", "429-storm", "outage", "drift")
VARIANTS = (
    "none", "tailkit", "tailkit-sdk", "tailkit-live", "tailkit-race",
    "litellm-retry", "litellm-fallback", "litellm-latency", "litellm-race",
)  # fmt: skip
# The seed's case: waiting dominates (8 s to the first token, 2 s of output); a stall makes the
# wait 6x longer.
ONE_STEP = {
    "ttft_median_s": 8.0, "ttft_sigma": 0.15, "tokens_per_s": 5.0, "gen_sigma": 0.1,
    "output_tokens": 10, "stall_share": 0.03, "stall_factor": 6.0,
}  # fmt: skip
ONE_STEP_DEADLINE_S = 40.0
WARMUP = {"ttft_median_s": 0.01, "ttft_sigma": 0.1, "tokens_per_s": 1000.0, "output_tokens": 5}
TOKENS_PER_CALL = 4 + 10  # serve counts the prompt's words ("Write the account brief.")
MATCH_TOLERANCE = 0.005  # tailkit's budget: the peers' load on the before run, plus this
STORM_SHARE = 0.1  # provider a's limit admits about this share of the one-step load
# The outage: provider a answers 5xx to everything from OUTAGE_FROM of the schedule on, for
# OUTAGE_SHARE of it (800 calls at 6 a second, time scale 0.25: about 3 profile minutes, 280
# calls), each error after a short wait (a failing backend answers fast: median 0.5 s).
OUTAGE_FROM, OUTAGE_SHARE = 0.25, 0.35
DOWN = {"ttft_median_s": 0.5, "ttft_sigma": 0.3, "tokens_per_s": 5.0, "output_tokens": 10,
        "faults": {"error_5xx": 1.0}}  # fmt: skip
# The drift: provider a's every latency (TTFT, decode; stalls with them) is DRIFT_FACTOR times
# longer from DRIFT_FROM of the schedule on, to its end.
DRIFT_FROM, DRIFT_FACTOR = 0.5, 2.0


def _route(ttft: float, tokens: int, rate: float) -> dict[str, Any]:
    return {"ttft_median_s": ttft, "ttft_sigma": 0.25, "tokens_per_s": rate, "gen_sigma": 0.15,
            "output_tokens": tokens, "stall_share": 0.03, "stall_factor": 5.0}  # fmt: skip


# The sample workflow's routes: the same model on two providers has the same profile; 3 % of
# requests stall 5x (TTFT, or decode for answers of 600+ tokens). Critical path ~50 s.
WORKFLOW_PROFILES = {
    "openai/gpt-4.1-mini": _route(0.8, 350, 120.0),
    "google/gemini-2.5-flash": _route(0.6, 250, 150.0),
    "anthropic/claude-sonnet-4": _route(1.5, 500, 60.0),
    "bedrock/claude-sonnet-4": _route(1.5, 500, 60.0),
    "openai/gpt-4.1": _route(1.0, 900, 75.0),
    "azure/gpt-4.1": _route(1.0, 900, 75.0),
}
PROBE_SETS = {  # before-run model prefix -> (cases it serves, streamed)
    "pre-n": (("one-step", "429-storm", "outage", "drift"), False),
    "pre-s": (("one-step-stream",), True),
    "pre-w": (("workflow",), False),
}


def model_id(variant: str, route_key: str) -> str:
    """
    The served model id of ``route_key`` for ``variant`` (its own copy of the route).
    """
    return f"{variant}.{route_key.replace('/', '~')}"


def route_key(served: str) -> str:
    """
    The route key a served model id stands for (the inverse of `model_id`).
    """
    return served.split(".", 1)[1].replace("~", "/")


def case_routes(case: str) -> dict[str, Mapping[str, Any]]:
    """
    The routes a case serves, by key, with their profiles.
    """
    if case == "workflow":
        return dict(WORKFLOW_PROFILES)
    return {"a": ONE_STEP, "b": ONE_STEP}


def storm_limit(rate: float, time_scale: float) -> int:
    """
    Provider a's tokens per profile minute in the storm: `STORM_SHARE` of the load sent to it.
    """
    calls_per_profile_minute = 60.0 * rate * time_scale
    return max(int(STORM_SHARE * calls_per_profile_minute * TOKENS_PER_CALL), TOKENS_PER_CALL)


def outage_window(offsets: Sequence[float]) -> tuple[float, float]:
    """
    When provider a is down, in real seconds from the case's start.

    From `OUTAGE_FROM` of the schedule (its last arrival) on, for `OUTAGE_SHARE` of it.
    """
    span = max(offsets[-1], 0.0) if offsets else 0.0
    start = OUTAGE_FROM * span
    return start, start + OUTAGE_SHARE * span


def slowed(profile: Mapping[str, Any], factor: float = DRIFT_FACTOR) -> dict[str, Any]:
    """
    ``profile`` with every latency ``factor`` times longer: the TTFT and the decode.
    """
    out = dict(profile)
    out["ttft_median_s"] = profile["ttft_median_s"] * factor
    out["tokens_per_s"] = profile["tokens_per_s"] / factor
    return out


@dataclass(frozen=True, slots=True)
class Switched:
    """
    A case whose provider a changes for a window: the second server behind the switch.

    Attributes:
        kind: ``outage`` or ``drift``.
        server: The second server's name (``down``, ``slow``).
        profile: Provider a's profile on it.
        window: Real seconds from the case's start: inside it provider a's requests go to the
            second server (the end may be ``math.inf``).
    """

    kind: str
    server: str
    profile: Mapping[str, Any]
    window: tuple[float, float]


def switch_for(case: str, offsets: Sequence[float]) -> Switched | None:
    """
    How ``case`` changes provider a, or ``None`` (it does not).
    """
    if case == "outage":
        return Switched("outage", "down", DOWN, outage_window(offsets))
    if case == "drift":
        span = max(offsets[-1], 0.0) if offsets else 0.0
        return Switched("drift", "slow", slowed(ONE_STEP), (DRIFT_FROM * span, math.inf))
    return None


def _provider(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else key


def _one_step_plan(deadline_s: float, budget: float, prefix: str) -> Plan:
    text = (
        f"tailkit_plan: 1\nworkflow: peers\ndeadline_s: {deadline_s}\nhedge_budget: {budget}\n"
        f"routes:\n  a/m: {{provider: a, model: {prefix}.a}}\n"
        f"  b/m: {{provider: b, model: {prefix}.b}}\n"
        "steps:\n  answer: {route: a/m, hedge_route: b/m}\n"
    )
    return parse_plan(text)


def _workflow_plan(deadline_s: float, prefix: str) -> Plan:
    """
    The sample workflow on the served routes: no token buckets (the served latency has none).
    """
    doc = yaml.safe_load((ROOT / "data_samples" / "workflow.yaml").read_text())
    doc["deadline_s"] = deadline_s
    for key, route in doc["routes"].items():
        route["model"] = model_id(prefix, key)
    for step in doc["steps"].values():
        step.pop("expected_tokens", None)
    return parse_plan(yaml.safe_dump(doc, sort_keys=False))


def with_models(plan: Plan, variant: str) -> Plan:
    """
    ``plan`` with every route pointed at ``variant``'s copy of it.
    """
    routes = {}
    for name, route in plan.routes.items():
        routes[name] = dataclasses.replace(route, model=model_id(variant, route_key(route.model)))
    return dataclasses.replace(plan, routes=routes)


def _race(written: Plan) -> Plan:
    """
    The race's load as a plan: every step that has another route hedges there at once.

    The other route is the one a peer falls back to (`_alternate`), so that the tailkit race
    and LiteLLM's race send the same requests.
    """
    steps = {}
    for name, step in written.steps.items():
        other = _alternate(written, name)
        steps[name] = step if other is None else dataclasses.replace(
            step, hedge_route=other, signal="total", cutoff_s=0.001, ttft_cutoff_s=None,
            stall_cutoff_s=None, on_cutoff="hedge",
        )  # fmt: skip
    # (its client gives the executor a budget with no reserve for recovery: HedgeBudget keeps
    # a fifth of it by default, and the race hedges every call)
    return parse_plan(dump_plan(dataclasses.replace(written, steps=steps, hedge_budget=1.0)))


def _alternate(plan: Plan, step: str) -> str | None:
    """
    The route a peer falls back to: the step's hedge route, else the same model elsewhere.
    """
    s = plan.steps[step]
    if s.hedge_route is not None:
        return s.hedge_route
    own = plan.routes[s.route]
    for name, route in plan.routes.items():
        same_model = route_key(route.model).split("/")[-1] == route_key(own.model).split("/")[-1]
        if route.provider != own.provider and same_model:
            return name
    return None


def with_candidates(written: Plan) -> Plan:
    """
    The ``written`` plan with each model step's candidates: its route and its fallback.

    The fallback is the route a peer falls back to (`_alternate`); a step without one keeps
    its one route.
    """
    steps = {}
    for name, s in written.steps.items():
        other = _alternate(written, name)
        if s.tool or other is None or other == s.route:
            steps[name] = s
        else:
            steps[name] = dataclasses.replace(s, candidates=(s.route, other))
    return dataclasses.replace(written, steps=steps)


@dataclass(frozen=True, slots=True)
class Probe:
    """
    The before run: which routes, the served models, the schedule.
    """

    routes: tuple[tuple[str, str, bool], ...]  # (served id, provider, streamed)
    calls: int
    seed: int

    @property
    def models(self) -> dict[str, Any]:
        """
        The served models of the before run.
        """
        out: dict[str, Any] = {}
        for model, _, _ in self.routes:
            workflow = model.startswith("pre-w.")
            out[model] = dict(WORKFLOW_PROFILES[route_key(model)] if workflow else ONE_STEP)
        return out

    def spec(self, base_url: str, ledger: Path, rate: float) -> dict[str, Any]:
        """
        The ``probe`` command for the client: every route's calls, interleaved.
        """
        names = [f"r{i}" for i in range(len(self.routes))]
        routes = "\n".join(f"  {m}: {{provider: {p}, model: {m}}}" for m, p, _ in self.routes)
        steps = "\n".join(
            f"  {n}: {{route: {m}}}" for n, (m, _, _) in zip(names, self.routes, strict=True)
        )
        plan = (f"tailkit_plan: 1\nworkflow: before\ndeadline_s: 100000\nhedge_budget: 0\n"
                f"routes:\n{routes}\nsteps:\n{steps}\n")  # fmt: skip
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(np.repeat(np.arange(len(names)), self.calls))
        total = order.size
        rate_all = rate * max(len(self.routes) / 2.0, 1.0)
        offsets = np.cumsum(rng.exponential(1.0 / rate_all, size=total))
        calls = [(names[int(i)], float(t)) for i, t in zip(order, offsets, strict=True)]
        stream = {n: s for n, (_, _, s) in zip(names, self.routes, strict=True)}
        return {"op": "probe", "plan": plan, "base_url": base_url, "ledger": str(ledger),
                "calls": calls, "stream": stream}  # fmt: skip


def probe_spec(cases: Sequence[str], calls: int, seed: int) -> Probe:
    """
    The before run the cases need.
    """
    routes: list[tuple[str, str, bool]] = []
    for prefix, (serves, streamed) in PROBE_SETS.items():
        if not any(c in cases for c in serves):
            continue
        keys = WORKFLOW_PROFILES if prefix == "pre-w" else ("a", "b")
        routes += [(model_id(prefix, k), _provider(k), streamed) for k in keys]
    return Probe(tuple(routes), calls, seed)


@dataclass(frozen=True, slots=True)
class Calibrated:
    """
    What the variants are told, per case: the plans and the p95 timeouts.
    """

    plans: dict[str, Plan]  # case -> plan on the pre-* models
    bases: dict[str, Plan]  # case -> the plan as written (the peers' fallbacks come from it)
    p95_s: dict[str, float]  # served before-run model -> p95 of its calls' total seconds
    time_scale: float
    live: dict[str, Plan]  # case -> the tailkit-live variant's plan (candidates, live blocks)

    def deadline_s(self, case: str) -> float:
        """
        The case's deadline in real seconds.
        """
        return self.plans[case].deadline_s

    def spec(self, case: str, variant: str, **common: Any) -> dict[str, Any]:
        """
        The ``case`` command for ``variant``'s client.
        """
        base = self.plans[case]
        plan = with_models(base, variant)
        if variant == "tailkit-race":
            plan = _race(with_models(self.bases[case], variant))
        elif variant == "tailkit-live":
            plan = with_models(self.live[case], variant)
        spec: dict[str, Any] = {
            "op": "case", "case": case, "kind": "workflow" if case == "workflow" else "one-step",
            "deadline_s": base.deadline_s, "plan": dump_plan(plan), **common,
        }  # fmt: skip
        urls = spec.setdefault("base_urls", {})  # provider -> its base URL, else base_url

        def url(route: str) -> str:
            return str(urls.get(plan.routes[route].provider, spec["base_url"]))

        spec["routes"] = {
            name: {"name": s.route, "provider": plan.routes[s.route].provider,
                   "model": plan.routes[s.route].model, "base_url": url(s.route)}
            for name, s in plan.steps.items()
        }  # fmt: skip
        if variant.startswith("litellm"):
            groups = []
            written = self.bases[case]
            for name, s in base.steps.items():
                other = _alternate(written, name)
                groups.append({
                    "name": name, "primary": plan.routes[s.route].model,
                    "fallback": None if other is None else plan.routes[other].model,
                    "timeout_s": self.p95_s[base.routes[s.route].model],
                    "primary_url": url(s.route),
                    "fallback_url": None if other is None else url(other),
                })  # fmt: skip
            spec["groups"] = groups
        return spec

    def describe(self) -> dict[str, Any]:
        """
        The plans' decisions and the timeouts, for the report.
        """
        out: dict[str, Any] = {}
        for case, plan in self.plans.items():
            steps = {}
            for name, s in plan.steps.items():
                steps[name] = {
                    "signal": s.signal, "on_cutoff": s.on_cutoff, "hedge_route": s.hedge_route,
                    "cutoff_s": None if s.cutoff_s is None else s.cutoff_s / self.time_scale,
                    "ttft_cutoff_s": None if s.ttft_cutoff_s is None
                    else s.ttft_cutoff_s / self.time_scale,
                    "peer_timeout_s": self.p95_s[plan.routes[s.route].model] / self.time_scale,
                }  # fmt: skip
            predicted = plan.predicted
            out[case] = {"steps": steps, "hedge_budget": plan.hedge_budget,
                         "predicted_miss_rate": None if predicted is None
                         else predicted.miss_rate,
                         "live": self._live(case)}  # fmt: skip
        return out

    def _live(self, case: str) -> dict[str, Any]:
        """
        The tailkit-live plan's steps: route, candidates, live block (profile seconds).
        """
        plan, k = self.live[case], self.time_scale
        steps: dict[str, Any] = {}
        for name, s in plan.steps.items():
            live = s.live
            cutoff = s.ttft_cutoff_s if s.signal == "ttft" else s.cutoff_s
            steps[name] = {
                "route": s.route, "candidates": list(s.candidates), "signal": s.signal,
                "on_cutoff": s.on_cutoff, "hedge_route": s.hedge_route,
                "cutoff_s": None if cutoff is None else cutoff / k,
                "route_choice": None if s.basis is None else s.basis.route_choice,
                "live": None if live is None else {
                    "quantile": live.quantile,
                    "cutoff_bounds_s": [b / k for b in live.cutoff_bounds_s],
                    "prior_s": {r: v / k for r, v in live.prior_s.items()},
                    "window": live.window, "min_calls": live.min_calls,
                    "explore_every": live.explore_every,
                },
            }  # fmt: skip
        return {"steps": steps}


def calibrate_all(
    work: Path, probe: Probe, cases: Sequence[str], time_scale: float, *, seed: int
) -> Calibrated:
    """
    Ingest the before run and calibrate each case's plan on it, in real (scaled) seconds.
    """
    ledger = work / "before.jsonl"
    totals: dict[str, list[float]] = {}
    ttfts: dict[str, list[float]] = {}
    for line in ledger.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["status"] == "ok":
            totals.setdefault(row["model"], []).append(row["total_s"])
            ttfts.setdefault(row["model"], []).append(row["ttft_s"] or row["total_s"])
    p95 = {m: float(np.quantile(v, 0.95)) for m, v in totals.items()}
    plans: dict[str, Plan] = {}
    bases: dict[str, Plan] = {}
    live: dict[str, Plan] = {}
    found: dict[str, Plan] = {}  # the written plan (YAML) -> its calibrated plan
    found_live: dict[str, Plan] = {}  # the same with candidates, calibrated --live
    with Store.open(work / "before.duckdb") as store:
        report = ingest_paths(store, [ledger], format="trace")
        if not report.ok:
            msg = f"ingesting the before run failed: {report.errors}"
            raise SystemExit(msg)
        for case in cases:
            if case == "workflow":
                base = _workflow_plan(90.0 * time_scale, "pre-w")
            else:
                prefix = "pre-s" if case == "one-step-stream" else "pre-n"
                # the load the peers' timeout spends on the before run (a stream's timeout
                # waits for the first chunk), plus half a point
                # (on route a's calls alone: the sample calibrate reads, so that the cutoff the
                # budget affords there falls where the peers' timeout does)
                model = f"{prefix}.a"
                over = float(np.mean(np.asarray(ttfts[model]) > p95[model]))
                budget = round(over + MATCH_TOLERANCE, 3)
                base = _one_step_plan(ONE_STEP_DEADLINE_S * time_scale, budget, prefix)
            text = dump_plan(base)  # one-step, the storm and the outage: one plan
            if text not in found:
                found[text] = calibrate(store, base, runs=20_000, check_runs=50_000,
                                        min_calls=100, seed=seed).plan  # fmt: skip
                found_live[text] = calibrate(store, with_candidates(base), live=True,
                                             runs=20_000, check_runs=50_000, min_calls=100,
                                             seed=seed).plan  # fmt: skip
            plans[case], bases[case], live[case] = found[text], base, found_live[text]
    if math.isnan(sum(p95.values())):
        msg = "the before run has a route without answers"
        raise SystemExit(msg)
    return Calibrated(plans, bases, p95, time_scale, live)
