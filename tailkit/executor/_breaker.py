"""
A circuit breaker per provider: a provider failing repeatedly is taken out of first attempts.

The throttle (`tailkit.executor.ProviderThrottle`) stops *extra* attempts to a provider that
fails; the breaker stops *first* attempts to one that fails repeatedly, so that a step whose
hedge route is on another provider starts there instead of paying a failure (and a failover)
on every call. Its states, per provider:

- **closed**: first attempts go to the provider. It opens after ``failures`` failures in a
  row, or when at least ``min_calls`` of the last ``window`` outcomes are in and at least
  ``failure_rate`` of them failed;
- **open**: for ``cooldown_s`` seconds first attempts start on the step's hedge route (when it
  is on another provider whose breaker is not open); a step with nowhere else to go still
  calls the provider, and its outcome counts;
- **half-open**: after the cool-down one first attempt (the *probe*) goes to the provider;
  the others keep starting elsewhere until it answers. A success closes the breaker (its
  counts start afresh), a failure opens it for another cool-down. A probe that ends without a
  verdict (cut by the step, a lost race, a cancelled caller) hands its place to the next first
  attempt.

A failure is an attempt the provider failed: status ``error`` (5xx, reset, broken or
truncated stream) or ``timeout`` (the attempt's own timeout). A 429 is not: the provider's pool
was full, which its Retry-After rest handles (`ProviderThrottle.rest`); a cut attempt (lost a
race, hit a cutoff, or the deadline) says nothing about the provider either. Every outcome of
every attempt on the provider counts, whatever its role.

Standard library only, synchronous, not thread-safe: one breaker per executor, on its loop.
Times are instants on the loop clock, in seconds.
"""

from __future__ import annotations

import math

from collections import deque
from dataclasses import dataclass, field

from tailkit.errors import ConfigError


__all__ = ["BREAKER_FAILURES", "Breaker"]

BREAKER_FAILURES = ("error", "timeout")
"""Attempt statuses that count as the provider's failure (see the module docstring)."""

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(slots=True)
class _State:
    """
    Strictly private: one provider's breaker.
    """

    streak: int = 0  # failures in a row
    recent: deque[bool] = field(default_factory=deque)  # last outcomes, True = failed
    open_until: float = -math.inf  # the cool-down ends (open before, half-open after)
    tripped: bool = False  # opened and not closed since
    probe: object = None  # the attempt holding the half-open probe's place
    why: str = ""  # why it last opened


class Breaker:
    """
    Per-provider circuit breaker: closed, open for a cool-down, half-open with one probe.

    Args:
        failures: Failures in a row that open it (at least 1). Default 5.
        cooldown_s: Seconds it stays open before a probe may go (positive). Default 30.
        failure_rate: Share of failed outcomes among the last ``window`` that opens it, in
            (0, 1] (``None``: only the streak counts). Default 0.5.
        window: Outcomes the failure rate is measured over (at least 1). Default 20.
        min_calls: Outcomes needed in the window before the rate may open it (1 to
            ``window``). Default 20 (a full window).

    Raises:
        ConfigError: A parameter is out of range (named, with its value).

    Example::

        breaker = Breaker(failures=3, cooldown_s=10.0)
        executor = Executor(plan, breaker=breaker)
    """

    __slots__ = ("_states", "cooldown_s", "failure_rate", "failures", "min_calls", "window")

    def __init__(
        self,
        *,
        failures: int = 5,
        cooldown_s: float = 30.0,
        failure_rate: float | None = 0.5,
        window: int = 20,
        min_calls: int = 20,
    ) -> None:
        if not (isinstance(failures, int) and failures >= 1):
            msg = f"{{field}} must be an integer of at least 1, got {failures!r}."
            raise ConfigError(msg, field="failures", value=failures, fix="Pass 1 or more.")
        if not 0.0 < cooldown_s < math.inf:
            msg = f"{{field}} must be a positive number of seconds, got {cooldown_s!r}."
            raise ConfigError(
                msg, field="cooldown_s", value=cooldown_s, fix="Pass a number of seconds above 0."
            )
        if failure_rate is not None and not 0.0 < failure_rate <= 1.0:
            msg = f"{{field}} must be in (0, 1] or None, got {failure_rate!r}."
            raise ConfigError(
                msg,
                field="failure_rate",
                value=failure_rate,
                fix="Pass a share such as 0.5, or None to open on the streak alone.",
            )
        if not (isinstance(window, int) and window >= 1):
            msg = f"{{field}} must be an integer of at least 1, got {window!r}."
            raise ConfigError(msg, field="window", value=window, fix="Pass 1 or more.")
        if not (isinstance(min_calls, int) and 1 <= min_calls <= window):
            msg = f"{{field}} must be an integer in [1, window={window}], got {min_calls!r}."
            raise ConfigError(
                msg, field="min_calls", value=min_calls, fix="Pass a number from 1 to window."
            )
        self.failures, self.cooldown_s = failures, cooldown_s
        self.failure_rate, self.window, self.min_calls = failure_rate, window, min_calls
        self._states: dict[str, _State] = {}

    def state(self, provider: str, at: float) -> str:
        """
        ``closed``, ``open`` or ``half_open``: the provider's breaker at instant ``at``.
        """
        s = self._states.get(provider)
        if s is None or not s.tripped:
            return CLOSED
        return OPEN if at < s.open_until else HALF_OPEN

    def why(self, provider: str) -> str:
        """
        Why the provider's breaker last opened (empty if it never did).
        """
        s = self._states.get(provider)
        return "" if s is None else s.why

    def admits(self, provider: str, at: float, attempt: object) -> str | None:
        """
        Whether a first attempt may go to ``provider`` at ``at``: ``None`` if not, else why.

        Returns ``"closed"`` (a plain yes) or ``"probe"``: the breaker is half-open and
        ``attempt`` (any object standing for it) now holds the probe's place, until its
        outcome is told (`record`) or it ends without one (`release`).
        """
        s = self._states.get(provider)
        if s is None or not s.tripped:
            return CLOSED
        if at < s.open_until or s.probe is not None:
            return None
        s.probe = attempt
        return "probe"

    def record(
        self, provider: str, at: float, *, failed: bool, attempt: object = None
    ) -> str | None:
        """
        An attempt on ``provider`` ended at ``at``, ``failed`` or not; returns a change of state.

        ``"opened"`` or ``"closed"`` when this outcome flipped the breaker, else ``None``.
        """
        s = self._states.get(provider)
        if s is None:
            if not failed:
                return None  # the common case: a healthy provider keeps no state
            s = self._states[provider] = _State()
        if s.probe is not None and s.probe is attempt:
            s.probe = None
        if not failed:
            s.streak = 0
            self._push(s, failed=False)
            if s.tripped and at >= s.open_until:  # a success after the cool-down closes it
                del self._states[provider]
                return "closed"
            return None
        s.streak += 1
        self._push(s, failed=True)
        if s.tripped:
            if at >= s.open_until:  # the probe (or any call after the cool-down) failed
                s.open_until = at + self.cooldown_s
                s.probe = None
                s.why = "the probe after its cool-down failed"
                return "opened"
            return None
        why = self._trips(s)
        if why is None:
            return None
        s.tripped, s.open_until, s.why, s.probe = True, at + self.cooldown_s, why, None
        return "opened"

    def release(self, provider: str, attempt: object) -> None:
        """
        ``attempt`` ended without a verdict: if it held the probe's place, the next may probe.
        """
        s = self._states.get(provider)
        if s is not None and s.probe is attempt:
            s.probe = None

    def _push(self, s: _State, *, failed: bool) -> None:
        s.recent.append(failed)
        if len(s.recent) > self.window:
            s.recent.popleft()

    def _trips(self, s: _State) -> str | None:
        if s.streak >= self.failures:
            return f"{s.streak} failures in a row"
        if self.failure_rate is not None and len(s.recent) >= self.min_calls:
            bad = sum(s.recent)
            if bad >= self.failure_rate * len(s.recent):
                return f"{bad} of the last {len(s.recent)} attempts failed"
        return None

    def __repr__(self) -> str:
        return (
            f"Breaker(failures={self.failures!r}, cooldown_s={self.cooldown_s!r}, "
            f"failure_rate={self.failure_rate!r}, window={self.window!r}, "
            f"min_calls={self.min_calls!r})"
        )
