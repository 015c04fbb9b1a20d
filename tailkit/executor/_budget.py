"""
The two brakes on extra load: a global hedge budget and a per-provider throttle.

Every hedge, or retry or downgrade at a cutoff, is load that nobody asked for, so the executor
caps it twice.

The hedge budget speaks the simulator's language. `tailkit calibrate` keeps a plan's *expected*
extra attempts per first attempt within ``hedge_budget``, counting a run's steps as its first
attempts; the budget grants an extra attempt while the extras spent stay within that share of
the first attempts credited, plus the noise a plan on budget makes, plus a small allowance:

    extras + 1 <= ratio * firsts + sigmas * sqrt(ratio * firsts) + allowance

It counts first attempts, never seconds, for three reasons:

- **A plan within budget is not denied.** A run is credited with all its first attempts when it
  starts, so a step late in a run spends credit its run brought along, however many runs started
  together; a count over a sliding minute instead sees a burst of runs hedge their late steps
  before the next burst's first attempts arrive, and denies hedges the simulation counted on.
  The extras of many independent runs scatter around their mean with a standard deviation of
  at most ``sqrt(ratio * firsts)`` (a sum of rare events is at most Poisson-wide), so a plan
  whose mean is on budget exceeds the bound only at a ``sigmas``-deviation fluke.
- **It is still a brake.** A plan or a provider brownout that hedges far more than planned is
  held to the share plus that noise term, which shrinks relative to the share as traffic grows
  (at 5 % over 10,000 first attempts, to 5.7 %).
- **Nothing depends on wall-clock time**, so a plan time-scaled for a test or a demo needs no
  scaled budget; the deposits and spends are the same at any speed.

The budget remembers every run in flight, and the closed runs that brought the latest
``window_firsts`` first attempts: a long quiet spell cannot bank credit for a later storm. The
allowance lets a process that has barely started still hedge. Decisions are exact (integer
arithmetic on the decimal ratio), so the simulator's reference can replay them bit for bit.

The throttle is gRPC's retryThrottling, keyed per provider. A 429 says that provider's
rate-limit pool is full; a hedge sent there is one more request into the storm, and every
client hedging at once is how a brownout becomes an outage. Each failure (429, 5xx, timeout,
cut stream) costs a token, each success earns back ``token_ratio``; at or below half the tokens
no hedge goes to that provider, until successes refill it. Another provider has its own pool
and its own tokens, so a storm at one never stops hedges to another. With the defaults (10,
0.1) it takes 5 net failures to engage and throttles at about a 9% failure rate. The simulator
does not model it: a route failing that often is a brownout, not the tail a plan is built on.

A 429 with a Retry-After says more than a failure: the provider's pool is full until then. The
throttle remembers that per provider (`rest`; doubled for each further 429 before a success,
up to 8x); while it rests, `admits` says no, and the executor sends a step's first attempt
straight to its hedge route (another provider, its own pool) and starts no immediate extra
attempt there. After the rest one first attempt at a time goes back (a probe) until three
in a row succeed. The instants are on the caller's clock (the executor's loop clock, the same
clock the Retry-After is waited on), so nothing else about the throttle depends on time.
"""

from __future__ import annotations

import math

from collections import deque
from fractions import Fraction

from tailkit.errors import ConfigError


__all__ = ["BudgetAccount", "HedgeBudget", "ProviderThrottle", "retry_after_fits"]

CLOSE_AFTER = 3  # probes that must succeed in a row before a rested provider takes everyone
MAX_REST_DOUBLINGS = 3  # a rest after 429s in a row: Retry-After x 2, 4, then 8 at most
_MILLI = 1000  # the throttle counts thousandths of a token, as grpc-java does: exact sums


class BudgetAccount:
    """
    One run's share of the hedge budget: the first attempts it brought, the extras it spent.

    Returned by `HedgeBudget.open`; pass it to `HedgeBudget.try_extra` and `HedgeBudget.close`.

    Attributes:
        firsts: First attempts credited when the run started.
        extras: Extra attempts granted to the run.
        denials: Extra attempts refused to the run.
    """

    __slots__ = ("closed", "denials", "extras", "firsts")

    def __init__(self, firsts: int) -> None:
        self.firsts = firsts
        self.extras = 0
        self.denials = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"BudgetAccount(firsts={self.firsts}, extras={self.extras}, denials={self.denials})"


class HedgeBudget:
    """
    Global hedge budget: extra attempts as a share of first attempts, counted per run.

    An extra attempt is granted iff ``extras + 1 <= ratio * firsts + sigmas * sqrt(ratio *
    firsts) + allowance``, where ``firsts`` and ``extras`` count the runs still open and the
    closed runs that brought the latest ``window_firsts`` first attempts (see the module
    docstring). A workflow run opens an account with one first attempt per step of its plan
    (the simulator's count), a lone step call with one. Synchronous, not thread-safe.

    Args:
        ratio: Extra attempts allowed per first attempt, in [0, 1]; read as the decimal it
            prints as, so 0.29 of 100 first attempts is exactly 29.
        allowance: Extra attempts granted on top, whatever the traffic.
        sigmas: Headroom for the noise of a plan on budget, in standard deviations of its
            extra attempts (0: none; the share and the allowance only).
        window_firsts: Closed runs are remembered until newer closed runs bring this many
            first attempts (runs in flight always count).
        window_s: Ignored. Budgets used to count over a sliding window of seconds; callers that
            still pass one keep working, with no window in time.

    Raises:
        ConfigError: An argument is out of range.

    Example::

        budget = HedgeBudget(plan.hedge_budget)  # what Executor(plan) uses by default
    """

    __slots__ = (
        "_allowance", "_closed", "_closed_firsts", "_den", "_extras", "_firsts", "_num",
        "_sigma_den", "_sigma_num", "_window_firsts",
    )  # fmt: skip

    def __init__(
        self,
        ratio: float = 0.05,
        *,
        allowance: int = 2,
        sigmas: float = 3.0,
        window_firsts: int = 10_000,
        window_s: float | None = None,
    ) -> None:
        del window_s  # accepted for callers written for the time window, which it replaced
        if not 0.0 <= ratio <= 1.0:
            msg = f"ratio must be in [0, 1] (extra attempts per first attempt), got {ratio!r}"
            raise ConfigError(msg)
        if allowance < 0:
            msg = f"allowance must be 0 or more (extra attempts), got {allowance!r}"
            raise ConfigError(msg)
        if not 0.0 <= sigmas < math.inf:
            msg = f"sigmas must be 0 or more (standard deviations of the noise), got {sigmas!r}"
            raise ConfigError(msg)
        if window_firsts < 1:
            msg = f"window_firsts must be at least 1 (first attempts), got {window_firsts!r}"
            raise ConfigError(msg)
        # Compare in integers: as a float 0.29 * 100 is 28.999999999999996, which would deny
        # the 29th extra that the rule grants.
        exact = Fraction(repr(float(ratio)))
        self._num, self._den = exact.numerator, exact.denominator
        spread = Fraction(repr(float(sigmas))) ** 2
        self._sigma_num, self._sigma_den = spread.numerator, spread.denominator
        self._allowance = allowance
        self._window_firsts = window_firsts
        self._firsts = self._extras = 0  # open runs and remembered closed runs
        self._closed: deque[BudgetAccount] = deque()
        self._closed_firsts = 0

    @property
    def firsts(self) -> int:
        """
        First attempts counted now: runs in flight and the remembered closed runs.
        """
        return self._firsts

    @property
    def extras(self) -> int:
        """
        Extra attempts counted now, of the same runs.
        """
        return self._extras

    def allows(self, extras: int, firsts: int) -> bool:
        """
        Whether the rule grants one more extra attempt after ``extras``, given ``firsts``.
        """
        need = self._den * (extras + 1 - self._allowance) - self._num * firsts
        if need <= 0:
            return True
        spread = self._sigma_num * self._num * firsts * self._den
        return need * need * self._sigma_den <= spread

    def open(self, firsts: int = 1) -> BudgetAccount:
        """
        A run starts: credit its first attempts (a workflow: one per step; a lone call: 1).
        """
        if firsts < 0:
            msg = f"firsts must be 0 or more (first attempts of the run), got {firsts!r}"
            raise ConfigError(msg)
        self._firsts += firsts
        return BudgetAccount(firsts)

    def try_extra(self, account: BudgetAccount) -> bool:
        """
        Ask whether an extra attempt (hedge, or retry or downgrade at a cutoff) may start now.

        A grant is counted to ``account``, a refusal too (as a denial).

        Returns:
            True if granted.
        """
        if not self.allows(self._extras, self._firsts):
            account.denials += 1
            return False
        account.extras += 1
        self._extras += 1
        return True

    def close(self, account: BudgetAccount) -> None:
        """
        A run ended: it is remembered until newer closed runs bring ``window_firsts`` firsts.

        Closing an account twice does nothing.
        """
        if account.closed:
            return
        account.closed = True
        self._closed.append(account)
        self._closed_firsts += account.firsts
        while self._closed and self._closed_firsts - self._closed[0].firsts >= self._window_firsts:
            gone = self._closed.popleft()
            self._closed_firsts -= gone.firsts
            self._firsts -= gone.firsts
            self._extras -= gone.extras

    def __repr__(self) -> str:
        return (
            f"HedgeBudget(ratio={self._num / self._den!r}, allowance={self._allowance!r}, "
            f"sigmas={math.sqrt(self._sigma_num / self._sigma_den)!r}, "
            f"window_firsts={self._window_firsts!r}, firsts={self._firsts}, extras={self._extras})"
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

    __slots__ = (
        "_good", "_max", "_max_tokens", "_probe_until", "_ratio", "_rest_s", "_rest_until",
        "_strikes", "_token_ratio", "_tokens",
    )  # fmt: skip

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
        self._rest_until: dict[str, float] = {}  # provider -> end of its rest
        self._rest_s: dict[str, float] = {}  # provider -> its last rest's length
        self._strikes: dict[str, int] = {}  # provider -> 429s since its last success
        self._probe_until: dict[str, float] = {}  # provider -> a probe's slot ends
        self._good: dict[str, int] = {}  # provider -> probes answered in a row since its rest

    def rest(self, provider: str, at: float, retry_after_s: float) -> None:
        """
        ``provider`` answered 429 at ``at`` with a Retry-After of ``retry_after_s`` seconds.

        It rests that long, doubled for each 429 since its last success (up to
        `MAX_REST_DOUBLINGS` times): a pool still full after its Retry-After is a storm, and
        a client that comes back on every Retry-After keeps sending it requests it refuses. A
        later end extends the rest; an earlier one never shortens it.
        """
        strikes = self._strikes.get(provider, 0)
        seconds = max(retry_after_s, 0.0) * 2 ** min(strikes, MAX_REST_DOUBLINGS)
        self._strikes[provider] = strikes + 1
        self._good.pop(provider, None)
        self._rest_s[provider] = seconds
        self._probe_until.pop(provider, None)
        until = at + seconds
        if until > self._rest_until.get(provider, -math.inf):
            self._rest_until[provider] = until

    def resting(self, provider: str, at: float) -> bool:
        """
        Whether ``provider`` is resting at ``at`` after a 429 (see `rest`).
        """
        until = self._rest_until.get(provider)
        if until is None:
            return False
        if at >= until:
            del self._rest_until[provider]  # over: forget it, the dict stays small
            return False
        return True

    def calm(self, provider: str) -> bool:
        """
        Whether ``provider`` has had no 429 rest since its pool last had room.

        The fast path: then `admits` says yes to everyone.
        """
        return provider not in self._strikes and provider not in self._rest_until

    def admits(self, provider: str, at: float, *, hold_s: float = 0.0) -> bool:
        """
        Whether a first attempt may go to ``provider`` at ``at``.

        Not while it rests; after a rest, one attempt at a time (a probe, half-open in
        circuit-breaker terms) until `CLOSE_AFTER` have succeeded in a row, so that the callers
        a rest held back do not all come back into a pool that has room for one. A probe that
        has not answered within ``hold_s`` (or the last rest's length, if longer) no longer
        holds the others back. Calling it for an admitted attempt takes the probe's place.
        """
        if self.resting(provider, at):
            return False
        if not self._strikes.get(provider):
            return True
        if at < self._probe_until.get(provider, -math.inf):
            return False
        self._probe_until[provider] = at + max(self._rest_s.get(provider, 0.0), hold_s)
        return True

    def on_success(self, provider: str) -> None:
        """
        A call to ``provider`` succeeded: it earns back ``token_ratio`` tokens, up to the max.
        """
        self._tokens[provider] = min(self._get(provider) + self._ratio, self._max)
        if self._strikes.get(provider):  # a probe answered: the next may go
            self._probe_until.pop(provider, None)
            self._good[provider] = good = self._good.get(provider, 0) + 1
            if good >= CLOSE_AFTER:  # the pool has room again: no more doubling or probing
                del self._strikes[provider], self._good[provider]

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
