"""
The plan file written back: dump and parse round-trip, byte-stable, in the documented layout.
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given
from hypothesis import strategies as st

from tailkit.config import (
    ACTIONS,
    Basis,
    LiveRouting,
    Plan,
    PlanInterval,
    PlanPrediction,
    Route,
    Step,
    StepInterval,
    StepPrediction,
    Tokens,
    dump_plan,
    parse_plan,
)
from tests.test_config import EXTRACT, PREDICTED, ROUTES


_AWKWARD_S = (0.1, 1e-05, 123456.789, 1 / 3, 7.0, 2.5e-07, 1e16, 86400.0)
_SECONDS = st.sampled_from(_AWKWARD_S) | st.floats(1e-06, 1e07)
_TIMES = st.sampled_from((*_AWKWARD_S, 0.0, math.inf)) | st.floats(0, 1e07)
_SHARES = st.sampled_from((0.0, 1.0, 0.1, 1e-05, 5e-324, 0.30000000000000004)) | st.floats(0, 1)
_RATIOS = st.sampled_from((0.0, 0.049, 1e-05, 1.5)) | st.floats(0, 1e06)
_NAMES = st.sampled_from(
    ("openai/gpt-4.1", "null", "yes", "1e3", "1_000", "0x1F", "1:30", "a: b", "#x", "- x", "<<",
     "=", "~", ".inf", "in 4k-16k / out 600-1200", "'q'", '"dq"', "é", " pad ", "x\ny", "x\x85y")
) | st.text(min_size=1, max_size=8).filter(str.strip)  # fmt: skip


def _below(high: float) -> st.SearchStrategy[float]:
    return _SECONDS.map(lambda v: v if v < high else high / 3)


def _ordered(times: st.SearchStrategy[float]) -> st.SearchStrategy[tuple[float, float]]:
    return st.tuples(times, times).map(lambda pair: (min(pair), max(pair)))


_LEVELS = st.sampled_from((0.95, 0.9, 0.5)) | st.floats(0, 1, exclude_min=True, exclude_max=True)


def _around(draw: st.DrawFn, value: float, values: st.SearchStrategy[float]) -> tuple[float, float]:
    """Bounds from ``values`` widened to hold ``value``: low <= value <= high."""
    return min(draw(values), value), max(draw(values), value)


@st.composite
def _step_predictions(draw: st.DrawFn) -> StepPrediction:
    (p50_s, p99_s), rate = draw(_ordered(_TIMES)), draw(_SHARES)
    interval = None
    if draw(st.booleans()):
        interval = StepInterval(
            level=draw(_LEVELS),
            p50_s=_around(draw, p50_s, _TIMES),
            p99_s=_around(draw, p99_s, _TIMES),
            hedge_rate=_around(draw, rate, _SHARES),
        )
    return StepPrediction(p50_s=p50_s, p99_s=p99_s, hedge_rate=rate, interval=interval)


@st.composite
def _plan_predictions(draw: st.DrawFn) -> PlanPrediction:
    (p50_s, p99_s), miss, extra = draw(_ordered(_TIMES)), draw(_SHARES), draw(_RATIOS)
    interval = None
    if draw(st.booleans()):
        interval = PlanInterval(
            level=draw(_LEVELS),
            p50_s=_around(draw, p50_s, _TIMES),
            p99_s=_around(draw, p99_s, _TIMES),
            miss_rate=_around(draw, miss, _SHARES),
            extra_attempts=_around(draw, extra, _RATIOS),
        )
    return PlanPrediction(
        p50_s=p50_s, p99_s=p99_s, miss_rate=miss, extra_attempts=extra, interval=interval
    )


@st.composite
def _steps(draw: st.DrawFn, name: str, deps: list[str], routes: list[str], limit: float) -> Step:
    route = draw(st.sampled_from(routes))
    others = [r for r in routes if r != route]
    hedge_route = draw(st.none() | st.sampled_from(others)) if others else None
    cutoff_s = draw(st.none() | _below(limit))
    inner = limit if cutoff_s is None else cutoff_s
    ttft_cutoff_s, stall_cutoff_s = draw(st.none() | _below(inner)), draw(st.none() | _below(inner))
    signal = draw(st.sampled_from(("total", "ttft") if ttft_cutoff_s is not None else ("total",)))
    idempotent, downgrade_route = draw(st.booleans()), draw(st.none() | st.sampled_from(routes))
    armed = (ttft_cutoff_s if signal == "ttft" else cutoff_s) is not None
    can = {
        "wait": True,
        "fail": armed,
        "retry": armed and idempotent,
        "hedge": armed and idempotent and hedge_route is not None,
        "downgrade": armed and downgrade_route is not None,
    }
    extra = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
    candidates = draw(st.sampled_from(((), (route, *extra), (*extra, route))))
    live = None
    if draw(st.booleans()):
        low, high = draw(_ordered(_below(limit)))
        window = draw(st.integers(1, 10**6))
        live = LiveRouting(
            quantile=draw(_LEVELS),
            cutoff_bounds_s=(low, high),
            prior_s={r: draw(_SECONDS | st.just(math.inf)) for r in candidates or (route,)},
            window=window,
            min_calls=draw(st.integers(1, window)),
            explore_every=draw(st.integers(0, 10**6)),
        )
    return Step(
        name, route, depends_on=tuple(deps), required=draw(st.booleans()),
        expected_tokens=draw(st.builds(Tokens, *[st.none() | st.integers(0, 10**12)] * 2)),
        idempotent=idempotent, signal=signal, ttft_cutoff_s=ttft_cutoff_s,
        stall_cutoff_s=stall_cutoff_s, cutoff_s=cutoff_s,
        on_cutoff=draw(st.sampled_from([a for a in ACTIONS if can[a]])),
        hedge_route=hedge_route, downgrade_route=downgrade_route,
        upgrade_route=draw(st.none() | st.sampled_from(routes)),
        candidates=candidates, live=live,
        predicted=draw(st.none() | _step_predictions()),
        basis=draw(st.none() | st.builds(
            Basis, calls=st.integers(0, 10**9), bucket=_NAMES, quantile=st.none() | _SHARES,
            censored=_SHARES, route_choice=st.none() | _NAMES)),
    )  # fmt: skip


@st.composite
def _plans(draw: st.DrawFn) -> Plan:
    routes = draw(st.lists(_NAMES, min_size=1, max_size=4, unique=True))
    names = draw(st.lists(_NAMES, min_size=1, max_size=6, unique=True))
    deadline_s = draw(_SECONDS)
    # Dependencies point to steps drawn earlier (a DAG); the file lists steps in any order.
    steps = {
        name: draw(_steps(name, draw(st.lists(st.sampled_from(names[:i]), unique=True))
                          if i else [], routes, deadline_s))
        for i, name in enumerate(names)
    }  # fmt: skip
    return Plan(
        draw(_NAMES),
        deadline_s,
        {r: Route(draw(_NAMES), draw(_NAMES)) for r in routes},
        {name: steps[name] for name in draw(st.permutations(names))},
        hedge_budget=draw(_SHARES),
        predicted=draw(st.none() | _plan_predictions()),
    )


@given(plan=_plans())
def test_dump_then_parse_gives_the_same_plan_and_the_same_bytes(plan: Plan) -> None:
    """
    Any valid plan survives dump → parse unchanged (file order too), and dumps byte-identically.
    """
    text = dump_plan(plan)
    again = parse_plan(text)

    assert plan == again
    assert (list(plan.routes), list(plan.steps)) == (list(again.routes), list(again.steps))
    assert text == dump_plan(again)


def test_a_name_too_long_for_a_plain_key_still_round_trips() -> None:
    """
    Names past YAML's 1024-character key limit are written as explicit `? key` entries.
    """
    name = "r" * 1500
    plan = Plan("w", 9.0, {name: Route("p", "m")}, {name: Step(name, name)})
    text = dump_plan(plan)

    assert f"  ? {name}\n  : {{provider: p, model: m}}\n" in text
    assert plan == parse_plan(text)


GOLDEN = """\
# tailkit plan — written by tailkit; fields: docs/plan.md
tailkit_plan: 1
workflow: account-brief
deadline_s: 120.0               # end-to-end budget the caller gives us
hedge_budget: 0.1               # extra attempts / first attempts, all steps together
routes:                         # route name -> where its latency sample comes from
  openai/gpt-4.1: {provider: openai, model: gpt-4.1}
  bedrock/gpt-4.1: {provider: bedrock, model: gpt-4.1}
  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}
  "yes": {provider: "1e3", model: "a: b"}
steps:
  extract:
    depends_on: []
    required: true              # false: the run may succeed without it
    route: openai/gpt-4.1
    expected_tokens: {input: 9000, output: 900}  # picks the bucket
    idempotent: true            # false: never hedge or retry blindly
    # --- filled in by calibrate ---
    signal: total               # total | ttft: which clock the cutoff watches
    ttft_cutoff_s: 4.0          # no first token by then: stuck
    stall_cutoff_s: 6.0         # no chunk for this long mid-stream
    cutoff_s: 28.0              # total age at which the step acts
    on_cutoff: hedge            # hedge | retry | downgrade | fail | wait
    hedge_route: bedrock/gpt-4.1
    downgrade_route: openai/gpt-4.1-mini  # streaming but projected to overrun
    upgrade_route: null         # output failed validation
    predicted: {p50_s: 11.8, p99_s: 26.1, hedge_rate: 0.05}
    basis: {calls: 5210, bucket: "in 4k-16k / out 600-1200", quantile: 0.95, censored: 0.031}
  "write up":
    depends_on: [extract]
    required: false
    route: openai/gpt-4.1-mini
    expected_tokens: {input: null, output: 1200}
    idempotent: false
    # --- filled in by calibrate ---
    signal: ttft
    ttft_cutoff_s: 1.0e-05
    stall_cutoff_s: null
    cutoff_s: 0.7890000000043074
    on_cutoff: downgrade
    hedge_route: null
    downgrade_route: "yes"
    upgrade_route: openai/gpt-4.1
    predicted: {p50_s: 0.0, p99_s: .inf, hedge_rate: 0.0}
    basis: {calls: 0, bucket: "in ?", quantile: null, censored: 1.0}
predicted: {p50_s: 45.0, p99_s: 92.0, miss_rate: 0.004, extra_attempts: 0.047}
"""


def test_dump_writes_the_documented_layout() -> None:
    """
    A fixed plan dumps to exactly this text: notes on the first step, quotes only where needed.
    """
    write_up = Step(
        "write up", "openai/gpt-4.1-mini", depends_on=("extract",), required=False,
        expected_tokens=Tokens(None, 1200), idempotent=False, signal="ttft", ttft_cutoff_s=1e-05,
        cutoff_s=123456.789 - 123456, on_cutoff="downgrade", downgrade_route="yes",
        upgrade_route="openai/gpt-4.1",
        predicted=StepPrediction(p50_s=0.0, p99_s=math.inf, hedge_rate=0.0),
        basis=Basis(calls=0, bucket="in ?", quantile=None, censored=1.0),
    )  # fmt: skip
    routes = {**ROUTES, "yes": Route("1e3", "a: b")}
    steps = {"extract": EXTRACT, "write up": write_up}
    plan = Plan("account-brief", 120.0, routes, steps, hedge_budget=0.1, predicted=PREDICTED)

    assert GOLDEN == dump_plan(plan)
    assert plan == parse_plan(GOLDEN)


GOLDEN_INTERVALS = """\
    predicted:
      p50_s: 11.8
      p99_s: 26.1
      hedge_rate: 0.05
      interval: {level: 0.95, p50_s: [11.2, 12.4], p99_s: [22.0, .inf], hedge_rate: [0.04, 0.061]}
    basis: {calls: 5210, bucket: "in 4k-16k / out 600-1200", quantile: 0.95, censored: 0.031}
predicted:
  p50_s: 45.0
  p99_s: 92.0
  miss_rate: 0.004
  extra_attempts: 0.047
  interval:                     # [low, high]: measured sample and simulation noise
    level: 0.95
    p50_s: [44.1, 46.0]
    p99_s: [85.5, 101.0]
    miss_rate: [0.0021, 0.0072]
    extra_attempts: [0.041, 0.055]
"""


def test_predictions_with_intervals_are_written_as_blocks() -> None:
    """
    With intervals, predictions become block mappings, one interval a line; they read back.
    """
    step = StepInterval(level=0.95, p50_s=(11.2, 12.4), p99_s=(22.0, math.inf),
                        hedge_rate=(0.04, 0.061))  # fmt: skip
    extract = dataclasses.replace(
        EXTRACT, predicted=dataclasses.replace(EXTRACT.predicted, interval=step)
    )
    whole = PlanInterval(level=0.95, p50_s=(44.1, 46.0), p99_s=(85.5, 101.0),
                         miss_rate=(0.0021, 0.0072), extra_attempts=(0.041, 0.055))  # fmt: skip
    predicted = dataclasses.replace(PREDICTED, interval=whole)
    plan = Plan("account-brief", 120.0, ROUTES, {"extract": extract}, predicted=predicted)
    text = dump_plan(plan)

    assert text.endswith(GOLDEN_INTERVALS)
    assert plan == parse_plan(text)
