"""
tailkit side by side with what users pick instead: LiteLLM's Router, on the same served tail.

One `tailkit serve` process replays the seed's case: one model on two independent providers
(a and b), TTFT lognormal (median 8 s, sigma 0.15), 10 tokens at 5 tokens/s, 3 % of requests
stalled 6x; and, for the workflow, the seven steps of ``data_samples/workflow.yaml`` on six
routes. Every variant runs in a process of its own (`_peers_client`), all at once, against the
same server, on the same schedule of calls (Poisson arrivals, one seed): its CPU and event loop
are its own, and each gets its own copies of the served models (the same profile, the same
generator), so the access log says which requests were whose.

Variants: ``none`` (a bare request per call); ``tailkit`` (the plan `tailkit calibrate` finds
on a "before" run of plain calls, run by the executor); ``tailkit-live`` (the executor's live
mode: the plan ``tailkit calibrate --live`` finds on the same before run, each step's
candidates its route and its fallback, a and b in the one-step cases; the first attempt goes
to the candidate whose recent latency is best, and the cutoff follows it); ``tailkit-race`` (a
hand-written plan that hedges at once, the race's load); LiteLLM 1.110.2's Router as its docs
recommend for latency (`_peers_litellm`): a group with ``timeout`` = the before run's p95 and
one retry, a group with a fallback, latency-based routing, and the race
(``abatch_completion_fastest_response``). The peers get the same before run: their timeout is
its p95.

Cases: ``one-step`` (not streamed, 40 s deadline), ``one-step-stream``, ``workflow`` (the sample
workflow under its 90 s end-to-end deadline; each peer applies its policy per call, as a user
would), ``429-storm`` (provider a's tokens-per-minute limit admits about a tenth of the load
sent to it: 429s with a Retry-After), ``outage`` (provider a answers 5xx to every request
from a quarter of the schedule on, for 35 % of it, then recovers; provider a's base URL is a
switch between the case's server and a down server, `_peers_outage`), ``drift`` (provider
a's every latency, TTFT and decode, doubles from the middle of the schedule on and stays so;
the same switch, to a server whose provider-a models are slowed). The storm, the outage and
the drift run the one-step plan: none is in the history it is calibrated on.

``tailkit-sdk`` is the ``tailkit`` variant (the same plan, the same executor) around the
official OpenAI SDK: an ``openai.AsyncOpenAI`` client per provider through
`tailkit.adapters.openai_sdk`, what a team that already calls the SDK would write. The
executor's circuit breaker keeps its defaults (5 failures in a row, or half of the last 20,
open it for 30 s): not scaled, so at the default time scale its cool-down stands for 120
profile seconds, where LiteLLM's cooldown is scaled (`_peers_litellm`).

Per variant: p50, p97 and p99 (profile seconds, a failed call counts as never answered, with
distribution-free 95 % intervals), the miss rate (failed, or later than the deadline; Wilson
95 % interval), extra requests (serve's access log: requests per call, less one), client CPU
per call (the client process's CPU over the case, per step call) and the event loop's lag.
The outage adds, per variant, the misses among the calls scheduled inside the window and the
requests the failing provider answered 5xx (the down server's access log); the drift, the
misses and the p99 among the calls scheduled after it began, and the requests the slowed
provider answered (the slow server's access log). The tailkit variants' ledgers say what the
executor did (`ledger_notes`: failovers, the breaker, the live mode's choices). The verdict
lines marked (SDK) and (live) compare tailkit-sdk, or tailkit-live, alone.
The runs are time-scaled (``--time-scale``, default 0.25: 10 profile seconds take 2.5 s); every
LiteLLM constant in seconds is scaled with them. Exits 0 whatever the numbers; nonzero on
errors (LiteLLM missing: ``pip install 'tailkit[bench]'``, or ``--variants none,tailkit``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import numpy as np
import yaml

from scipy import stats as st


HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # appended: never shadows an installed package (distributed)
    sys.path.append(str(HERE))

from _peers_outage import SwitchProcess  # noqa: E402 - after the path is set
from _peers_plans import (  # noqa: E402
    CASES,
    DRIFT_FACTOR,
    VARIANTS,
    WARMUP,
    Calibrated,
    Switched,
    calibrate_all,
    case_routes,
    model_id,
    probe_spec,
    route_key,
    storm_limit,
    switch_for,
)


LOAD_TOLERANCE = 0.01  # extra requests within a point of the peer's count as equal load
# Real seconds from sending the specs to the common start: every client builds its caller and
# warms up before it (a client that starts late is late on every call, and in the outage it
# meets the window at another point of its schedule: its row says ``late_start_s``).
START_LEAD_S = 5.0


def _arrivals(n: int, rate: float, seed: int) -> list[float]:
    """
    ``n`` Poisson arrival offsets at ``rate`` per second (the same for every variant).
    """
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return [float(x) for x in np.cumsum(gaps) - gaps[0]]


class Server:
    """
    `tailkit serve` in its own process, on a profile written for one case.
    """

    def __init__(self, work: Path, name: str, models: Mapping[str, Mapping[str, Any]],
                 *, time_scale: float, seed: int) -> None:  # fmt: skip
        self.profile = work / f"{name}.profile.yaml"
        self.log = work / f"{name}.access.jsonl"
        self.log.unlink(missing_ok=True)  # serve appends: a kept --workdir starts afresh
        doc = {"time_scale": time_scale, "seed": seed, "models": dict(models)}
        self.profile.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    @property
    def port(self) -> int:
        """
        The port it listens on.
        """
        return int(urlsplit(self.url).port or 0)

    def __enter__(self) -> Server:
        cmd = [sys.executable, "-m", "tailkit", "serve", "--profile", str(self.profile),
               "--port", "0", "--json", "--log", str(self.log),
               "--idle-timeout", "inf"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"tailkit serve did not start (exit {self.proc.wait()})")
        self.url = json.loads(line)["url"]
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def requests(self) -> Counter[str]:
        """
        Requests in the access log, by the variant their model id belongs to.
        """
        counts: Counter[str] = Counter()
        with self.log.open(encoding="utf-8") as lines:
            for line in lines:
                model = json.loads(line).get("model") or ""
                counts[model.split(".", 1)[0]] += 1
        return counts


class Clients:
    """
    One `_peers_client` process per variant, talking JSON lines.
    """

    def __init__(self, variants: Sequence[str]) -> None:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for v in variants:
            cmd = [sys.executable, str(HERE / "_peers_client.py"), v]
            self.procs[v] = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        for v in variants:
            self._read(v)  # "ready": LiteLLM imported

    def _read(self, variant: str) -> dict[str, Any]:
        out: IO[str] | None = self.procs[variant].stdout
        assert out is not None
        line = out.readline()
        if not line:
            sys.exit(f"the {variant} client exited (code {self.procs[variant].wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """
        Send each variant its spec, then wait for every answer (they run at the same time).
        """
        for v, spec in specs.items():
            stdin = self.procs[v].stdin
            assert stdin is not None
            stdin.write(json.dumps(spec) + "\n")
            stdin.flush()
        return {v: self._read(v) for v in specs}

    def close(self) -> None:
        """
        Tell every client to quit, and wait.
        """
        for proc in self.procs.values():
            if proc.stdin is not None and proc.poll() is None:
                proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                proc.stdin.close()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


# ------------------------------------------------------------------------------ statistics


def quantile(seconds: np.ndarray, q: float) -> tuple[float, float, float]:
    """
    The ``q`` quantile and its distribution-free 95 % interval (order statistics).

    Not `tailkit.fit.empirical_quantiles`: a failed call here never answers (``inf``, above
    every answer), which that function reads as an error or, censored, as a call that might
    still have answered later.
    """
    x = np.sort(seconds)
    n = x.size
    k = min(max(math.ceil(q * n) - 1, 0), n - 1)
    lo = int(st.binom.ppf(0.025, n, q))
    hi = min(int(st.binom.ppf(0.975, n, q)), n - 1)
    return float(x[k]), float(x[max(lo - 1, 0)]), float(x[hi])


def wilson(misses: int, n: int) -> tuple[float, float]:
    """
    Wilson 95 % interval of a share (scipy's).
    """
    ci = st.binomtest(misses, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def summarize(
    variant: str, answer: Mapping[str, Any], requests: int, *, time_scale: float, deadline_s: float
) -> dict[str, Any]:
    """
    One variant's row: quantiles, misses, load, CPU, lag.
    """
    seconds = np.asarray(answer["seconds"], dtype=float) / time_scale
    ok = np.asarray(answer["ok"], dtype=bool)
    n = seconds.size
    missed = int((~ok | (seconds > deadline_s)).sum())
    row: dict[str, Any] = {
        "name": variant,
        "tool": "tailkit" if variant.startswith("tailkit") else
                "none" if variant == "none" else "litellm",
        "calls": n, "failed": int((~np.isfinite(seconds)).sum()),
    }  # fmt: skip
    for q, key in ((0.5, "p50"), (0.97, "p97"), (0.99, "p99")):
        value, lo, hi = quantile(seconds, q)
        row[f"{key}_s"] = value if math.isfinite(value) else None
        row[f"{key}_interval_s"] = [lo, hi if math.isfinite(hi) else None]
    row["miss_rate"] = missed / n
    row["miss_interval"] = list(wilson(missed, n))
    step_calls = max(int(answer["step_calls"]), 1)
    row["requests"] = requests
    row["step_calls"] = step_calls
    row["extra_requests"] = requests / step_calls - 1.0
    row["cpu_ms_per_call"] = answer["cpu_s"] * 1000.0 / step_calls
    row["loop_lag_ms"] = answer["lag"]
    row["denials"] = answer.get("denials", {})
    row["late_start_s"] = answer.get("late_start_s", 0.0)
    return row


def verdicts(rows: Sequence[Mapping[str, Any]], *, only: str | None = None) -> list[dict[str, Any]]:
    """
    Per LiteLLM variant: is a tailkit variant at equal or lower extra load at or ahead of it?

    The tailkit variant compared is the best on p99 among those whose extra requests are at
    most the peer's plus `LOAD_TOLERANCE`, or not more than chance makes them (each variant's
    requests meet their own draws of the same tail: their stall counts, and so their extra
    requests, differ by chance; in a short run by more than a point). ``p99`` and
    ``misses``: ``ahead`` (lower), ``behind`` (higher, and the difference is not chance: the
    95 % intervals of the two p99s do not overlap; for misses, Fisher's exact test, one-sided,
    p < 0.05), else ``at``. ``only``: compare that tailkit variant alone (``tailkit-sdk``:
    is the executor around the OpenAI SDK at or ahead too?).
    """
    out = []
    ours = [r for r in rows if r["tool"] == "tailkit" and only in (None, r["name"])]
    for peer in (r for r in rows if r["tool"] == "litellm"):
        fair = [r for r in ours if _not_more_load(r, peer)]
        if not fair:
            out.append({"peer": peer["name"], "tailkit": None, "pass": False,
                        "why": "no tailkit variant at equal or lower extra load"})  # fmt: skip
            continue
        best = min(fair, key=lambda r: (_inf(r["p99_s"]), r["miss_rate"]))
        p99 = _compare_p99(best, peer)
        miss = _compare_misses(best, peer)
        out.append({"peer": peer["name"], "tailkit": best["name"], "p99": p99, "misses": miss,
                    "pass": "behind" not in (p99, miss)})  # fmt: skip
    return out


def _not_more_load(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """
    Whether our extra requests are not more than the peer's.

    At most the peer's plus `LOAD_TOLERANCE`, or not more than chance makes them (the exact
    test of two Poisson rates, one-sided, p >= 0.05).
    """
    if ours["extra_requests"] <= theirs["extra_requests"] + LOAD_TOLERANCE:
        return True
    a = max(ours["requests"] - ours["step_calls"], 0)
    b = max(theirs["requests"] - theirs["step_calls"], 0)
    if a == 0:  # no extra request at all (the peer's calls that sent none made it negative)
        return True
    share = ours["step_calls"] / (ours["step_calls"] + theirs["step_calls"])
    return bool(st.binomtest(a, a + b, share, alternative="greater").pvalue >= 0.05)


def _inf(value: float | None) -> float:
    return math.inf if value is None else value


def _compare_p99(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    mine, other = _inf(ours["p99_s"]), _inf(theirs["p99_s"])
    if mine < other:
        return "ahead"
    low = _inf(ours["p99_interval_s"][0])
    high = _inf(theirs["p99_interval_s"][1])
    return "behind" if mine > other and low > high else "at"


def _compare_misses(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    mine, other = ours["miss_rate"], theirs["miss_rate"]
    if mine < other:
        return "ahead"
    if mine == other:
        return "at"
    a, n = round(mine * ours["calls"]), ours["calls"]
    b, m = round(other * theirs["calls"]), theirs["calls"]
    test = st.fisher_exact([[a, n - a], [b, m - b]], alternative="greater")
    return "behind" if test.pvalue < 0.05 else "at"


# ---------------------------------------------------------------------------------- the run


def run_case(
    case: str,
    variants: Sequence[str],
    *,
    clients: Clients,
    plans: Calibrated,
    args: Any,
    work: Path,
) -> dict[str, Any]:
    """
    One case: a server for it, every variant at once, and the rows.
    """
    scale = args.time_scale
    workflow = case == "workflow"
    stream = case == "one-step-stream"
    n = args.runs if workflow else args.calls
    rate = args.workflow_rate if workflow else args.rate
    offsets = _arrivals(n, rate, args.seed + CASES.index(case))
    deadline_s = plans.deadline_s(case)
    models: dict[str, Any] = {"warmup": WARMUP}
    for v in variants:
        for key, profile in case_routes(case).items():
            models[model_id(v, key)] = dict(profile)
            if case == "429-storm" and key == "a":
                models[model_id(v, key)]["faults"] = {"tpm_limit": storm_limit(rate, scale)}
    switched = switch_for(case, offsets)
    with ExitStack() as stack:
        server = stack.enter_context(
            Server(work, case, models, time_scale=scale, seed=args.seed)
        )  # fmt: skip
        other: Server | None = None
        urls: dict[str, str] = {}
        if switched is not None:  # provider a behind a switch to a changed server for a window
            other_models = {model_id(v, "a"): switched.profile for v in variants}
            other = stack.enter_context(Server(work, f"{case}.{switched.server}", other_models,
                                               time_scale=scale, seed=args.seed + 1))  # fmt: skip
        start_at = time.time() + START_LEAD_S
        if other is not None and switched is not None:
            edges = (start_at + switched.window[0], start_at + switched.window[1])
            urls["a"] = stack.enter_context(SwitchProcess(server.port, other.port, edges)).url
        specs = {
            v: plans.spec(case, v, base_url=server.url, base_urls=urls, offsets=offsets,
                          start_at=start_at, stream=stream, time_scale=scale, seed=args.seed)
            for v in variants
        }  # fmt: skip
        for v in variants:
            if v.startswith("tailkit"):  # the executor's ledger, to read what it decided
                ledger = work / f"{case}.{v}.ledger.jsonl"
                ledger.unlink(missing_ok=True)
                specs[v]["ledger"] = str(ledger)
        answers = clients.ask(specs)
    requests = server.requests()
    changed: Counter[str] = other.requests() if other is not None else Counter()
    rows = [
        summarize(v, answers[v], requests[v] + changed[v], time_scale=scale,
                  deadline_s=deadline_s / scale)
        for v in variants
    ]  # fmt: skip
    out = {"case": case, "calls": n, "deadline_s": deadline_s / scale,
           "variants": rows, "verdicts": verdicts(rows)}  # fmt: skip
    for key, variant in (("sdk_verdicts", "tailkit-sdk"), ("live_verdicts", "tailkit-live")):
        if variant in variants:
            out[key] = verdicts(rows, only=variant)
    for row in rows:
        if row["name"].startswith("tailkit"):
            row["ledger"] = ledger_notes(work / f"{case}.{row['name']}.ledger.jsonl")
    if switched is not None:
        inside = [switched.window[0] <= off < switched.window[1] for off in offsets]
        _switched_rows(out, switched, inside, answers, changed, time_scale=scale,
                       deadline_s=deadline_s)  # fmt: skip
    return out


def _switched_rows(
    out: dict[str, Any],
    switched: Switched,
    inside: Sequence[bool],
    answers: Mapping[str, Mapping[str, Any]],
    changed: Counter[str],
    *,
    time_scale: float,
    deadline_s: float,
) -> None:
    """
    The outage's or the drift's own figures: the case's block and each row's (in place).

    ``inside``: per call, whether it was scheduled inside the window; ``changed``: the
    requests the changed server answered, by variant; ``deadline_s`` in real seconds.
    """
    since, until = switched.window
    calls = sum(inside)
    rows = out["variants"]
    if switched.kind == "outage":
        out["outage"] = {"from_s": since / time_scale, "until_s": until / time_scale,
                         "calls": calls}  # fmt: skip
        for row in rows:
            row["failed_provider_requests"] = changed[row["name"]]
            row["outage_misses"] = _misses_inside(answers[row["name"]], inside, deadline_s)
        return
    out["drift"] = {"from_s": since / time_scale, "factor": DRIFT_FACTOR, "calls": calls}
    for row in rows:
        answer = answers[row["name"]]
        row["slow_provider_requests"] = changed[row["name"]]
        row["drift_misses"] = _misses_inside(answer, inside, deadline_s)
        after = np.asarray([x for x, i in zip(answer["seconds"], inside, strict=True) if i])
        p99 = quantile(after / time_scale, 0.99)[0] if after.size else math.inf
        row["drift_p99_s"] = p99 if math.isfinite(p99) else None


def _run_and_keep(case: str, variants: Sequence[str], *, work: Path, **kw: Any) -> dict[str, Any]:
    """
    `run_case`, its figures also written to the workdir (``CASE.result.json``) as it ends.
    """
    out = run_case(case, variants, work=work, **kw)
    (work / f"{case}.result.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    return out


def ledger_notes(path: Path) -> dict[str, int]:
    """
    What the executor's ledger says it did: failovers, refused retries, its breaker's events.

    Counts of ledger lines by ``attrs``: ``failover`` (a failed attempt retried on the hedge
    route's provider), ``retry_denied:<why>`` (an error's retry refused: the call failed),
    ``breaker:<event>`` (``opened``, ``closed``, ``probe``, ``open``: a first attempt moved off
    a provider whose breaker was open), ``rerouted``, and the live mode's first attempts by
    decision and route (``live:best:<route>``, ``live:explore:<route>``).
    """
    notes: Counter[str] = Counter()
    if not path.exists():
        return {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            attrs = row.get("attrs") or {}
            if "failover" in attrs:
                notes["failover"] += 1
            if "retry_denied" in attrs:
                notes[f"retry_denied:{attrs['retry_denied']}"] += 1
            if "breaker" in attrs:
                notes[f"breaker:{str(attrs['breaker']).split(':', 1)[0]}"] += 1
            if attrs.get("rerouted"):
                notes["rerouted"] += 1
            if "live" in attrs:
                route = route_key(str(row.get("model") or "?.?"))
                notes[f"live:{attrs['live']}:{route}"] += 1
    return dict(sorted(notes.items()))


def _misses_inside(answer: Mapping[str, Any], inside: Sequence[bool], deadline_s: float) -> int:
    """
    The calls scheduled inside the outage that failed or ended after the deadline.
    """
    return sum(
        1
        for s, ok, i in zip(answer["seconds"], answer["ok"], inside, strict=True)
        if i and (not ok or s > deadline_s)
    )


def _row_text(r: Mapping[str, Any]) -> str:
    def q(key: str) -> str:
        v, (lo, hi) = r[f"{key}_s"], r[f"{key}_interval_s"]
        if v is None:
            return "failed"
        return f"{v:.1f} ({lo:.1f}–{hi:.1f})" if hi is not None else f"{v:.1f} ({lo:.1f}–)"

    lo, hi = r["miss_interval"]
    lag = r["loop_lag_ms"]
    return (f"| {r['name']} | {q('p50')} | {q('p97')} | {q('p99')} | {r['miss_rate']:.1%} "
            f"({lo:.1%}–{hi:.1%}) | {r['extra_requests']:.1%} | {r['cpu_ms_per_call']:.1f} | "
            f"{lag['p99_ms']:.0f} / {lag['max_ms']:.0f} |")  # fmt: skip


def print_tables(result: Mapping[str, Any]) -> None:
    """
    Markdown tables, one per case, and the verdicts.
    """
    print(f"time scale {result['time_scale']}; seconds are profile seconds; "
          f"{result['wall_s']:.0f} s wall")  # fmt: skip
    _print_live_plans(result["plans"])
    for case in result["cases"]:
        print(f"\n### {case['case']} ({case['calls']:,} calls per variant, "
              f"deadline {case['deadline_s']:.0f} s)\n")  # fmt: skip
        print("| variant | p50 s | p97 s | p99 s | misses | extra requests | CPU ms/call | "
              "loop lag p99 / max ms |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in case["variants"]:
            print(_row_text(r))
        if "outage" in case:
            o = case["outage"]
            print(f"\nProvider a down from {o['from_s']:.0f} s to {o['until_s']:.0f} s "
                  f"({o['calls']} calls scheduled inside): misses inside, requests provider a "
                  "answered 5xx")  # fmt: skip
            for r in case["variants"]:
                notes = r.get("ledger")
                said = f" (ledger: {_notes_text(notes)})" if notes else ""
                print(f"- {r['name']}: {r['outage_misses']} of {o['calls']}, "
                      f"{r['failed_provider_requests']}{said}")  # fmt: skip
        if "drift" in case:
            d = case["drift"]
            print(f"\nProvider a {d['factor']:g}x slower from {d['from_s']:.0f} s on "
                  f"({d['calls']} calls scheduled after): misses after, p99 after, requests "
                  "the slowed provider a answered")  # fmt: skip
            for r in case["variants"]:
                notes = r.get("ledger")
                said = f" (ledger: {_notes_text(notes)})" if notes else ""
                p99 = "failed" if r["drift_p99_s"] is None else f"{r['drift_p99_s']:.1f} s"
                print(f"- {r['name']}: {r['drift_misses']} of {d['calls']}, {p99}, "
                      f"{r['slow_provider_requests']}{said}")  # fmt: skip
        late = [r["name"] for r in case["variants"] if r["late_start_s"] > 0.1]
        if late:
            print(f"\nStarted late (the warm-up outlasted the lead): {', '.join(late)}")
        for v in case["verdicts"]:
            print(_verdict_text(v, ""))
        for key, mark in (("sdk_verdicts", "(SDK) "), ("live_verdicts", "(live) ")):
            for v in case.get(key, []):
                print(_verdict_text(v, mark))


def _print_live_plans(plans: Mapping[str, Any]) -> None:
    """
    What tailkit-live was told, per distinct plan: each step's first route, candidates, live.
    """
    seen: dict[str, list[str]] = {}
    for case, plan in plans.items():
        text = json.dumps(plan.get("live"), sort_keys=True)
        seen.setdefault(text, []).append(case)
    if not seen:
        return
    print("\ntailkit-live's plans (calibrate --live):")
    for text, cases in seen.items():
        steps = (json.loads(text) or {}).get("steps", {})
        for name, s in steps.items():
            live = s.get("live")
            cut = "none" if s["cutoff_s"] is None else f"{s['cutoff_s']:.1f} s"
            among = ", ".join(s["candidates"]) or s["route"]
            line = f"- {', '.join(cases)}: {name}: {s['route']} of [{among}], "
            line += f"{s['on_cutoff']} at {cut}"
            if live is not None:
                prior = ", ".join(f"{r} {v:.1f}" for r, v in live["prior_s"].items())
                low, high = live["cutoff_bounds_s"]
                line += (f"; live: q {live['quantile']:g}, prior {prior}, bounds {low:.1f}–"
                         f"{high:.1f} s, window {live['window']}, min {live['min_calls']}, "
                         f"explore every {live['explore_every']}")  # fmt: skip
            print(line)


def _verdict_text(v: Mapping[str, Any], mark: str) -> str:
    if v["tailkit"] is None:
        return f"- {mark}vs {v['peer']}: FAIL ({v['why']})"
    verdict = "PASS" if v["pass"] else "FAIL"
    return (f"- {mark}vs {v['peer']}: {v['tailkit']} p99 {v['p99']}, misses {v['misses']}: "
            f"{verdict}")  # fmt: skip


def _notes_text(notes: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in notes.items())


def main(argv: list[str] | None = None) -> int:
    """
    Run the cases and print the tables (or JSON).
    """
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="LiteLLM comes with pip install 'tailkit[bench]'; without it, run "
        "--variants none,tailkit,tailkit-sdk,tailkit-live,tailkit-race. "
        "Example: python3 benchmarks/peers.py --json",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--calls", type=int, default=800, help="calls per variant per case")
    parser.add_argument("--runs", type=int, default=300, help="workflow runs per variant")
    parser.add_argument("--rate", type=float, default=6.0,
                        help="calls per real second per variant (one-step cases)")  # fmt: skip
    parser.add_argument("--workflow-rate", type=float, default=2.0,
                        help="workflow runs per real second per variant")  # fmt: skip
    parser.add_argument(
        "--probe-calls",
        type=int,
        default=400,
        help="before-run calls per route (the plans and timeouts read them)",
    )
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="real seconds per profile second (1: real time)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=7,
                        help="seed of the schedules and the served draws")  # fmt: skip
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--workdir", type=Path, help="keep the logs, profiles and plans here")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    for name, low in (("calls", 1), ("runs", 1), ("probe_calls", 100)):
        if getattr(args, name) < low:
            parser.error(f"--{name.replace('_', '-')} must be at least {low}")
    for name in ("rate", "workflow_rate", "time_scale"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive number")
    cases = [c for c in args.cases.split(",") if c]
    variants = [v for v in args.variants.split(",") if v]
    for c in cases:
        if c not in CASES:
            parser.error(f"--cases: unknown case {c!r}; pick from {', '.join(CASES)}")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"--variants: unknown variant {v!r}; pick from {', '.join(VARIANTS)}")
    # found, not imported: the clients import it (seconds), and offline
    wants = any(v.startswith("litellm") for v in variants)
    if wants and importlib.util.find_spec("litellm") is None:
        sys.exit("LiteLLM is not installed: pip install 'tailkit[bench]' (or run only "
                 "--variants none,tailkit,tailkit-sdk,tailkit-live,tailkit-race)")  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        clients = Clients(sorted(set(variants) | {"none"}))
        try:
            probe = probe_spec(cases, args.probe_calls, args.seed)
            with Server(work, "before", probe.models, time_scale=args.time_scale,
                        seed=args.seed + 100) as server:  # fmt: skip
                (work / "before.jsonl").unlink(missing_ok=True)
                clients.ask({"none": probe.spec(server.url, work / "before.jsonl", args.rate)})
            plans = calibrate_all(work, probe, cases, args.time_scale, seed=args.seed)
            results = [
                _run_and_keep(c, variants, clients=clients, plans=plans, args=args, work=work)
                for c in cases
            ]
        finally:
            clients.close()
    result = {"time_scale": args.time_scale, "seed": args.seed,
              "wall_s": time.monotonic() - started, "plans": plans.describe(),
              "cases": results}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
