"""
What the steps of one executor share, and what a caller may say about a step beyond the plan.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import time

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.executor._alarm import Alarms
from tailkit.executor._breaker import Breaker
from tailkit.executor._budget import BudgetAccount, HedgeBudget, ProviderThrottle
from tailkit.executor._events import Observer
from tailkit.executor._live import LiveRouter
from tailkit.executor._types import (
    MAX_STREAM_BYTES,
    MAX_STREAM_CHUNKS,
    Attempt,
    AttemptError,
    Validator,
)
from tailkit.ledger import Ledger


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """
    How the executor treats a step beyond what the plan says.

    Args:
        validator: Checks a result; a falsy return value escalates to the upgrade route.
        losers: ``cancel`` a losing attempt, or let it ``finish`` (recorded as abandoned);
            any other value is refused.
        error_retries: Retries after the first attempt fails before the step acted on a
            cutoff (0 or more; the simulator models 0 or 1). Each needs the provider not
            throttled and the hedge budget's grant, like any extra attempt.
        retry_jitter_s: A retry after an error waits a random 0 to this many seconds (on top
            of any Retry-After), so the callers a provider failed together do not all come
            back at once (0: at once, as the simulator plays it).
        project_overrun: Also downgrade as soon as a stream is projected to overrun the
            cutoff (``on_cutoff: downgrade`` with expected output tokens). The simulator does
            not model this, so a calibrated plan's predictions assume it off.
        resend_non_idempotent: Let a step marked ``idempotent: false`` act on its cutoff
            (hedge, retry, downgrade) anyway. Off by default: such a step's call may have
            done its work already, and the plan says it must not be sent twice.
        provider_errors: Exception types (besides `AttemptError`, timeouts, connection
            errors and anything carrying an HTTP status) that mean the provider failed and
            may be retried. Any other exception is the caller's own bug: it is raised at once.
        max_stream_bytes: A stream's byte budget: an attempt whose stream goes past it
            without ending fails with `StreamTooLarge` (status ``error``, retried like any
            failure) instead of being held in memory until the deadline. The adapters count
            the bytes they receive; the executor counts the characters of answer text it
            keeps, for any attempt function. Default 256 MiB, which no real answer reaches.
        max_stream_chunks: A stream's chunk budget, counted by the executor (every chunk,
            keep-alives too): past it, `StreamTooLarge`. Default 1,000,000.
    """

    validator: Validator | None = None
    losers: str = "cancel"
    error_retries: int = 1
    retry_jitter_s: float = 0.1
    project_overrun: bool = False
    resend_non_idempotent: bool = False
    provider_errors: tuple[type[BaseException], ...] = ()
    max_stream_bytes: int = MAX_STREAM_BYTES
    max_stream_chunks: int = MAX_STREAM_CHUNKS

    def __post_init__(self) -> None:
        """
        Refuse a field the executor would misread (a typo in ``losers`` used to mean cancel).

        Raises:
            ConfigError: Naming the field, its value and what it accepts.
        """
        if self.losers not in LOSERS:
            allowed = " or ".join(repr(v) for v in LOSERS)
            msg = f"{{field}} must be {allowed}, got {self.losers!r}."
            raise ConfigError(msg, field="losers", value=self.losers, fix=f"Pass {allowed}.")
        if self.validator is not None and not callable(self.validator):
            msg = f"{{field}} must be callable or None, got {self.validator!r}."
            raise ConfigError(
                msg,
                field="validator",
                value=self.validator,
                fix="Pass a function of the result, or None.",
            )
        retries = self.error_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            msg = f"{{field}} must be an integer, 0 or more (retries), got {retries!r}."
            raise ConfigError(msg, field="error_retries", value=retries, fix="Pass 0 or more.")
        jitter = self.retry_jitter_s
        if (
            isinstance(jitter, bool)
            or not isinstance(jitter, int | float)
            or not (0.0 <= jitter < math.inf)
        ):
            msg = f"{{field}} must be a finite number of seconds, 0 or more, got {jitter!r}."
            raise ConfigError(
                msg, field="retry_jitter_s", value=jitter, fix="Pass 0 or more seconds."
            )
        for name in ("project_overrun", "resend_non_idempotent"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                msg = f"{{field}} must be True or False, got {value!r}."
                raise ConfigError(msg, field=name, value=value, fix="Pass True or False.")
        for name in ("max_stream_bytes", "max_stream_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{{field}} must be a positive integer, got {value!r}."
                raise ConfigError(msg, field=name, value=value, fix="Pass 1 or more.")
        errors = self.provider_errors
        if not isinstance(errors, tuple) or not all(
            isinstance(e, type) and issubclass(e, BaseException) for e in errors
        ):
            msg = f"{{field}} must be a tuple of exception classes, got {errors!r}."
            raise ConfigError(
                msg,
                field="provider_errors",
                value=errors,
                fix="Pass a tuple of exception classes, e.g. (TimeoutError,).",
            )


LOSERS = ("cancel", "finish")  # what `StepPolicy.losers` accepts
DEFAULT_POLICY = StepPolicy()


class InvalidOutput(AttemptError):  # noqa: N818 - reads as the status it maps to
    """
    An attempt's result failed the step's validator.
    """


_TYPICAL_OF = 64  # recent successes per route whose median is a route's typical duration


@dataclass(slots=True, eq=False)
class Shared:
    """
    What every step of one executor shares: the plan, budgets, ledger.

    Also what it learns as it runs: each route's recent successful durations (the typical
    duration a Retry-After must leave room for when the plan predicts none), the losing
    attempts left to finish (an executor's `aclose` waits for them), and the live-routing
    windows of steps that route live (``router``; ``None`` when the executor ignores the
    plan's ``live`` blocks).

    A rehearsal's ``time_scale`` (real seconds per profile second, 1 in production) scales the
    retry jitter, and its ledger lines go back to profile seconds around ``origin`` (see
    `tailkit.executor._scale`); ``plan`` is then the scaled plan the steps run.
    """

    plan: Plan
    budget: HedgeBudget
    throttle: ProviderThrottle
    ledger: Ledger
    policies: dict[str, StepPolicy] = field(default_factory=dict)
    denials: dict[str, int] = field(default_factory=lambda: {"budget": 0, "throttle": 0})
    rng: random.Random = field(default_factory=random.Random)
    seen: dict[str, deque[float]] = field(default_factory=dict)
    abandoned: set[asyncio.Task[Any]] = field(default_factory=set)
    observer: Observer = field(default_factory=lambda: Observer(tracing=False))
    breaker: Breaker = field(default_factory=Breaker)
    time_scale: float = 1.0
    origin: datetime = field(default_factory=lambda: datetime.fromtimestamp(time.time(), UTC))
    alarms: Alarms | None = None  # the loop timer of every wait (see `alarms_on`)
    router: LiveRouter | None = None  # live routing's windows (``None``: fixed routing)

    def alarms_on(self, loop: asyncio.AbstractEventLoop) -> Alarms:
        """
        The timer heap the executor's waits share on ``loop`` (made for the loop it runs on).

        One executor runs on one loop at a time; used on another loop (a test's second
        ``asyncio.run``), it starts a new heap there.
        """
        alarms = self.alarms
        if alarms is None or alarms.loop is not loop:
            alarms = self.alarms = Alarms(loop)
        return alarms

    def ok(self, attempt: Attempt, seconds: float) -> None:
        """
        An attempt succeeded in ``seconds``: remember it (its route's typical duration).
        """
        recent = self.seen.get(attempt.route)
        if recent is None:
            recent = self.seen[attempt.route] = deque(maxlen=_TYPICAL_OF)
        recent.append(seconds)

    def typical_s(self, route: str) -> float:
        """
        The median of the route's recent successful durations (0 before the first).
        """
        recent = self.seen.get(route)
        return statistics.median(recent) if recent else 0.0

    def jitter(self, seconds: float) -> float:
        """
        A random wait in [0, seconds) profile seconds, in real seconds (times the time scale).
        """
        return self.rng.uniform(0.0, seconds * self.time_scale) if seconds > 0.0 else 0.0


class RunBook:
    """
    What the steps of one run share: its budget account and the actions refused to it.
    """

    __slots__ = ("account", "denials")

    def __init__(self, account: BudgetAccount) -> None:
        self.account = account
        self.denials = {"budget": 0, "throttle": 0}
