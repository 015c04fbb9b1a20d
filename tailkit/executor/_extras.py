"""
The extra attempts a step may start, and what they cost: grants, refusals, retries, throttles.

A mixin of the step runner (`tailkit.executor._step.StepRun`), kept apart so that the rules for
extra load read in one place: every extra attempt -- an action at a cutoff, an error or 429
retry, an upgrade -- needs its provider not to be throttled and the hedge budget's grant; a
retry waits a jittered moment, and a Retry-After only if the step's expected duration still
fits after it; a validator that raises refuses the result.

Failover. A failed first attempt is about its provider (a 429: the pool is full; a 5xx, a
reset, a broken body, the attempt's own timeout: the provider is failing), so a step with a
hedge route on another provider retries there (`failover`) instead of on the same provider,
provided that provider is neither throttled, resting after a 429, nor out of first attempts
by its circuit breaker (`tailkit.executor._breaker`); otherwise the retry stays on the step's
route. The failover after an error is a recovery attempt like any error retry: it needs the
budget's grant and waits the jittered moment. The failover after a 429 does not wait out the
Retry-After on the full pool, and needs no grant from the hedge budget (the refused request
did no work: the failover is the call's one real attempt). While a provider rests after a
429's Retry-After, or its breaker is open, the step's first attempt starts on that hedge route
and no immediate extra attempt goes to it: its hedges go to the first attempt's own route
instead. The simulator plays the same rule (`tailkit.simulation._couple.repeat_route`); it has
no throttle, no 429 rest and no breaker (see the executor's docs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailkit.config import Step
from tailkit.deadline import now
from tailkit.executor._attempt import Live
from tailkit.executor._breaker import OPEN, Breaker
from tailkit.executor._budget import retry_after_fits
from tailkit.executor._shared import InvalidOutput, RunBook, Shared, StepPolicy
from tailkit.executor._telemetry import StepTelemetry


NO_TIME_S = 1e-6  # an extra attempt due this close to the deadline (or later) does not start


class ExtraAttempts:
    """
    Strictly private: the step runner's rules for extra attempts (see the module docstring).
    """

    __slots__ = ("breaker", "chain", "failed_over", "retries_left")

    s: Shared
    step: Step
    policy: StepPolicy
    book: RunBook
    tel: StepTelemetry | None
    deadline: float
    retries_left: int  # error retries the step may still start
    chain: Live | None  # the attempt whose failure is retried at once
    failed_over: bool  # the chain's last attempt is a failover to another provider
    breaker: Breaker

    if TYPE_CHECKING:

        def _launch(
            self, route_name: str, role: str, *, cause: str | None = None, delay_s: float = 0.0
        ) -> Live: ...

    def _throttle(self, provider: str, *, ok: bool) -> None:
        """
        Tell the provider's throttle how an attempt went (and say if that flips it).
        """
        throttle = self.s.throttle
        before = throttle.throttled(provider) if self.tel is not None else False
        if ok:
            throttle.on_success(provider)
        else:
            throttle.on_failure(provider)
        if self.tel is not None and throttle.throttled(provider) != before:
            kind = "throttle_released" if before else "throttle_engaged"
            self.tel.emit(kind, None, provider=provider, tokens=throttle.tokens(provider))

    def _refused(self, value: Any) -> InvalidOutput | None:
        """
        ``None`` if the step's validator accepts ``value``; else why not (a raise counts).
        """
        check = self.policy.validator
        if check is None:
            return None
        try:
            verdict = check(value)
        except Exception as error:  # a raising validator refuses the result
            why = f"the validator raised {type(error).__name__}: {error}"
            refused = InvalidOutput(f"step {self.step.name!r}: {why}", status="invalid")
            refused.__cause__ = error
            return refused
        if verdict is None or bool(verdict):
            return None
        return InvalidOutput(f"step {self.step.name!r}: the validator refused the result",
                             status="invalid")  # fmt: skip

    def failover(self, route: str) -> str | None:
        """
        Where a failure on ``route`` fails over to: the step's hedge route, or ``None``.

        Only a hedge route on another provider than ``route``'s, neither throttled, resting,
        nor with its breaker open.
        """
        other = self.step.hedge_route
        if other is None or other == route:
            return None
        routes, throttle = self.s.plan.routes, self.s.throttle
        provider = routes[other].provider
        if provider == routes[route].provider:
            return None
        at = now()
        if throttle.throttled(provider) or throttle.resting(provider, at):
            return None
        if self.breaker.state(provider, at) == OPEN:
            return None
        return other

    def hedge_target(self, first: str) -> str:
        """
        Where the hedge of a first attempt on route ``first`` goes.

        The step's hedge route, unless ``first`` is the hedge route (a first attempt rerouted
        there, or sent there by live routing): then the step's route, or, when that is
        ``first`` too, the first other candidate. While that one's provider is resting after a
        429 (or, for an attempt on the hedge route, is throttled by the 429s that made it
        rest), the hedge goes to ``first`` itself: a fresh attempt escapes a transient stall
        there too, and the provider under the storm gets no extra request. (Otherwise a
        throttled provider is refused, by `_grant`.)
        """
        step = self.step
        assert step.hedge_route is not None  # noqa: S101 - only asked for a step that hedges
        rerouted = first == step.hedge_route
        other = step.hedge_route
        if rerouted:
            others = [r for r in (step.route, *step.first_routes()) if r != first]
            other = others[0] if others else first
        routes, throttle = self.s.plan.routes, self.s.throttle
        provider = routes[other].provider
        at = now()
        if routes[first].provider != provider and (
            throttle.resting(provider, at)
            or (rerouted and throttle.throttled(provider))
            or self.breaker.state(provider, at) == OPEN
        ):
            return first
        return other

    def _grant(
        self,
        asker: Live,
        route: str,
        denied_key: str,
        action: str,
        *,
        at_once: bool = True,
        charge: bool = True,
        speculative: bool = False,
    ) -> bool:
        """
        Whether an extra attempt on ``route`` may start: its provider not throttled, the budget.

        An attempt that starts ``at_once`` also needs its provider not to be resting after a
        429; one that is not ``charge``d (a failover after a 429: the refused request did no
        work) needs no grant from the budget. A ``speculative`` one (an action at a cutoff)
        leaves the budget's recovery reserve to error retries, failovers and upgrades. A refusal
        is counted and written on ``asker``'s ledger line under ``denied_key``.
        """
        provider = self.s.plan.routes[route].provider
        why = None
        throttle = self.s.throttle
        if throttle.throttled(provider) or (at_once and throttle.resting(provider, now())):
            why = "throttle"
            self._denied(asker, denied_key, why, f"provider {provider} throttled")
        elif charge and not self.s.budget.try_extra(self.book.account, speculative=speculative):
            why = "budget"
            self._denied(asker, denied_key, why, "hedge budget spent")
        if self.tel is not None:
            budget = self.s.budget
            self.tel.emit(
                "extra_granted" if why is None else "extra_denied", asker, action=action,
                reason=why, route=route, firsts=budget.firsts, extras=budget.extras,
                throttle_tokens=self.s.throttle.tokens(provider),
            )  # fmt: skip
        return why is None

    def _retry_after_error(self, live: Live, status: str, retry_after: float | None) -> None:
        if self.retries_left <= 0 or not (self.step.idempotent or status == "rate_limited"):
            return
        route = live.attempt.route
        other = self.failover(route)
        limited = status == "rate_limited"
        if other is not None:  # another pool: no need to wait out this one's Retry-After
            route, retry_after = other, None
            live.extra["failover"] = other
        wait = (retry_after or 0.0) + self.s.jitter(self.policy.retry_jitter_s)
        left = self.deadline - now()
        expected = self._expected_s(route) if retry_after is not None else 0.0
        if retry_after is not None and not retry_after_fits(wait, left, expected_s=expected):
            live.extra["retry_skipped"] = (
                f"Retry-After {retry_after:.3f} s and the expected {expected:.3f} s "
                f"do not fit the {left:.3f} s left"
            )
            return
        if left - wait < NO_TIME_S or not self._grant(
            live,
            route,
            "retry_denied",
            "retry",
            at_once=retry_after is None,
            charge=other is None or not limited,
        ):
            return
        self.retries_left -= 1
        if self.tel is not None:
            self.tel.emit("retry_scheduled", live, reason=status, delay_s=wait)
        # the wait happens inside the retry's own task, so the deadline still cuts it
        self.chain = self._launch(route, "retry", cause="error", delay_s=wait)
        self.failed_over = other is not None

    def _expected_s(self, route: str) -> float:
        """
        Seconds an attempt of this step is expected to take.

        The plan's predicted median, else the median of the route's recent successes here,
        else 0.
        """
        predicted = self.step.predicted
        if predicted is not None and predicted.p50_s is not None:
            return float(predicted.p50_s)
        return self.s.typical_s(route)

    def _denied(self, asker: Live, key: str, why: str, skipped: str) -> None:
        asker.extra[key] = why
        if key == "hedge_denied":
            asker.extra["action_skipped"] = skipped
        self.book.denials[why] += 1
        self.s.denials[why] += 1
