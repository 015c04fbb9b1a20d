"""
The per-provider throttle, and whether a provider's Retry-After fits the deadline.

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

from tailkit.errors import ConfigError


__all__ = ["CLOSE_AFTER", "MAX_REST_DOUBLINGS", "ProviderThrottle", "retry_after_fits"]

CLOSE_AFTER = 3  # probes that must succeed in a row before a rested provider takes everyone
MAX_REST_DOUBLINGS = 3  # a rest after 429s in a row: Retry-After x 2, 4, then 8 at most
_MILLI = 1000  # the throttle counts thousandths of a token, as grpc-java does: exact sums


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
            msg = f"{{field}} must be a positive number, got {max_tokens!r}."
            raise ConfigError(
                msg, field="max_tokens", value=max_tokens, fix="Pass a number of tokens above 0."
            )
        if not 0.0 < token_ratio <= max_tokens:
            msg = f"{{field}} must be in (0, max_tokens={max_tokens!r}], got {token_ratio!r}."
            raise ConfigError(
                msg,
                field="token_ratio",
                value=token_ratio,
                fix="Pass a ratio from 0.001 to max_tokens.",
            )
        if round(token_ratio * _MILLI) < 1:
            msg = f"{{field}} must be at least 0.001 (1/1000 token), got {token_ratio!r}."
            raise ConfigError(
                msg,
                field="token_ratio",
                value=token_ratio,
                fix="Pass a ratio from 0.001 to max_tokens.",
            )
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
        msg = f"{{field}} must be 0 or more (seconds), got {expected_s!r}."
        raise ConfigError(msg, field="expected_s", value=expected_s, fix="Pass 0 or more seconds.")
    if retry_after_s is None:
        return True
    return max(retry_after_s, 0.0) + expected_s <= remaining_s
