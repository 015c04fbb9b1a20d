"""
The executor's brakes on extra load: the hedge budget, the provider throttle, Retry-After.
"""

from __future__ import annotations

import asyncio
import math

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from hypothesis import given
from hypothesis import strategies as st

from tailkit.config import parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import Attempt, AttemptError, Executor, Ledger, MemorySink, StepPolicy
from tailkit.executor._budget import HedgeBudget, ProviderThrottle, retry_after_fits
from tests._fakeloop import run


def _grants(budget: HedgeBudget, asks: int, firsts: int = 0) -> int:
    account = budget.open(firsts)
    return sum(budget.try_extra(account) for _ in range(asks))


# ---------------------------------------------------------------------------------- HedgeBudget


def test_grant_and_deny_exactly_at_ratio_boundary() -> None:
    """At 5 % (no noise headroom, no allowance) the first extra needs 20 first attempts."""
    budget = HedgeBudget(0.05, allowance=0, sigmas=0.0)
    run_a = budget.open(19)

    assert not budget.try_extra(run_a)

    run_b = budget.open(1)

    assert budget.try_extra(run_a)
    assert not budget.try_extra(run_b)

    budget.open(20)

    assert budget.try_extra(run_b)
    assert (40, 2) == (budget.firsts, budget.extras)
    assert (1, 1, 1) == (run_a.extras, run_b.extras, run_b.denials)


def test_ratio_is_the_decimal_it_prints_as() -> None:
    """
    0.29 of 100 first attempts grants 29 extras, though 0.29 * 100 < 29 in floating point.
    """
    budget = HedgeBudget(0.29, allowance=0, sigmas=0.0)

    assert 0.29 * 100 < 29
    assert 29 == _grants(budget, 40, firsts=100)


def test_allowance_lets_a_process_that_barely_started_hedge() -> None:
    """With 3 first attempts at 5 % the allowance of 2 grants exactly 2 extras."""
    budget = HedgeBudget(0.05, allowance=2, sigmas=0.0)

    assert 2 == _grants(budget, 10, firsts=3)


@pytest.mark.parametrize(
    ("firsts", "sigmas", "grants"),
    [(400, 3.0, 33), (400, 1.0, 24), (10_000, 3.0, 567), (0, 3.0, 0), (1, 3.0, 0)],
)
def test_noise_headroom_is_sigmas_times_the_poisson_spread(
    firsts: int, sigmas: float, grants: int
) -> None:
    """Grants reach floor(ratio * F + sigmas * sqrt(ratio * F)): 20 + 3 * 4.47 = 33.4 at 400."""
    budget = HedgeBudget(0.05, allowance=0, sigmas=sigmas)

    assert grants == _grants(budget, 2 * grants + 5, firsts=firsts)
    assert grants == math.floor(0.05 * firsts + sigmas * math.sqrt(0.05 * firsts) + 1e-9)


def test_closed_runs_are_forgotten_beyond_window_firsts() -> None:
    """Closed runs count until newer closed runs bring window_firsts; open ones always count."""
    budget = HedgeBudget(0.5, allowance=0, sigmas=0.0, window_firsts=10)
    old = budget.open(10)
    assert budget.try_extra(old)
    budget.close(old)
    still_open = budget.open(4)

    assert (14, 1) == (budget.firsts, budget.extras)

    for _ in range(3):
        budget.close(budget.open(5))

    assert (14, 0) == (budget.firsts, budget.extras)  # closed: the latest 10 firsts, 5 + 5

    budget.close(still_open)
    budget.close(still_open)  # closing twice does nothing

    assert 14 == budget.firsts  # 5 + 5 + 4: without the oldest 5, only 9 would be left
    budget.close(budget.open(6))
    assert 10 == budget.firsts  # 4 + 6


def test_a_burst_of_runs_started_together_brings_its_own_credit() -> None:
    """400 seven-step runs open before any hedge: late hedges within the share are all granted."""
    budget = HedgeBudget(0.05)  # the defaults: the executor's own budget
    accounts = [budget.open(7) for _ in range(400)]
    # 1 run in 6 hedges its sixth step, 1 in 12 its last: 0.25 per run, 3.6 % per first attempt
    asks = [a for i, a in enumerate(accounts) if i % 6 == 0]
    asks += [a for i, a in enumerate(accounts) if i % 12 == 1]

    assert 101 == len(asks) == sum(budget.try_extra(a) for a in asks)

    for account in accounts:
        budget.close(account)
    overspent = [budget.open(7) for _ in range(400)]  # the same burst hedging every run twice
    granted = sum(budget.try_extra(a) for a in overspent + overspent)

    # held at the share of both bursts' 5,600 first attempts, plus the noise and the allowance
    assert granted == math.floor(280 + 3 * math.sqrt(280) + 2) - 101 == 231


def test_window_s_is_accepted_and_ignored() -> None:
    """A budget written for the old time window counts exactly like one without it."""
    with_window = HedgeBudget(0.05, window_s=3.0, allowance=2)
    without = HedgeBudget(0.05, allowance=2)

    assert _grants(with_window, 30, firsts=100) == _grants(without, 30, firsts=100) == 13


_EVENTS = st.lists(
    st.tuples(st.sampled_from(["open", "extra", "close"]), st.integers(0, 30)), max_size=150
)


@given(
    ratio=st.one_of(st.sampled_from([0.0, 0.05, 0.1, 0.29, 0.5, 1.0]), st.floats(0.0, 1.0)),
    allowance=st.integers(0, 3),
    sigmas=st.sampled_from([0.0, 1.0, 2.5, 3.0]),
    window_firsts=st.sampled_from([1, 10, 50]),
    events=_EVENTS,
)
def test_grants_follow_the_rule_exactly(
    ratio: float, allowance: int, sigmas: float, window_firsts: int, events: list[tuple[str, int]]
) -> None:
    """Every decision is the exact rule over open and remembered runs, never more extras."""
    budget = HedgeBudget(ratio, allowance=allowance, sigmas=sigmas, window_firsts=window_firsts)
    r, s = Fraction(repr(ratio)), Fraction(repr(sigmas))
    open_runs: list[Any] = []
    closed: list[Any] = []  # the oracle: every closed run, newest last

    def remembered() -> list[Any]:
        kept, total = [], 0
        for account in reversed(closed):
            if total >= window_firsts:
                break
            kept.append(account)
            total += account.firsts
        return kept + open_runs

    for kind, n in events:
        if kind == "open":
            open_runs.append(budget.open(n))
        elif kind == "close" and open_runs:
            account = open_runs.pop(n % len(open_runs))
            budget.close(account)
            closed.append(account)
        elif open_runs:
            counted = remembered()
            firsts = sum(a.firsts for a in counted)
            extras = sum(a.extras for a in counted)
            room = r * firsts + allowance - (extras + 1)
            allowed = room >= 0 or room * room <= s * s * r * firsts
            granted = budget.try_extra(open_runs[n % len(open_runs)])
            assert allowed == granted
            # right after a grant the extras are within the rule (a later eviction of an old
            # run's firsts may leave newer runs' extras above it: those were granted fairly)
            firsts = budget.firsts
            bound = r * firsts + allowance + float(s) * math.sqrt(float(r) * firsts)
            assert not granted or budget.extras <= bound
        counted = remembered()
        assert sum(a.firsts for a in counted) == budget.firsts
        assert sum(a.extras for a in counted) == budget.extras


# ------------------------------------------------------------------------ recovery reserve


def test_hedges_leave_the_reserve_to_recovery() -> None:
    """At 5 % of 400: hedges stop at 28 (0.8 of 35.4); error retries still get the last 7."""
    budget = HedgeBudget(0.05, processes=1)  # the default reserve, 0.2
    account = budget.open(400)
    hedges = sum(budget.try_extra(account, speculative=True) for _ in range(100))
    recovery = sum(budget.try_extra(account) for _ in range(100))

    assert 0.2 == budget.reserve
    assert (28, 7) == (hedges, recovery)
    assert not budget.try_extra(account, speculative=True)  # the reserve is spent: still no


def test_recovery_may_spend_the_whole_bound_hedges_or_not() -> None:
    """Recovery first: it takes the whole bound, and hedges then get nothing."""
    budget = HedgeBudget(0.05, processes=1)
    account = budget.open(400)

    assert 35 == sum(budget.try_extra(account) for _ in range(100))
    assert not budget.try_extra(account, speculative=True)


def test_recovery_that_came_first_leaves_the_hedges_their_share() -> None:
    """5 error retries first: hedges still get their 28 (33 in all, within the 35.4)."""
    budget = HedgeBudget(0.05, processes=1)
    account = budget.open(400)

    assert 5 == sum(budget.try_extra(account) for _ in range(5))
    assert 28 == sum(budget.try_extra(account, speculative=True) for _ in range(100))
    assert (33, 28) == (budget.extras, budget.hedges)
    assert 2 == sum(budget.try_extra(account) for _ in range(100))  # the rest, to recovery


@pytest.mark.parametrize(("reserve", "hedges"), [(0.0, 35), (0.5, 17), (1.0, 0)])
def test_reserve_share_of_the_bound(reserve: float, hedges: int) -> None:
    """A reserve of 0 is the undivided bound; 1 leaves hedges nothing, recovery everything."""
    budget = HedgeBudget(0.05, processes=1, reserve=reserve)
    account = budget.open(400)

    assert hedges == sum(budget.try_extra(account, speculative=True) for _ in range(100))
    assert 35 - hedges == sum(budget.try_extra(account) for _ in range(100))


def test_reserve_out_of_range_is_refused() -> None:
    """A reserve outside [0, 1] names the parameter and its value."""
    with pytest.raises(ConfigError, match=r"reserve must be in \[0, 1\].*1\.5"):
        HedgeBudget(0.05, reserve=1.5)


def test_set_ratio_keeps_the_count() -> None:
    """A recalibrated ratio applies to the runs already counted; nothing is forgotten."""
    budget = HedgeBudget(0.05, allowance=0, sigmas=0.0, processes=1)
    account = budget.open(100)
    assert 5 == sum(budget.try_extra(account) for _ in range(10))
    budget.set_ratio(0.08)

    assert (100, 5, 0.08) == (budget.firsts, budget.extras, budget.ratio)
    assert 3 == sum(budget.try_extra(account) for _ in range(10))
    with pytest.raises(ConfigError, match="ratio must be in"):
        budget.set_ratio(1.5)


@given(
    ratio=st.sampled_from([0.0, 0.05, 0.1, 0.29, 1.0]),
    allowance=st.integers(0, 3),
    sigmas=st.sampled_from([0.0, 1.0, 3.0]),
    processes=st.integers(1, 20),
    reserve=st.sampled_from([0.0, 0.2, 0.25, 0.5, 1.0]),
    asks=st.lists(st.tuples(st.integers(0, 60), st.booleans()), max_size=80),
)
def test_fleet_and_reserve_follow_the_rule_exactly(
    *,
    ratio: float,
    allowance: int,
    sigmas: float,
    processes: int,
    reserve: float,
    asks: list[tuple[int, bool]],
) -> None:
    """P * (n + 1) <= keep * (r*P*f + a + s*sqrt(r*P*f)) exactly: all extras, then hedges."""
    budget = HedgeBudget(
        ratio, allowance=allowance, sigmas=sigmas, processes=processes, reserve=reserve
    )
    r, s2 = Fraction(repr(ratio)), Fraction(repr(sigmas)) ** 2

    def fits(count: int, keep: Fraction) -> bool:
        fleet = processes * budget.firsts
        if keep == 0:
            return False
        room = processes * count / keep - allowance - r * fleet
        return room <= 0 or room * room <= s2 * r * fleet

    hedges = 0
    for firsts, speculative in asks:
        account = budget.open(firsts)
        allowed = fits(budget.extras + 1, Fraction(1))
        if speculative:
            allowed = allowed and fits(hedges + 1, 1 - Fraction(repr(reserve)))
        granted = budget.try_extra(account, speculative=speculative)
        assert allowed == granted
        hedges += granted and speculative
        assert hedges == budget.hedges


STORM = """\
tailkit_plan: 1
workflow: storm
deadline_s: 100
hedge_budget: 0.05
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
steps:
  slow: {route: a/m, hedge_route: b/m, signal: total, cutoff_s: 1, on_cutoff: hedge}
  flaky: {route: c/m}
"""


def test_a_hedge_storm_leaves_error_retries_their_reserve() -> None:
    """300 calls hedge at 1 s, then 100 others fail at 1.5 s: 7 retries still get through."""
    calls = {"retries": 0}

    async def fn(a: Attempt) -> str:
        if a.step == "slow":
            await asyncio.sleep(5.0 if a.role == "primary" else 0.1)
            return a.role
        await asyncio.sleep(1.5 if a.role == "primary" else 0.1)
        if a.role == "primary":
            msg = "503"
            raise AttemptError(msg, status="error", http_status=503)
        calls["retries"] += 1
        return a.role

    async def main() -> list[Any]:
        budget = HedgeBudget(0.05, processes=1)  # the default reserve
        policies = {"flaky": StepPolicy(retry_jitter_s=0.0)}
        throttle = ProviderThrottle(max_tokens=1000)  # 100 errors at c: not a brownout here
        executor = Executor(
            parse_plan(STORM), budget=budget, throttle=throttle, policies=policies, seed=0
        )
        calls_ = [executor.run_step("slow", fn) for _ in range(300)]
        calls_ += [executor.run_step("flaky", fn) for _ in range(100)]
        return await asyncio.gather(*calls_, return_exceptions=True)

    results = run(main())

    assert results[:300].count("hedge") == 28  # 0.8 of the 35.4 the rule allows at 400 firsts
    assert calls["retries"] == 7 == results[300:].count("retry")  # the last 0.2, for recovery


PLAN = """\
tailkit_plan: 1
workflow: burst
deadline_s: 100
hedge_budget: 0.05
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  s:
    route: a/m
    cutoff_s: 4
    on_cutoff: hedge
    hedge_route: b/m
"""


def _burst(scale: float, calls: int) -> tuple[dict[str, int], int]:
    """``calls`` concurrent calls, every 4th slow, durations times ``scale``: (denials, hedges)."""
    plan = parse_plan(PLAN.replace("cutoff_s: 4", f"cutoff_s: {4 * scale}"))
    sink = MemorySink()
    budget = HedgeBudget(0.05, processes=1, reserve=0.0)  # hedges only: the undivided bound
    executor = Executor(plan, ledger=Ledger(sink), budget=budget)

    async def call(a: Attempt) -> str:
        slow = a.role == "primary" and int(a.idempotency_key, 16) % 4 == 0
        await asyncio.sleep((30.0 if slow else 1.0) * scale)
        return "ok"

    async def main() -> None:
        await asyncio.gather(
            *(executor.run_step("s", call, run_id="burst", call_index=i) for i in range(calls))
        )

    run(main())
    return executor.denials, sum(1 for r in sink.records if r.role == "hedge")


def test_the_budget_does_not_depend_on_time_scale() -> None:
    """The same burst at full speed and at 1/20: the same hedges, the same denials."""
    full, scaled = _burst(1.0, 400), _burst(0.05, 400)

    assert full == scaled
    denials, hedges = full
    assert denials["budget"] > 0
    assert hedges == math.floor(0.05 * 400 + 3 * math.sqrt(0.05 * 400) + 2) == 35


# ----------------------------------------------------------------------------- ProviderThrottle


def test_throttle_starts_untrottled_at_max_tokens() -> None:
    """
    A provider never heard of holds max_tokens and is not throttled.
    """
    throttle = ProviderThrottle(max_tokens=10.0, token_ratio=0.1)

    assert 10.0 == throttle.tokens("openai")
    assert not throttle.throttled("openai")


@pytest.mark.parametrize(
    ("max_tokens", "failures_to_throttle", "tokens_then"),
    [(10.0, 5, 5.0), (7.0, 4, 3.0), (1.0, 1, 0.0), (3.5, 2, 1.5)],
)
def test_failures_throttle_at_exactly_half(
    max_tokens: float, failures_to_throttle: int, tokens_then: float
) -> None:
    """
    Failures throttle a provider the first time its tokens reach half the max or less.
    """
    throttle = ProviderThrottle(max_tokens=max_tokens, token_ratio=0.1)
    for _ in range(failures_to_throttle - 1):
        throttle.on_failure("p")

    assert not throttle.throttled("p")

    throttle.on_failure("p")

    assert throttle.throttled("p")
    assert tokens_then == throttle.tokens("p")


def test_successes_refill_by_token_ratio_and_unthrottle() -> None:
    """
    From empty, 50 successes of 0.1 reach exactly half (still throttled); the 51st lifts it.
    """
    throttle = ProviderThrottle(max_tokens=10.0, token_ratio=0.1)
    for _ in range(10):
        throttle.on_failure("p")
    for _ in range(50):
        throttle.on_success("p")

    assert 5.0 == throttle.tokens("p")
    assert throttle.throttled("p")

    throttle.on_success("p")

    assert 5.1 == throttle.tokens("p")
    assert not throttle.throttled("p")


def test_throttle_is_per_provider() -> None:
    """
    Draining one provider leaves another at max_tokens and unthrottled.
    """
    throttle = ProviderThrottle()
    for _ in range(8):
        throttle.on_failure("anthropic")
    throttle.on_success("openai")

    assert throttle.throttled("anthropic")
    assert 2.0 == throttle.tokens("anthropic")
    assert not throttle.throttled("openai")
    assert 10.0 == throttle.tokens("openai")


def test_tokens_are_floored_at_zero_and_capped_at_max() -> None:
    """
    Failures stop at 0 tokens and successes at max_tokens.
    """
    throttle = ProviderThrottle(max_tokens=4.0, token_ratio=0.5)
    for _ in range(20):
        throttle.on_failure("p")

    assert 0.0 == throttle.tokens("p")

    throttle.on_success("p")

    assert 0.5 == throttle.tokens("p")

    for _ in range(100):
        throttle.on_success("p")

    assert 4.0 == throttle.tokens("p")

    throttle.on_failure("p")

    assert 3.0 == throttle.tokens("p")


# ---------------------------------------------------------------------------- retry_after_fits


@pytest.mark.parametrize(
    ("retry_after_s", "remaining_s", "expected_s", "fits"),
    [
        (None, 0.0, 0.0, True),  # no header: nothing to honour
        (None, 0.0, 5.0, True),
        (2.0, 3.0, 1.0, True),  # ends exactly at the deadline
        (2.0, math.nextafter(3.0, 0.0), 1.0, False),
        (3.0, 3.0, 0.0, True),
        (math.nextafter(3.0, math.inf), 3.0, 0.0, False),
        (30.0, math.inf, 10.0, True),  # no deadline
        (-4.0, 1.0, 1.0, True),  # a negative wait counts as none
        (-4.0, 1.0, 2.0, False),
        (math.nan, 100.0, 0.0, False),  # an unreadable wait never fits
    ],
)
def test_retry_after_fits_boundaries(
    retry_after_s: float | None, remaining_s: float, expected_s: float, fits: bool
) -> None:
    """
    Retry-After fits iff the wait plus the expected attempt ends at or before the deadline.
    """
    assert fits == retry_after_fits(retry_after_s, remaining_s, expected_s=expected_s)


# -------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: HedgeBudget(-0.01), r"^ratio must be in \[0, 1\].*got -0\.01\. "),
        (lambda: HedgeBudget(1.5), r"^ratio .* got 1\.5\. "),
        (lambda: HedgeBudget(math.nan), r"^ratio .* got nan\. "),
        (lambda: HedgeBudget(allowance=-1), r"^allowance must be 0 or more.*got -1\. "),
        (lambda: HedgeBudget(sigmas=-0.5), r"^sigmas must be 0 or more.*got -0\.5\. "),
        (lambda: HedgeBudget(sigmas=math.inf), r"^sigmas .* got inf\. "),
        (lambda: HedgeBudget(sigmas=math.nan), r"^sigmas .* got nan\. "),
        (
            lambda: HedgeBudget(window_firsts=0),
            r"^window_firsts must be at least 1.*got 0\. Pass .*$",
        ),
        (lambda: HedgeBudget().open(-1), r"^firsts must be 0 or more.*got -1\. "),
        (lambda: ProviderThrottle(max_tokens=0.0), r"^max_tokens must be .* got 0\.0\. "),
        (lambda: ProviderThrottle(max_tokens=-2.0), r"^max_tokens .* got -2\.0\. "),
        (lambda: ProviderThrottle(max_tokens=math.inf), r"^max_tokens .* got inf\. "),
        (
            lambda: ProviderThrottle(token_ratio=0.0),
            r"^token_ratio must be in .* got 0\.0\. Pass .*$",
        ),
        (
            lambda: ProviderThrottle(3.0, 3.5),
            r"^token_ratio .*max_tokens=3\.0\], got 3\.5\. Pass .*$",
        ),
        (lambda: ProviderThrottle(token_ratio=math.nan), r"^token_ratio .* got nan\. "),
        (
            lambda: ProviderThrottle(token_ratio=0.0001),
            r"^token_ratio .*0\.001.* got 0\.0001\. Pass .*$",
        ),
        (
            lambda: retry_after_fits(1.0, 5.0, expected_s=-1.0),
            r"^expected_s .* got -1\.0\. Pass .*$",
        ),
        (
            lambda: retry_after_fits(None, 5.0, expected_s=math.nan),
            r"^expected_s .* got nan\. Pass .*$",
        ),
    ],
)
def test_invalid_arguments_raise_config_error_naming_them(
    make: Callable[[], object], match: str
) -> None:
    """
    An out-of-range argument raises ConfigError with its name, its value and the fix.
    """
    with pytest.raises(ConfigError, match=match) as info:
        make()

    assert match.removeprefix("^").split()[0] == info.value.field
    assert info.value.fix is not None


def test_boundary_arguments_are_accepted() -> None:
    """
    Ratio 0 and 1, allowance and sigmas 0, and token_ratio equal to max_tokens are all valid.
    """
    HedgeBudget(0.0, allowance=0, sigmas=0.0, window_firsts=1)
    HedgeBudget(1.0, window_s=math.inf)
    throttle = ProviderThrottle(max_tokens=2.0, token_ratio=2.0)
    throttle.on_failure("p")
    throttle.on_failure("p")
    throttle.on_success("p")

    assert 2.0 == throttle.tokens("p")


def test_a_provider_rests_until_its_retry_after_and_a_later_429_extends_it() -> None:
    """rest() keeps the latest end; resting() is false from that instant on."""
    throttle = ProviderThrottle()
    assert not throttle.resting("a", 0.0)
    throttle.rest("a", 0.0, 5.0)
    assert throttle.resting("a", 4.9)
    assert not throttle.resting("b", 4.9)
    assert not throttle.resting("a", 5.0)
    for _ in range(3):  # three probes answered: the pool has room again
        throttle.on_success("a")
    throttle.rest("a", 6.0, 1.0)
    throttle.rest("a", 6.0, 0.5)  # doubled to 1 s: ends at 7 s, as the first; never shorter
    assert throttle.resting("a", 6.9)
    assert not throttle.resting("a", 7.0)


def test_429s_in_a_row_double_the_rest_and_three_successes_reset_it() -> None:
    """Retry-After 1 s: rests of 1, 2, 4, 8, 8 s; after three successes, 1 s again."""
    throttle = ProviderThrottle()
    ends = []
    at = 0.0
    for _ in range(5):
        throttle.rest("a", at, 1.0)
        while throttle.resting("a", at):
            at += 0.5
        ends.append(at)
    assert [b - a for a, b in zip([0.0, *ends], ends, strict=False)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    for _ in range(3):
        throttle.on_success("a")
    throttle.rest("a", at, 1.0)
    assert throttle.resting("a", at + 0.9)
    assert not throttle.resting("a", at + 1.0)


def test_after_a_rest_one_probe_at_a_time_until_three_succeed() -> None:
    """Half-open: after the rest, one first attempt at a time until three in a row succeed."""
    throttle = ProviderThrottle()
    assert throttle.admits("a", 0.0)  # never limited: everyone
    throttle.rest("a", 0.0, 2.0)
    assert not throttle.admits("a", 1.0)  # resting
    assert throttle.admits("a", 2.0, hold_s=5.0)  # the probe
    assert not throttle.admits("a", 2.1)  # the others wait for it
    assert throttle.admits("a", 7.0)  # a probe silent for its hold frees its slot
    for at in (7.5, 8.0):
        throttle.on_success("a")
        assert throttle.admits("a", at)  # the next probe
        assert not throttle.admits("a", at + 0.1)
    throttle.on_success("a")  # the third in a row: closed
    assert throttle.admits("a", 8.1)
    assert throttle.admits("a", 8.2)
    throttle.rest("a", 9.0, 1.0)  # a 429 after closing: the Retry-After, undoubled
    assert throttle.resting("a", 9.9)
    assert not throttle.resting("a", 10.0)


def test_a_provider_is_calm_until_a_429_and_again_once_three_probes_succeed() -> None:
    """calm() is the fast path: no rest and no probing under way."""
    throttle = ProviderThrottle()
    assert throttle.calm("a")
    throttle.rest("a", 0.0, 1.0)
    assert not throttle.calm("a")
    assert not throttle.resting("a", 2.0)
    assert not throttle.calm("a")  # rested, but its probes have not yet succeeded
    for _ in range(3):
        throttle.on_success("a")
    assert throttle.calm("a")
