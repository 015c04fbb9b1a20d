"""
The two brakes on extra load (DESIGN.md §4): a global hedge budget and a per-provider throttle.

Every hedge or retry is load that nobody asked for, so the executor caps it twice.

The hedge budget lets extra attempts be at most a share of first attempts, counted over a
sliding window, plus a small allowance per window. Finagle's backup budget has the share but no
allowance: one backup costs ``1 / maxExtraLoad`` deposits that expire after 10 s, so a client
needs at least ``1 / maxExtraLoad`` requests per 10 s (10 QPS at 1%) before its first backup.
An agent step that runs a few times a minute and takes seconds never gets there, and would never
hedge. The allowance is Finagle's ``minRetriesPerSec`` reserve in a form that reads at low QPS:
``allowance`` hedges per window whatever the traffic, the share on top once traffic is high.
Both counts slide, so a burst cannot bank credit for later.

The throttle is gRPC's retryThrottling, keyed per provider. A 429 says that provider's
rate-limit pool is full; a hedge sent there is one more request into the storm, and every
client hedging at once is how a brownout becomes an outage. Each failure (429, 5xx, timeout,
cut stream) costs a token, each success earns back ``token_ratio``; at or below half the tokens
no hedge goes to that provider, until successes refill it. Another provider has its own pool
and its own tokens, so a storm at one never stops hedges to another. With the defaults (10,
0.1) it takes 5 net failures to engage and throttles at about a 9% failure rate.
"""

from __future__ import annotations

import math

from collections import deque
from collections.abc import Callable
from fractions import Fraction

from tailkit.errors import ConfigError
from tailkit.executor._deadline import now


__all__ = ["HedgeBudget", "ProviderThrottle", "retry_after_fits"]

_MILLI = 1000  # the throttle counts thousandths of a token, as grpc-java does: exact sums


class HedgeBudget:
    """
    Global hedge budget: extra attempts as a share of first attempts, plus an allowance.

    An extra attempt is granted iff ``extras + 1 <= ratio * firsts + allowance``, both counted
    over the last ``window_s`` seconds: the allowance lets a low-traffic step still hedge. An
    event at instant ``t`` leaves the window at ``t + window_s``. Synchronous, not thread-safe.

    Args:
        ratio: Extra attempts allowed per first attempt, in [0, 1]; read as the decimal it
            prints as, so 0.29 of 100 first attempts is exactly 29.
        window_s: Length of the sliding window in seconds (``math.inf``: counts never expire).
        allowance: Extra attempts granted per window on top of the share, whatever the traffic.
        clock: Returns the current instant in seconds; the running loop's clock by default.

    Raises:
        ConfigError: An argument is out of range.
    """

    __slots__ = ("_allowance", "_clock", "_den", "_extras", "_firsts", "_num", "_window_s")

    def __init__(
        self,
        ratio: float = 0.05,
        *,
        window_s: float = 60.0,
        allowance: int = 2,
        clock: Callable[[], float] = now,
    ) -> None:
        if not 0.0 <= ratio <= 1.0:
            msg = f"ratio must be in [0, 1] (extra attempts per first attempt), got {ratio!r}"
            raise ConfigError(msg)
        if not window_s > 0.0:
            msg = f"window_s must be positive (seconds), got {window_s!r}"
            raise ConfigError(msg)
        if allowance < 0:
            msg = f"allowance must be 0 or more (extra attempts per window), got {allowance!r}"
            raise ConfigError(msg)
        # Compare in integers: as a float 0.29 * 100 is 28.999999999999996, which would deny
        # the 29th extra that the rule grants.
        exact = Fraction(repr(float(ratio)))
        self._num, self._den = exact.numerator, exact.denominator
        self._allowance = allowance
        self._clock = clock
        self._window_s = window_s
        # Instants at which each counted event leaves the window, oldest first.
        self._firsts: deque[float] = deque()
        self._extras: deque[float] = deque()

    @property
    def firsts(self) -> int:
        """
        First attempts in the current window.
        """
        self._expire(self._clock())
        return len(self._firsts)

    @property
    def extras(self) -> int:
        """
        Extra attempts in the current window.
        """
        self._expire(self._clock())
        return len(self._extras)

    def record_first(self) -> None:
        """
        Count a first attempt that starts now.
        """
        t = self._clock()
        self._expire(t)
        self._firsts.append(t + self._window_s)

    def try_extra(self) -> bool:
        """
        Ask whether an extra attempt (hedge or retry) may start now; a grant is counted.

        Returns:
            True if granted (call `refund` if the attempt then does not start).
        """
        t = self._clock()
        self._expire(t)
        needed = len(self._extras) + 1 - self._allowance
        if needed * self._den > self._num * len(self._firsts):
            return False
        self._extras.append(t + self._window_s)
        return True

    def refund(self) -> None:
        """
        Give back the latest grant: the extra attempt did not start after all.

        A grant that has already left the window costs nothing any more, so with no extra
        attempt in the window this does nothing.
        """
        self._expire(self._clock())
        if self._extras:
            self._extras.pop()

    def _expire(self, t: float) -> None:
        for events in (self._firsts, self._extras):
            while events and events[0] <= t:
                events.popleft()

    def __repr__(self) -> str:
        return (
            f"HedgeBudget(ratio={self._num / self._den!r}, window_s={self._window_s!r}, "
            f"allowance={self._allowance!r}, firsts={self.firsts}, extras={self.extras})"
        )


class ProviderThrottle:
    """
    Per-provider throttle in the style of gRPC retryThrottling.

    Failures (429, 5xx, timeouts) drain a provider's tokens, successes refill them; at or below
    half, no hedge goes there. Each provider starts with ``max_tokens``; tokens stay in
    [0, max_tokens], counted in thousandths as in grpc-java, so that ten successes of 0.1 add
    exactly one token. Synchronous, not thread-safe.

    Args:
        max_tokens: Tokens a provider starts with and can hold; it is throttled at half.
        token_ratio: Tokens a success earns back (a failure costs 1), in (0, max_tokens],
            at least 0.001.

    Raises:
        ConfigError: An argument is out of range.
    """

    __slots__ = ("_max", "_max_tokens", "_ratio", "_token_ratio", "_tokens")

    def __init__(self, max_tokens: float = 10.0, token_ratio: float = 0.1) -> None:
        if not 0.0 < max_tokens < math.inf:
            msg = f"max_tokens must be a positive number, got {max_tokens!r}"
            raise ConfigError(msg)
        if not 0.0 < token_ratio <= max_tokens:
            msg = f"token_ratio must be in (0, max_tokens={max_tokens!r}], got {token_ratio!r}"
            raise ConfigError(msg)
        if round(token_ratio * _MILLI) < 1:
            msg = f"token_ratio must be at least 0.001 (1/1000 token), got {token_ratio!r}"
            raise ConfigError(msg)
        self._max_tokens = max_tokens
        self._token_ratio = token_ratio
        self._max = round(max_tokens * _MILLI)
        self._ratio = round(token_ratio * _MILLI)
        self._tokens: dict[str, int] = {}

    def on_success(self, provider: str) -> None:
        """
        A call to ``provider`` succeeded: it earns back ``token_ratio`` tokens, up to the max.
        """
        self._tokens[provider] = min(self._get(provider) + self._ratio, self._max)

    def on_failure(self, provider: str) -> None:
        """
        A call to ``provider`` failed (429, 5xx, timeout, cut stream): it loses a token.
        """
        self._tokens[provider] = max(self._get(provider) - _MILLI, 0)

    def throttled(self, provider: str) -> bool:
        """
        Whether no hedge may go to ``provider``: its tokens are at or below half the max.
        """
        return 2 * self._get(provider) <= self._max

    def tokens(self, provider: str) -> float:
        """
        The tokens ``provider`` holds (``max_tokens`` until it is first heard of).
        """
        return self._get(provider) / _MILLI

    def _get(self, provider: str) -> int:
        return self._tokens.get(provider, self._max)

    def __repr__(self) -> str:
        return (
            f"ProviderThrottle(max_tokens={self._max_tokens!r}, token_ratio={self._token_ratio!r})"
        )


def retry_after_fits(
    retry_after_s: float | None, remaining_s: float, *, expected_s: float = 0.0
) -> bool:
    """
    Whether to honour a provider's Retry-After: waiting it, then the attempt, fits the deadline.

    ``None`` (no header) always fits.

    Args:
        retry_after_s: The provider's Retry-After in seconds; ``None``: no header. A negative
            value counts as 0.
        remaining_s: Seconds left until the run deadline; ``math.inf``: no deadline.
        expected_s: Seconds the attempt after the wait is expected to take.

    Returns:
        True if ``retry_after_s + expected_s <= remaining_s`` (a wait that ends exactly at the
        deadline fits).

    Raises:
        ConfigError: ``expected_s`` is negative or NaN.
    """
    if not expected_s >= 0.0:
        msg = f"expected_s must be 0 or more (seconds), got {expected_s!r}"
        raise ConfigError(msg)
    if retry_after_s is None:
        return True
    return max(retry_after_s, 0.0) + expected_s <= remaining_s
