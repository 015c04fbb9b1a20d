"""
Live routing: the decision rule, what a first attempt tells its route, and the ledger's attrs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tailkit.config import LiveRouting, Plan, Step, parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Chunk,
    Executor,
    Ledger,
    LiveValue,
    MemorySink,
    StepPolicy,
)
from tailkit.executor.lowlevel import LiveRouter, order_index
from tests._fakeloop import run


AB = ("a/m", "b/m")
ABC = ("a/m", "b/m", "c/m")


def _live(**kw: Any) -> LiveRouting:
    fields: dict[str, Any] = {
        "quantile": 0.9,
        "cutoff_bounds_s": (0.5, 8.0),
        "prior_s": {"a/m": 2.0, "b/m": 3.0},
        "window": 20,
        "min_calls": 5,
        "explore_every": 0,
    }
    fields.update(kw)
    return LiveRouting(**fields)


def _plan(
    live: LiveRouting | None,
    *,
    candidates: tuple[str, ...] = AB,
    on_cutoff: str = "hedge",
    cutoff_s: float | None = 6.0,
    signal: str = "total",
) -> Plan:
    """A one-step plan on routes a/m, b/m, c/m (three providers); hedges go to b/m."""
    base = parse_plan("""\
tailkit_plan: 1
workflow: live
deadline_s: 60
hedge_budget: 1.0
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
steps:
  s:
    route: a/m
    hedge_route: b/m
    signal: total
    cutoff_s: 6.0
    on_cutoff: hedge
""")
    step = dataclasses.replace(
        base.steps["s"],
        candidates=candidates,
        live=live,
        on_cutoff=on_cutoff,
        signal=signal,
        cutoff_s=cutoff_s if signal == "total" else None,
        ttft_cutoff_s=cutoff_s if signal == "ttft" else None,
    )
    return dataclasses.replace(base, steps={"s": step})


class Routes:
    """An attempt function: each route answers after its own latency; it notes every attempt."""

    def __init__(self, seconds: dict[str, float], *, scale: float = 1.0) -> None:
        self.seconds = dict(seconds)
        self.scale = scale
        self.started: list[tuple[float, str, str]] = []  # (virtual instant, role, route)
        self.fail_primary = False

    async def __call__(self, a: Attempt) -> str:
        """One attempt: its route's latency, or an error for a primary when told to fail."""
        self.started.append((asyncio.get_running_loop().time(), a.role, a.route))
        if self.fail_primary and a.role == "primary":
            msg = "boom"
            raise AttemptError(msg, status="error")
        await asyncio.sleep(self.seconds[a.route] * self.scale)
        return a.route


def _calls(
    plan: Plan,
    fn: Callable[[Attempt], Any],
    n: int,
    *,
    live: bool = True,
    time_scale: float = 1.0,
    policy: StepPolicy | None = None,
    between: Callable[[int, Executor], None] | None = None,
) -> tuple[list[dict[str, Any]], Executor]:
    """Run ``n`` calls of step ``s`` one after another; the ledger lines and the executor."""
    sink = MemorySink()
    policies = {"s": policy} if policy is not None else None
    executor = Executor(
        plan, ledger=Ledger(sink), live=live, time_scale=time_scale, policies=policies, seed=0
    )

    async def main() -> None:
        for i in range(n):
            if between is not None:
                between(i, executor)
            await executor.run_step("s", fn)
        await executor.aclose()

    run(main())
    return [json.loads(line) for line in sink.lines], executor


def _firsts(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["role"] == "primary"]


def _live_attrs(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line["attrs"].items() if k.startswith("live")}


# the rule itself


def test_order_index_is_the_inverted_cdf() -> None:
    """ceil(q * k) - 1: the smallest value whose share at or below it reaches q."""
    assert order_index(0.9, 20) == 17
    assert order_index(0.95, 200) == 189
    assert order_index(0.5, 4) == 1
    assert order_index(0.99, 1) == 0
    assert order_index(0.01, 1000) == 9


def _step(live: LiveRouting, candidates: tuple[str, ...] = AB) -> Step:
    return Step("s", candidates[0], candidates=candidates, live=live, cutoff_s=6.0)


def test_a_thin_window_keeps_its_prior_until_min_calls() -> None:
    """Below min_calls a route's value is its prior; at min_calls, its window's quantile."""
    live = _live(min_calls=3, quantile=0.5)
    router, step = LiveRouter(), _step(live)
    for seconds in (9.0, 9.0):
        router.observe("s", "a/m", seconds, live.window)
    assert router.view(step, live, 1.0)["a/m"] == LiveValue(2, 2.0, "prior")
    assert router.decide(step, live).route == "a/m"
    router.observe("s", "a/m", 9.0, live.window)
    assert router.view(step, live, 1.0)["a/m"] == LiveValue(3, 9.0, "window")
    choice = router.decide(step, live)
    assert (choice.route, choice.why, choice.value_s, choice.calls) == ("b/m", "best", 3.0, 0)


def test_the_lowest_value_wins_and_a_tie_goes_to_the_first_candidate() -> None:
    """Best = lowest value; equal values: plan order."""
    router = LiveRouter()
    tie = _live(prior_s={"a/m": 2.0, "b/m": 2.0, "c/m": 2.0})
    assert router.decide(_step(tie, ABC), tie).route == "a/m"
    low_c = _live(prior_s={"a/m": 2.0, "b/m": 3.0, "c/m": 1.0})
    assert router.decide(_step(low_c, ABC), low_c).route == "c/m"


def test_when_every_value_is_a_cut_call_the_least_cut_window_wins() -> None:
    """Both values inf: the route whose window was cut least often, whatever the plan order."""
    live = _live(quantile=0.75, min_calls=4, window=10)
    router, step = LiveRouter(), _step(live, AB)
    for value in (1.0, math.inf, math.inf, math.inf):  # a/m: three cuts in four
        router.observe("s", "a/m", value, live.window)
    for value in (1.0, 1.0, math.inf, math.inf):  # b/m: two in four
        router.observe("s", "b/m", value, live.window)
    choice = router.decide(step, live)
    assert (choice.route, choice.value_s) == ("b/m", math.inf)
    for _ in range(4):  # b/m: six cuts in eight, as a/m's three in four: plan order
        router.observe("s", "b/m", math.inf, live.window)
    assert router.decide(step, live).route == "a/m"
    router.observe("s", "b/m", math.inf, live.window)  # seven in nine: a/m is cut less
    assert router.decide(step, live).route == "a/m"


def test_every_nth_call_explores_the_others_in_turn() -> None:
    """explore_every=3: calls 3, 6, 9, ... go to the other candidates in turn."""
    live = _live(prior_s={"a/m": 2.0, "b/m": 3.0, "c/m": 4.0}, explore_every=3)
    router, step = LiveRouter(), _step(live, ABC)
    chosen = [(d.route, d.why) for d in (router.decide(step, live) for _ in range(9))]
    best = ("a/m", "best")
    assert chosen == [best, best, ("b/m", "explore"), best, best, ("c/m", "explore"),
                      best, best, ("b/m", "explore")]  # fmt: skip


def test_one_candidate_never_explores() -> None:
    """A step with one first route has no other to try."""
    live = _live(prior_s={"a/m": 2.0}, explore_every=1)
    router, step = LiveRouter(), Step("s", "a/m", live=live, cutoff_s=6.0)
    assert {router.decide(step, live).why for _ in range(4)} == {"best"}


def test_the_cutoff_is_the_value_clamped_into_the_bounds() -> None:
    """A value below the low bound cuts at low; above the high bound, at high."""
    router = LiveRouter()
    low = _live(prior_s={"a/m": 0.1, "b/m": 3.0})
    assert router.decide(_step(low), low).cutoff_s == 0.5
    high = _live(prior_s={"a/m": 20.0, "b/m": 30.0})
    choice = router.decide(_step(high), high)
    assert (choice.value_s, choice.cutoff_s) == (20.0, 8.0)


def test_the_window_keeps_its_latest_observations() -> None:
    """Past `window`, the oldest observation goes; a reloaded smaller window applies at once."""
    live = _live(window=3, min_calls=1, quantile=0.99)
    router, step = LiveRouter(), _step(live)
    for seconds in (9.0, 1.0, 2.0, 3.0):
        router.observe("s", "a/m", seconds, live.window)
    assert router.view(step, live, 1.0)["a/m"] == LiveValue(3, 3.0, "window")
    smaller = _live(window=1, min_calls=1, quantile=0.99)
    assert router.view(step, smaller, 1.0)["a/m"] == LiveValue(1, 3.0, "window")


# the executor


def test_first_attempts_go_to_the_best_route_and_their_lines_say_why() -> None:
    """Priors first, then the window; the first attempt's line carries the four attrs."""
    fn = Routes({"a/m": 1.0, "b/m": 1.5})
    lines, executor = _calls(_plan(_live(prior_s={"a/m": 3.0, "b/m": 2.0})), fn, 7)
    firsts = _firsts(lines)
    # b/m's prior is lower; after 5 calls its window says 1.5, still below a/m's prior 3.0
    assert [line["provider"] for line in firsts] == ["b"] * 7
    assert firsts[0]["attrs"] == {
        "live": "best", "live_value_s": 2.0, "live_calls": 0, "live_cutoff_s": 2.0
    }  # fmt: skip
    assert _live_attrs(firsts[6]) == {
        "live": "best", "live_value_s": 1.5, "live_calls": 6, "live_cutoff_s": 1.5
    }  # fmt: skip
    state = executor.live_state()
    assert state == {"s": {"a/m": LiveValue(0, 3.0, "prior"), "b/m": LiveValue(7, 1.5, "window")}}


def test_only_first_attempts_carry_the_attrs() -> None:
    """A hedge's line has no live attrs; the first attempt's has them."""
    fn = Routes({"a/m": 5.0, "b/m": 1.0})
    lines, _ = _calls(_plan(_live(prior_s={"a/m": 1.0, "b/m": 9.0})), fn, 1)
    assert sorted((line["role"], "live" in line["attrs"]) for line in lines) == [
        ("hedge", False), ("primary", True)
    ]  # fmt: skip


def test_a_step_without_a_cutoff_is_only_routed() -> None:
    """No cutoff on the signal clock: no live cutoff either (no hedge, no live_cutoff_s)."""
    fn = Routes({"a/m": 5.0, "b/m": 1.0})
    lines, _ = _calls(_plan(_live(prior_s={"a/m": 1.0, "b/m": 9.0}), cutoff_s=None), fn, 1)
    assert len(lines) == 1
    assert lines[0]["attrs"] == {"live": "best", "live_value_s": 1.0, "live_calls": 0}


def test_the_live_cutoff_replaces_the_plans_own() -> None:
    """The hedge starts at the chosen route's value (1.0 s), not the plan's 6 s cutoff."""
    fn = Routes({"a/m": 5.0, "b/m": 1.0})
    _calls(_plan(_live(prior_s={"a/m": 1.0, "b/m": 9.0})), fn, 1)
    assert fn.started == [(0.0, "primary", "a/m"), (1.0, "hedge", "b/m")]


def test_cut_first_attempts_push_the_value_to_the_high_bound() -> None:
    """A first attempt beaten by its hedge counts as inf: the value is inf, the cutoff high."""
    live = _live(prior_s={"a/m": 1.0}, min_calls=3, cutoff_bounds_s=(0.5, 4.0))
    fn = Routes({"a/m": 5.0, "b/m": 0.5})
    lines, executor = _calls(_plan(live, candidates=()), fn, 4)
    first = _firsts(lines)[3]
    assert _live_attrs(first) == {
        "live": "best", "live_value_s": None, "live_calls": 3, "live_cutoff_s": 4.0
    }  # fmt: skip
    assert first["censored_at_s"] == 4.5  # hedged at 4.0, the hedge won at 4.5
    assert executor.live_state()["s"]["a/m"] == LiveValue(4, math.inf, "window")


def test_errors_tell_the_route_nothing() -> None:
    """A first attempt the provider fails is not observed; its retry is not either."""
    fn = Routes({"a/m": 1.0, "b/m": 1.0})
    fn.fail_primary = True
    policy = StepPolicy(retry_jitter_s=0.0)
    lines, executor = _calls(_plan(_live()), fn, 3, policy=policy)
    assert [line["status"] for line in lines] == ["error", "ok"] * 3
    assert all(v.calls == 0 for v in executor.live_state()["s"].values())


def test_the_hedge_goes_to_another_candidate_when_the_hedge_route_is_chosen() -> None:
    """Chosen b/m (the hedge route): the hedge goes to the step's route, a/m."""
    fn = Routes({"a/m": 1.0, "b/m": 5.0, "c/m": 1.0})
    _calls(_plan(_live(prior_s={"a/m": 3.0, "b/m": 1.0})), fn, 1)
    assert [(role, route) for _, role, route in fn.started] == [
        ("primary", "b/m"), ("hedge", "a/m")
    ]  # fmt: skip


def test_a_third_candidate_hedges_to_the_hedge_route() -> None:
    """Chosen c/m (neither route nor hedge route): the hedge goes to the hedge route."""
    fn = Routes({"a/m": 1.0, "b/m": 1.0, "c/m": 5.0})
    live = _live(prior_s={"a/m": 3.0, "b/m": 3.0, "c/m": 1.0})
    _calls(_plan(live, candidates=ABC), fn, 1)
    assert [(role, route) for _, role, route in fn.started] == [
        ("primary", "c/m"), ("hedge", "b/m")
    ]  # fmt: skip


def test_the_retry_is_watched_by_the_live_cutoff() -> None:
    """The first attempt fails at once; its retry is hedged at the live cutoff (2 s), not 6 s."""

    class FailFirst(Routes):
        async def __call__(self, a: Attempt) -> str:
            self.fail_primary = not self.started
            return await super().__call__(a)

    fn = FailFirst({"a/m": 10.0, "b/m": 10.0})
    policy = StepPolicy(retry_jitter_s=0.0)
    _calls(_plan(_live(prior_s={"a/m": 2.0, "b/m": 3.0})), fn, 1, policy=policy)
    # the retry fails over to b/m (the hedge route, another provider); its hedge goes to a/m
    assert fn.started == [(0.0, "primary", "a/m"), (0.0, "retry", "b/m"), (2.0, "hedge", "a/m")]


def test_a_stream_tells_its_ttft_on_the_ttft_clock() -> None:
    """Signal ttft: the observation is the time to first token, not the total."""

    async def stream(a: Attempt) -> AsyncIterator[Chunk]:
        await asyncio.sleep(0.25 if a.route == "a/m" else 0.75)
        yield Chunk("x")
        await asyncio.sleep(3.0)
        yield FINAL

    live = _live(min_calls=1, prior_s={"a/m": 1.0, "b/m": 1.0}, explore_every=2)
    lines, executor = _calls(_plan(live, signal="ttft", cutoff_s=4.0), stream, 2)
    assert executor.live_state()["s"] == {
        "a/m": LiveValue(1, 0.25, "window"), "b/m": LiveValue(1, 0.75, "window")
    }  # fmt: skip
    assert [line["attrs"]["live"] for line in lines] == ["best", "explore"]


def test_attrs_and_state_speak_plan_seconds_under_a_time_scale() -> None:
    """A rehearsal 100 times faster writes the same attrs as the plan's own seconds."""
    fn = Routes({"a/m": 1.0, "b/m": 1.5}, scale=0.01)
    plan = _plan(_live(prior_s={"a/m": 3.0, "b/m": 2.0}))
    lines, executor = _calls(plan, fn, 6, time_scale=0.01)
    attrs = _firsts(lines)[5]["attrs"]
    assert attrs["live_calls"] == 5
    assert attrs["live_value_s"] == pytest.approx(1.5)
    assert attrs["live_cutoff_s"] == pytest.approx(1.5)
    assert _firsts(lines)[0]["attrs"]["live_value_s"] == pytest.approx(2.0)
    assert executor.live_state()["s"]["b/m"].value_s == pytest.approx(1.5)


def test_live_false_runs_the_fixed_plan() -> None:
    """Executor(live=False): the plan's route and cutoff, no attrs, no state."""
    fn = Routes({"a/m": 1.0, "b/m": 1.0})
    lines, executor = _calls(_plan(_live(prior_s={"a/m": 3.0, "b/m": 0.1})), fn, 3, live=False)
    assert [(line["provider"], line["attrs"]) for line in lines] == [("a", {})] * 3
    assert executor.live_state() == {}


def test_a_step_without_a_live_block_runs_fixed() -> None:
    """No live block: the plan's route and cutoff, as before."""
    fn = Routes({"a/m": 1.0, "b/m": 1.0})
    lines, executor = _calls(_plan(None), fn, 2)
    assert [(line["provider"], line["attrs"]) for line in lines] == [("a", {})] * 2
    assert executor.live_state() == {}


def test_the_state_survives_replace_plan() -> None:
    """A reloaded plan keeps the windows of the routes it keeps."""
    fn = Routes({"a/m": 1.0, "b/m": 1.0})
    plan = _plan(_live())

    def reload(i: int, executor: Executor) -> None:
        if i == 3:
            executor.replace_plan(plan)

    lines, executor = _calls(plan, fn, 6, between=reload)
    assert [line["attrs"]["live_calls"] for line in _firsts(lines)] == [0, 1, 2, 3, 4, 5]
    assert executor.live_state()["s"]["a/m"] == LiveValue(6, 1.0, "window")


def test_a_slowed_route_loses_first_attempts_within_min_calls() -> None:
    """a/m slows from 1 s to 3 s after 30 calls: within min_calls calls, b/m takes over."""
    fn = Routes({"a/m": 1.0, "b/m": 1.2})
    live = _live(prior_s={"a/m": 1.0, "b/m": 1.2}, min_calls=10, window=20)

    def slow(i: int, _: Executor) -> None:
        if i == 30:
            fn.seconds["a/m"] = 3.0

    lines, _ = _calls(_plan(live, on_cutoff="wait", cutoff_s=10.0), fn, 60, between=slow)
    routes = [line["provider"] for line in _firsts(lines)]
    assert routes[:30] == ["a"] * 30
    switch = routes.index("b", 30)
    assert switch - 30 <= live.min_calls
    assert routes[switch:] == ["b"] * (60 - switch)


def test_live_must_be_a_bool() -> None:
    """Executor(live="no") is refused by name (a truthy string would have meant on)."""
    with pytest.raises(ConfigError) as caught:
        Executor(_plan(_live()), live="no")  # type: ignore[arg-type]
    assert caught.value.field == "live"


def test_a_loser_left_to_finish_counts_as_cut_once() -> None:
    """losers="finish": the beaten first attempt is inf at once, not its later answer too."""
    live = _live(prior_s={"a/m": 1.0, "b/m": 9.0}, min_calls=1)
    fn = Routes({"a/m": 5.0, "b/m": 0.5})
    lines, executor = _calls(_plan(live), fn, 1, policy=StepPolicy(losers="finish"))
    assert sorted((line["role"], line["abandoned"]) for line in lines) == [
        ("hedge", False), ("primary", True)
    ]  # fmt: skip
    assert executor.live_state()["s"]["a/m"] == LiveValue(1, math.inf, "window")


def test_an_invalid_answer_is_still_an_answer() -> None:
    """A result the validator refuses tells its route its age."""
    fn = Routes({"a/m": 1.25, "b/m": 1.0})
    verdicts = iter([False, True])  # the first answer refused, its upgrade accepted
    policy = StepPolicy(validator=lambda _: next(verdicts))
    _, executor = _calls(_plan(_live(min_calls=1), on_cutoff="wait"), fn, 1, policy=policy)
    assert executor.live_state()["s"]["a/m"] == LiveValue(1, 1.25, "window")


def test_a_workflow_run_routes_live_too() -> None:
    """Executor.run: the live step's first attempt carries the attrs, as in run_step."""
    sink = MemorySink()
    executor = Executor(_plan(_live(prior_s={"a/m": 3.0, "b/m": 2.0})), ledger=Ledger(sink))
    fn = Routes({"a/m": 1.0, "b/m": 1.0})

    async def main() -> bool:
        result = await executor.run(fn)
        await executor.aclose()
        return bool(result.ok)

    assert run(main()) is True
    [line] = [json.loads(text) for text in sink.lines]
    assert (line["provider"], line["attrs"]["live"]) == ("b", "best")


def test_a_first_attempt_whose_action_was_denied_counts_as_cut() -> None:
    """The budget spent, a retry not sent: the attempt outlives its cutoff, and counts as inf."""
    from tailkit.executor import HedgeBudget

    live = _live(prior_s={"a/m": 1.0}, min_calls=1, cutoff_bounds_s=(0.5, 2.0))
    fn = Routes({"a/m": 3.0, "b/m": 3.0})
    sink = MemorySink()
    plan = _plan(live, candidates=(), on_cutoff="retry")
    budget = HedgeBudget(0.01, allowance=0)  # no extra attempt at all
    executor = Executor(plan, ledger=Ledger(sink), budget=budget, seed=0)

    async def main() -> None:
        await executor.run_step("s", fn)
        await executor.aclose()

    run(main())
    (line,) = [json.loads(text) for text in sink.lines]
    assert line["status"] == "ok"
    assert line["total_s"] == pytest.approx(3.0)  # answered, past its cutoff of 1 s
    assert line["attrs"]["hedge_denied"] == "budget"
    assert executor.live_state()["s"]["a/m"] == LiveValue(1, math.inf, "window")
