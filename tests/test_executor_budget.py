"""
The executor's brakes on extra load: the hedge budget, the provider throttle, Retry-After.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from fractions import Fraction

import pytest

from hypothesis import given
from hypothesis import strategies as st

from tailkit.errors import ConfigError
from tailkit.executor._budget import HedgeBudget, ProviderThrottle, retry_after_fits


class _Clock:
    """
    A fake clock: the instant is whatever the test last set ``t`` to.
    """

    def __init__(self, t: float = 0.0) -> None:
        self.t = t


def _budget(
    ratio: float, *, window_s: float = 60.0, allowance: int = 0
) -> tuple[HedgeBudget, _Clock]:
    clock = _Clock()
    return HedgeBudget(ratio, window_s=window_s, allowance=allowance, clock=lambda: clock.t), clock


def _grants(budget: HedgeBudget, asks: int) -> int:
    return sum(budget.try_extra() for _ in range(asks))


# ---------------------------------------------------------------------------------- HedgeBudget


def test_grant_and_deny_exactly_at_ratio_boundary() -> None:
    """
    At 5% the first extra needs 20 first attempts, the second 40.
    """
    budget, _ = _budget(0.05)
    for _ in range(19):
        budget.record_first()

    assert not budget.try_extra()

    budget.record_first()

    assert budget.try_extra()
    assert not budget.try_extra()

    for _ in range(19):
        budget.record_first()

    assert not budget.try_extra()

    budget.record_first()

    assert budget.try_extra()
    assert (40, 2) == (budget.firsts, budget.extras)


def test_ratio_is_the_decimal_it_prints_as() -> None:
    """
    0.29 of 100 first attempts grants 29 extras, though 0.29 * 100 < 29 in floating point.
    """
    budget, _ = _budget(0.29)
    for _ in range(100):
        budget.record_first()

    assert 0.29 * 100 < 29
    assert 29 == _grants(budget, 40)


def test_allowance_lets_low_traffic_hedge_then_stops() -> None:
    """
    With 3 first attempts at 5% the allowance grants exactly 2 per window, then none.
    """
    budget, clock = _budget(0.05, window_s=60.0, allowance=2)
    for _ in range(3):
        budget.record_first()

    assert 2 == _grants(budget, 10)

    clock.t = 30.0

    assert not budget.try_extra()

    clock.t = 60.0  # the two grants leave the window (and the first attempts with them)

    assert (0, 0) == (budget.firsts, budget.extras)
    assert 2 == _grants(budget, 10)


def test_events_fall_out_of_the_window_exactly_at_window_s() -> None:
    """
    An event at t counts until just before t + window_s and not at t + window_s.
    """
    budget, clock = _budget(1.0, window_s=60.0)
    clock.t = 1.25
    budget.record_first()
    assert budget.try_extra()

    clock.t = math.nextafter(61.25, 0.0)

    assert (1, 1) == (budget.firsts, budget.extras)
    assert not budget.try_extra()

    clock.t = 61.25

    assert (0, 0) == (budget.firsts, budget.extras)


def test_an_extra_frees_its_slot_when_it_leaves_the_window() -> None:
    """
    A denied extra is granted once the earlier grant ages out, with the first attempts kept.
    """
    budget, clock = _budget(0.5, window_s=10.0)
    for _ in range(2):
        budget.record_first()
    clock.t = 4.0
    assert budget.try_extra()
    clock.t = 8.0
    for _ in range(4):
        budget.record_first()
    assert budget.try_extra()

    clock.t = 13.0  # 4 first attempts allow 2 extras; both grants still count

    assert not budget.try_extra()

    clock.t = 14.0

    assert budget.try_extra()


def test_refund_gives_the_grant_back() -> None:
    """
    A refunded grant no longer counts, so the next ask is granted.
    """
    budget, _ = _budget(0.0, allowance=1)
    assert budget.try_extra()
    assert not budget.try_extra()

    budget.refund()

    assert 0 == budget.extras
    assert budget.try_extra()


def test_refund_gives_back_the_latest_grant() -> None:
    """
    After a refund the earlier grant still leaves the window at its own time.
    """
    budget, clock = _budget(0.0, window_s=10.0, allowance=2)
    assert budget.try_extra()
    clock.t = 4.0
    assert budget.try_extra()

    budget.refund()
    clock.t = 10.0

    assert 0 == budget.extras


def test_refund_after_the_grant_aged_out_does_nothing() -> None:
    """
    With no extra in the window a refund leaves the counts alone.
    """
    budget, clock = _budget(0.0, window_s=5.0, allowance=1)
    assert budget.try_extra()
    clock.t = 5.0

    budget.refund()

    assert (0, 0) == (budget.firsts, budget.extras)
    assert budget.try_extra()
    assert not budget.try_extra()


def test_zero_ratio_and_zero_allowance_never_grant() -> None:
    """
    Ratio 0 and allowance 0 deny every extra, however many first attempts.
    """
    budget, clock = _budget(0.0, allowance=0)
    for i in range(1_000):
        clock.t = i / 100
        budget.record_first()

    assert 0 == _grants(budget, 50)
    assert 0 == budget.extras


def test_default_clock_works_outside_an_event_loop() -> None:
    """
    Without a clock the budget runs on time.monotonic() outside an event loop.
    """
    budget = HedgeBudget(0.0, allowance=1)

    assert budget.try_extra()
    assert 1 == budget.extras


_EVENTS = st.lists(
    st.tuples(
        st.integers(0, 12).map(lambda q: q / 4), st.sampled_from(["first", "extra", "refund"])
    ),
    max_size=120,
)


@given(
    ratio=st.one_of(st.sampled_from([0.0, 0.05, 0.1, 0.29, 0.5, 1.0]), st.floats(0.0, 1.0)),
    allowance=st.integers(0, 3),
    window_s=st.sampled_from([1.0, 2.5, 10.0]),
    events=_EVENTS,
)
def test_extras_never_exceed_the_share_plus_allowance(
    ratio: float, allowance: int, window_s: float, events: list[tuple[float, str]]
) -> None:
    """
    Grants follow the rule exactly, so no window holds more extras than the budget allows.
    """
    budget, clock = _budget(ratio, window_s=window_s, allowance=allowance)
    exact = Fraction(repr(ratio))
    firsts: list[float] = []  # the oracle: every event instant, kept forever
    extras: list[float] = []

    def count(times: list[float], start: float, end: float) -> int:
        return sum(start < x <= end for x in times)

    for dt, kind in events:
        clock.t += dt
        t = clock.t
        in_firsts, in_extras = count(firsts, t - window_s, t), count(extras, t - window_s, t)
        if kind == "first":
            budget.record_first()
            firsts.append(t)
        elif kind == "extra":
            allowed = in_extras + 1 <= exact * in_firsts + allowance
            assert allowed == budget.try_extra()
            if allowed:
                extras.append(t)
        else:
            budget.refund()
            if in_extras:  # the newest grant is the one in the window
                extras.pop()

        assert count(firsts, t - window_s, t) == budget.firsts
        assert count(extras, t - window_s, t) == budget.extras
        # The window's extras were all granted within window_s of the latest grant, so they are
        # bounded by the share of the first attempts over the 2 * window_s ending now. (Not by
        # the window's own first attempts: those may expire before the extras they paid for.)
        bound = exact * count(firsts, t - 2 * window_s, t) + allowance
        assert count(extras, t - window_s, t) <= bound


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
        (lambda: HedgeBudget(-0.01), r"^ratio must be in \[0, 1\].*got -0\.01$"),
        (lambda: HedgeBudget(1.5), r"^ratio .* got 1\.5$"),
        (lambda: HedgeBudget(math.nan), r"^ratio .* got nan$"),
        (lambda: HedgeBudget(window_s=0.0), r"^window_s must be positive.*got 0\.0$"),
        (lambda: HedgeBudget(window_s=-1.0), r"^window_s .* got -1\.0$"),
        (lambda: HedgeBudget(window_s=math.nan), r"^window_s .* got nan$"),
        (lambda: HedgeBudget(allowance=-1), r"^allowance must be 0 or more.*got -1$"),
        (lambda: ProviderThrottle(max_tokens=0.0), r"^max_tokens must be .* got 0\.0$"),
        (lambda: ProviderThrottle(max_tokens=-2.0), r"^max_tokens .* got -2\.0$"),
        (lambda: ProviderThrottle(max_tokens=math.inf), r"^max_tokens .* got inf$"),
        (lambda: ProviderThrottle(token_ratio=0.0), r"^token_ratio must be in .* got 0\.0$"),
        (lambda: ProviderThrottle(3.0, 3.5), r"^token_ratio .*max_tokens=3\.0\], got 3\.5$"),
        (lambda: ProviderThrottle(token_ratio=math.nan), r"^token_ratio .* got nan$"),
        (lambda: ProviderThrottle(token_ratio=0.0001), r"^token_ratio .*0\.001.* got 0\.0001$"),
        (lambda: retry_after_fits(1.0, 5.0, expected_s=-1.0), r"^expected_s .* got -1\.0$"),
        (lambda: retry_after_fits(None, 5.0, expected_s=math.nan), r"^expected_s .* got nan$"),
    ],
)
def test_invalid_arguments_raise_config_error_naming_them(
    make: Callable[[], object], match: str
) -> None:
    """
    An out-of-range argument raises ConfigError with its name and value.
    """
    with pytest.raises(ConfigError, match=match):
        make()


def test_boundary_arguments_are_accepted() -> None:
    """
    Ratio 0 and 1, allowance 0, and token_ratio equal to max_tokens are all valid.
    """
    HedgeBudget(0.0, allowance=0)
    HedgeBudget(1.0, window_s=math.inf)
    throttle = ProviderThrottle(max_tokens=2.0, token_ratio=2.0)
    throttle.on_failure("p")
    throttle.on_failure("p")
    throttle.on_success("p")

    assert 2.0 == throttle.tokens("p")
