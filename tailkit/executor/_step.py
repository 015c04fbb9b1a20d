"""
One logical call of a step under its plan: cutoffs, then the step's action, within the deadline.

How a step runs. The first attempt goes to the step's route (for a step that routes live, to
the candidate live routing chooses, with its cutoff: `tailkit.executor._live`). The runner
sleeps until the
earliest instant that matters -- the TTFT cutoff while no content token has come, the stall
cutoff after the last chunk, the total cutoff, the run deadline -- or until an attempt ends,
and then decides:

- an attempt with a good result wins (its validator agreeing); the others are cancelled, or,
  for a step whose losers may finish, left to run and written to the ledger as abandoned when
  they land (they are still cut at the run deadline);
- a result that fails validation does not win: the others race on, and the first such result
  escalates once to the upgrade route (or the step's own route);
- the first attempt, if the provider fails it before the step acted on a cutoff, is retried
  once, if the step is idempotent (a non-idempotent step is retried only after a 429, which
  means the call never ran): on the step's hedge route when that is on another provider (a
  failover, see `tailkit.executor._extras`), else on the same route. The retry waits a
  jittered moment (and the provider's Retry-After, honoured only if the step's expected
  duration still fits after it); a hedge, a retry or downgrade at the cutoff, an upgrade or an
  error retry that fails is not retried;
- until the step acts, the attempt it waits on is watched by its TTFT, stall and total
  cutoffs, each counted from that attempt's own start (after any retry wait): the first
  attempt, then the attempt that replaced it -- the retry or failover after an error, the
  upgrade after invalid output. The first cutoff that passes triggers the step's action,
  once per call (the attempts it starts race on unwatched, to a result or the deadline):
  ``hedge`` starts an attempt on the hedge route; ``retry`` and ``downgrade`` cancel and start
  again (same route, or the downgrade route); ``fail`` gives up; ``wait`` does nothing. A step
  that is not idempotent never re-sends (unless its `StepPolicy` opts in);
- every extra attempt -- an action at a cutoff, an error retry, an upgrade -- needs the target
  provider not to be throttled and the hedge budget to grant it. A refused one leaves the step
  as it is, and the ledger line of the attempt that asked says why (``attrs.hedge_denied``,
  ``attrs.retry_denied`` or ``attrs.upgrade_denied``: ``budget`` or ``throttle``). No extra
  attempt starts at the deadline;
- at the run deadline everything still running is cancelled and the step times out.

Cutoffs read streams only: the TTFT cutoff waits for the first *content* token and the stall
cutoff for the next one (role-only, keep-alive and empty chunks reset nothing). A non-streamed
attempt is judged by the total cutoff alone.

Errors that are not the provider's -- a ``KeyError`` in the caller's attempt code, say -- are
not retried and touch no throttle: the step records the attempt, cancels the others and raises
the error at once. A validator that raises counts as invalid output.

The step never returns or raises before the attempts it cancelled are torn down (their
connections closed, their ledger lines written); cancelling the task running it cancels every
attempt.

A provider failing repeatedly is taken out of first attempts by its circuit breaker
(`tailkit.executor._breaker`): while it is open, the step's first attempt starts on its hedge
route (when that is on another provider whose breaker is closed), and the ledger line says so
(``attrs.breaker``: ``open``, ``probe``, ``opened``, ``closed``; ``attrs.rerouted``).

This is the simulator's model, attempt for attempt (``tests/test_twin.py`` replays the
simulator's own draws through it): slot 0 is the first attempt, slot 1 the attempt a cutoff or
an error starts, slot 3 the cutoff's attempt when slot 1 went to an error's retry, slot 2 the
upgrade. The breaker is not simulated (see `tailkit.executor._breaker`). The stall cutoff
is, where the logged calls tell their stalls (placed half-way through the stream's normal
generation: `RouteSample.stall_cut`). One guard goes beyond what the simulator's draws can
see, as they have no chunk timings: only with ``StepPolicy(project_overrun=True)``, a
downgrade as soon as a stream's projected finish overruns the cutoff.

Every attempt gets the same run deadline and idempotency key; nothing starts a fresh clock.
Every attempt gets exactly one ledger line, whatever ends it; an attempt other than the first
says what started it (``attrs.started_by``: ``cutoff``, ``error`` or ``invalid``).
"""

from __future__ import annotations

import asyncio
import math

from collections.abc import Coroutine
from typing import Any

from tailkit.config import Step
from tailkit.deadline import now
from tailkit.deadline.lowlevel import executor_cuts, executor_cutting
from tailkit.errors import AllAttemptsFailed, StepTimeout
from tailkit.executor._alarm import Entry
from tailkit.executor._attempt import Live, record_of, start
from tailkit.executor._breaker import BREAKER_FAILURES, CLOSED
from tailkit.executor._extras import NO_TIME_S, ExtraAttempts
from tailkit.executor._live import Decision
from tailkit.executor._scale import profile_record
from tailkit.executor._shared import DEFAULT_POLICY, RunBook, Shared
from tailkit.executor._telemetry import StepTelemetry
from tailkit.executor._types import Attempt, AttemptFn, classify, provider_failure


_MIN_PROJECTION_TOKENS = 8  # tokens before a stream's rate is trusted for a projection
_PROVIDER_FAILURES = ("error", "rate_limited", "timeout")
_ACTION_ROLES = ("hedge", "retry", "downgrade")  # actions that start an extra attempt
_VERDICTS = ("ok", "invalid", *BREAKER_FAILURES)  # statuses that tell the breaker something
TEARDOWN_S = 2.0  # how long a step waits for the attempts it cancelled to finish tearing down


class StepRun(ExtraAttempts):
    """
    One logical call of one step (see the module docstring).
    """

    __slots__ = (
        "_alarm", "_projects", "_waker", "acted", "book", "choice", "cut_tasks", "deadline",
        "enforce", "errors", "fired", "fn", "head", "inputs", "key", "live_cut", "lives", "loop",
        "policy", "reserve_s", "run_id", "running", "s", "stall_s", "start", "step", "tel",
        "upgraded", "won",
    )  # fmt: skip

    def __init__(
        self,
        shared: Shared,
        step: Step,
        fn: AttemptFn,
        *,
        key: str,
        deadline: float,
        run_id: str | None,
        inputs: dict[str, Any],
        reserve_s: float,
        book: RunBook,
        enforce: bool = True,
    ) -> None:
        self.s, self.step, self.fn, self.book = shared, step, fn, book
        self.key, self.deadline, self.run_id, self.inputs = key, deadline, run_id, inputs
        # A workflow enforces its deadline once for all its steps (one timer per run, not
        # one per step); a step run on its own enforces it here.
        self.enforce = enforce
        self.policy = shared.policies.get(step.name) or DEFAULT_POLICY
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time()
        self.lives: list[Live] = []
        self.running: list[Live] = []
        # made at the first error, the first cut: most calls have neither (and at 10,000 runs
        # in flight, every object a step holds is one more for each garbage collection)
        self.errors: list[BaseException] | None = None
        self.cut_tasks: list[asyncio.Task[Any]] | None = None  # cancelled, torn down before we end
        self._waker: asyncio.Future[None] | None = None  # what `_run` sleeps on (`_arm`)
        self._alarm: Entry | None = None  # its instant on the timer heap
        self.tel: StepTelemetry | None = None  # when the executor is watched
        self.fired = self.upgraded = self.acted = self.won = False
        self.chain: Live | None = None  # the attempt whose failure is retried at once
        self.head: Live | None = None  # the attempt watched for cutoffs until the step acts
        self.retries_left = self.policy.error_retries
        self.failed_over = False
        self.breaker = shared.breaker
        self.reserve_s = reserve_s
        self.stall_s = step.stall_cutoff_s if step.stall_cutoff_s is not None else math.inf
        self.choice: Decision | None = None  # live routing's decision for this call
        self.live_cut: float | None = None  # its cutoff on the signal clock, when it sets one
        self._projects = (
            self.policy.project_overrun
            and step.on_cutoff == "downgrade"
            and step.expected_tokens.output is not None
        )

    def _instants(self, head: Live) -> tuple[float, float]:
        """
        The instants of ``head``'s TTFT and total cutoffs, counted from its own start.

        The cutoff on the step's signal clock is tightened to ``deadline - reserve``, so the
        steps still waiting on this one fit (the simulator's `cut_at`); the other clock's acts
        as set. A retry that has not started yet (its wait) has none.
        """
        if head.pending:
            return math.inf, math.inf
        step, started = self.step, head.started
        room = math.inf
        if step.on_cutoff != "wait":
            room = max(self.deadline - self.reserve_s - started, 0.0)
        ttft = math.inf if step.ttft_cutoff_s is None else step.ttft_cutoff_s
        total = math.inf if step.cutoff_s is None else step.cutoff_s
        if self.live_cut is not None:  # live routing's cutoff replaces the signal clock's
            if step.signal == "ttft":
                ttft = self.live_cut
            else:
                total = self.live_cut
        if step.signal == "ttft" and step.ttft_cutoff_s is not None:
            ttft = min(ttft, room)
        if step.signal == "total" and step.cutoff_s is not None:
            total = min(total, room)
        return started + ttft, started + total

    def _watch_head(self, live: Live) -> None:
        """
        Watch ``live`` for the step's cutoffs from now on (it replaced the attempt watched).
        """
        self.head = live
        if (
            math.isfinite(self.stall_s)
            or self._projects
            or (self.step.ttft_cutoff_s is not None and (live.pending or not live.streamed))
        ):
            live.watch_chunks = True

    def _launch(
        self, route_name: str, role: str, *, cause: str | None = None, delay_s: float = 0.0
    ) -> Live:
        route = self.s.plan.routes[route_name]
        policy = self.policy
        attempt = Attempt(
            self.step.name, route_name, route.provider, route.model, len(self.lives), role,
            self.key, self.deadline, self.run_id, self.inputs, policy.max_stream_bytes,
            policy.max_stream_chunks,
        )  # fmt: skip
        # its span starts before the attempt function runs, so it is current there
        begin = None if self.tel is None else self.tel.attempt_started
        live = start(attempt, self.fn, self.loop, delay_s=delay_s, started_by=cause, begin=begin)
        self.lives.append(live)
        self.running.append(live)
        return live

    def _write(self, live: Live, status: str, at: float, **kw: Any) -> None:
        live.recorded = True
        if self.choice is not None and live is self.lives[0] and not kw.get("abandoned"):
            self._observe(live, status, at, censored=kw.get("censored", False))
        self._tell_breaker(live, status, at, cut=kw.get("censored", False))
        ledger = self.s.ledger
        if not ledger.sinks and self.tel is None:  # nobody reads the line: count it only
            ledger.count(status, abandoned=kw.get("abandoned", False),
                         winner=kw.get("winner", False))  # fmt: skip
            return
        record = record_of(live, status=status, at=at, **kw)
        if self.s.time_scale == 1.0:
            self.s.ledger.write(record)
        else:  # a rehearsal: its ledger speaks plan seconds, its events and spans real ones
            self.s.ledger.write(profile_record(record, self.s.time_scale, self.s.origin))
        if self.tel is not None:
            self.tel.attempt_ended(live, record, kw.get("error"))

    def _tell_breaker(self, live: Live, status: str, at: float, *, cut: bool) -> None:
        """
        Tell the provider's breaker how an attempt ended; a flip goes on its ledger line.
        """
        provider = live.attempt.provider
        holder = self if live is self.lives[0] else live  # the first attempt's probe: this run
        if cut or live.extra.get("caller_error") or status not in _VERDICTS:
            self.breaker.release(provider, holder)  # no verdict on the provider
            return
        failed = status in BREAKER_FAILURES  # an invalid answer is still an answer
        flip = self.breaker.record(provider, at, failed=failed, attempt=holder)
        if flip is None:
            return
        live.extra["breaker"] = (
            flip if flip == "closed" else f"opened: {self.breaker.why(provider)}"
        )
        if self.tel is not None:
            self.tel.emit(f"breaker_{flip}", live, reason=self.breaker.why(provider))

    def _choose(self) -> str:
        """
        The route live routing sends the first attempt to (the step's route when it is fixed).

        Sets the call's `Decision`, and its live cutoff when the plan sets a cutoff on the
        step's signal clock (see `tailkit.executor._live`).
        """
        step, router = self.step, self.s.router
        live = step.live
        if live is None or router is None:
            return step.route
        choice = self.choice = router.decide(step, live)
        if (step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s) is not None:
            self.live_cut = choice.cutoff_s
        return choice.route

    def _note_choice(self, first: Live) -> None:
        """
        The live decision on the first attempt's ledger line, in plan seconds.
        """
        choice = self.choice
        if choice is None:
            return
        scale = self.s.time_scale
        extra = first.extra
        extra["live"] = choice.why
        extra["live_value_s"] = choice.value_s / scale if math.isfinite(choice.value_s) else None
        extra["live_calls"] = choice.calls
        if self.live_cut is not None:
            extra["live_cutoff_s"] = self.live_cut / scale

    def _observe(self, first: Live, status: str, at: float, *, censored: bool) -> None:
        """
        What a live step's first attempt told of its route (see `tailkit.executor._live`).

        On the total clock: its age when it completed with a result (``ok`` or ``invalid``),
        ``math.inf`` when it was cut, cancelled, beaten or ran out of deadline first; on the
        TTFT clock: its time to first token, else ``math.inf`` when cut. An attempt whose
        action at the cutoff was denied (the budget spent, the provider throttled) counts as
        cut too: it outlived its cutoff only for that, and a window that kept its value would
        read a route that slowed down as merely slower, never as cut (the simulator, which
        denies nothing, cuts or races it). A provider's error tells nothing (nor does a
        stream that ended without a content token).
        """
        step, router = self.step, self.s.router
        route = first.attempt.route
        if step.live is None or router is None or route not in step.first_routes():
            return
        if step.signal == "ttft":
            if first.first_token is not None:
                value = first.first_token - first.started
            elif censored:
                value = math.inf
            else:
                return
        elif censored:
            value = math.inf
        elif status in ("ok", "invalid"):
            value = first.age(first.ended if first.ended is not None else at)
        else:
            return
        if "hedge_denied" in first.extra:  # its action was denied: it was due to be cut
            value = math.inf
        router.observe(step.name, route, value, step.live.window)

    def _first_route(self, route: str) -> tuple[str, str | None, str | None]:
        """
        Where the first attempt goes: (route, why it was rerouted, its breaker note).

        ``route`` (the step's route, or live routing's choice), unless its provider rests
        after a 429 (see `ProviderThrottle.admits`) or its breaker is open (or half-open with
        its probe out): then the hedge route, when it is on another provider that may take it
        (`failover`).
        """
        provider, throttle = self.s.plan.routes[route].provider, self.s.throttle
        at = self.start
        # a probe's answer is due within twice the expected duration
        if not (throttle.calm(provider) or throttle.admits(
            provider, at, hold_s=2.0 * self._expected_s(route)
        )):  # fmt: skip
            other = self.failover(route)
            if other is not None:
                return other, f"{route} resting after a 429", None
        verdict = self.breaker.admits(provider, at, self)
        if verdict == CLOSED:
            return route, None, None
        if verdict == "probe":
            return route, None, "probe"
        other = self.failover(route)
        if other is None:  # nowhere else to go: the call still goes, and its outcome counts
            return route, None, "open: no other route"
        why = f"{route}: provider {provider}'s breaker is open ({self.breaker.why(provider)})"
        return other, why, "open"

    def run(self) -> Coroutine[Any, Any, Any]:
        """
        The call, to await: the winning result; raises `StepTimeout` or `AllAttemptsFailed`.

        A step that enforces its deadline says so to any deadline scope around it, so that the
        scope lets the step's own `StepTimeout` (which names the step) through. A step that
        neither enforces a deadline nor is watched (a workflow's, most often) is one coroutine,
        not two: one object fewer per running step for every garbage collection to walk.
        """
        if self.s.observer.active or (self.enforce and not math.isinf(self.deadline)):
            return self._run_watched()
        return self._run()

    async def _run_watched(self) -> Any:
        """
        `_run` inside the step's deadline mark and its telemetry.
        """
        observer = self.s.observer
        if observer.active:
            self.tel = StepTelemetry(
                observer, self.step.name, self.run_id, self.deadline, self.s.plan.workflow
            )
        try:
            if not self.enforce or math.isinf(self.deadline):
                value = await self._run()
            else:
                with executor_cuts(self.deadline):
                    value = await self._run()
        except BaseException as error:
            if self.tel is not None:
                self.tel.ended(_status_of(error), len(self.lives), error)
            raise
        if self.tel is not None:
            self.tel.ended("ok", len(self.lives))
        return value

    async def _run(self) -> Any:
        route, rerouted, note = self._first_route(self._choose())
        first = self.chain = self._launch(route, "primary")
        self._note_choice(first)
        if note is not None:
            first.extra["breaker"] = note
        if rerouted is not None:
            first.extra["rerouted"] = rerouted
        self._watch_head(first)
        try:
            while self.running:
                waker = self._arm()
                try:
                    await waker
                finally:
                    done = self._disarm()
                winner = self._settle(done)
                if winner is not None:
                    self.won = True
                    return unwrap(winner)
                if not self.running:
                    break
                self._watch()
        finally:
            if self.enforce and self.loop.time() >= self.deadline:
                executor_cutting()  # a scope due now waits for our StepTimeout and teardown
            if self.running:
                # losers may finish only beside a winner: a caller that gave up, a step that
                # failed or timed out, cuts everything it started
                self._cut_all("timeout" if now() >= self.deadline else "cancelled",
                              losers=self.won)  # fmt: skip
            if self.cut_tasks:
                await self._teardown()
        raise self._all_failed()

    async def _teardown(self) -> None:
        """
        Wait (up to `TEARDOWN_S`) until every attempt cancelled here has finished.

        A cancellation that arrives meanwhile is held until they have, then re-raised: the
        caller never sees the step end while its attempts still hold connections.
        """
        tasks = [t for t in self.cut_tasks or () if not t.done()]
        self.cut_tasks = None
        interrupted = False
        give_up = self.loop.time() + TEARDOWN_S
        while tasks and self.loop.time() < give_up:
            try:
                await asyncio.wait(tasks, timeout=give_up - self.loop.time())
            except asyncio.CancelledError:
                interrupted = True
            tasks = [t for t in tasks if not t.done()]
        if interrupted:
            raise asyncio.CancelledError

    def _arm(self) -> asyncio.Future[None]:
        """
        What `_run` sleeps on (then `_disarm`): an attempt's end, an instant, a chunk.

        It wakes when an attempt ends, at the next instant that matters, or (when watched) on
        a chunk.

        One future, woken by the attempts' ends (`ended`, or a done callback), the executor's
        shared timer heap (`Alarms`: no loop timer of its own) and the watched attempt's
        chunks (and the end of its retry wait): cheaper than ``asyncio.wait``, which builds a
        set, a counter and a timeout per call. Not a coroutine of its own: one object fewer
        per wait.
        """
        until = self.deadline if self.enforce else math.inf
        first = self.head
        watching = first is not None and not self.fired and first in self.running
        if watching:
            assert first is not None  # noqa: S101 - watching implies a head
            ttft_at, total_at = self._instants(first)
            until = min(until, total_at)
            if first.first_token is None and first.streamed:
                until = min(until, ttft_at)
            elif first.last_chunk is not None:
                until = min(until, first.last_chunk + self.stall_s)
        waker = self._waker = self.loop.create_future()
        wake = self._wake  # one bound method for every registration below
        alarms = self.s.alarms_on(self.loop)
        for live in self.running:  # nothing but this step changes the list, and it sleeps
            task = live.task
            if task is not None:
                # the callback's context does not matter (it only wakes this task, in its
                # own): one per loop instead of a copy of the current one per registration
                task.add_done_callback(wake, context=alarms.context)
                live.on_end = wake  # woken a loop turn sooner (see `ended`)
        if watching and first is not None and (first.pending or (
            first.watch_chunks and (first.first_token is None or self._projects)
        )):  # fmt: skip
            # wake on chunks: the first content token starts the stall timer, and every chunk
            # updates a downgrade projection; a retry that starts starts its cutoffs' clocks
            first.wake = wake
        if until != math.inf:
            self._alarm = alarms.add(until, wake)
        return waker

    def _disarm(self) -> list[Live]:
        """
        Undo `_arm`'s registrations; the attempts that have ended (in start order).
        """
        wake = self._wake
        self._waker = None
        if self.head is not None:
            self.head.wake = None
        if self._alarm is not None:
            self.s.alarms_on(self.loop).cancel(self._alarm)
            self._alarm = None
        done = []
        for live in self.running:
            live.on_end = None
            task = live.task
            if task is not None:
                task.remove_done_callback(wake)
                if task.done():
                    done.append(live)
        return done

    def _wake(self, _: object = None) -> None:
        """
        Wake the step sleeping on `_arm`'s future (an attempt ended, a chunk, an instant).
        """
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def _settle(self, done: list[Live]) -> Any:
        """
        Handle finished attempts (in start order); return a winning result or ``None``.

        Raises:
            Exception: An attempt raised an error that is not the provider's (propagated as is).
        """
        for live in done:
            self.running.remove(live)
            assert live.task is not None  # noqa: S101 - started with a task
            at = self.loop.time()
            error = live.task.exception() if not live.task.cancelled() else asyncio.CancelledError()
            if error is None:
                value = live.task.result()
                refused = self._refused(value)
                if refused is None:
                    self._write(live, "ok", at, winner=True)
                    self._throttle(live.attempt.provider, ok=True)
                    self.s.ok(live.attempt, at - live.started)
                    return _Won(value) if value is None else value
                self._failed(refused)
                if not self.upgraded:
                    self.upgraded = True
                    route = self.step.upgrade_route or self.step.route
                    if self._grant(live, route, "upgrade_denied", "upgrade"):
                        upgrade = self._launch(route, "upgrade", cause="invalid")
                        if not self.fired and live is self.head:
                            self._watch_head(upgrade)  # it re-does the call: watched in its place
                self._write(live, "invalid", at, error=refused)
                continue
            if not provider_failure(error, self.policy.provider_errors):
                # the caller's own bug: not retried, no throttle touched, raised at once
                live.extra["caller_error"] = True
                self._write(live, "error", at, error=error)
                self._cut_all("cancelled")
                raise error
            status, http, retry_after = classify(error)
            self._failed(error)
            if status in _PROVIDER_FAILURES:
                self._throttle(live.attempt.provider, ok=False)
            if status == "rate_limited" and retry_after is not None:
                self.s.throttle.rest(live.attempt.provider, at, retry_after)
            if live is self.chain and not self.acted:
                self._retry_after_error(live, status, retry_after)
                if self.chain is not live and not self.fired:
                    self._watch_head(self.chain)  # the retry (or failover) is watched in its place
            self._write(live, status, at, error=error, http_status=http)
        return None

    def _watch(self) -> None:
        first = self.head
        at = self.loop.time()
        if at >= self.deadline:
            spent = at - self.start
            self._cut_all("timeout")
            msg = (f"step {self.step.name!r} ran out of run deadline after {spent:.3f} s "
                   f"({len(self.lives)} attempt(s))")  # fmt: skip
            raise StepTimeout(msg, step=self.step.name, spent_s=spent, cutoff_s=None)
        if self.fired or first is None or first not in self.running or first.pending:
            return
        why = self._why(first, at)
        if why is not None:
            self.fired = True
            first.extra["cutoff"] = why
            if self.tel is not None:
                self.tel.emit(
                    "cutoff_fired", first, cutoff=why, action=self.step.on_cutoff,
                    age_s=first.age(at),
                )  # fmt: skip
            self._act(first, why, at)

    def _why(self, first: Live, at: float) -> str | None:
        ttft_at, total_at = self._instants(first)
        if at >= total_at:
            return "total"
        if first.first_token is None and first.streamed and at >= ttft_at:
            return "ttft"
        if first.last_chunk is not None and at >= first.last_chunk + self.stall_s:
            return "stall"
        if self.step.on_cutoff == "downgrade" and self._overruns(first):
            return "projected"
        return None

    def _overruns(self, first: Live) -> bool:
        expected = self.step.expected_tokens.output
        if expected is None or first.first_token is None or first.last_chunk is None:
            return False
        if first.tokens < _MIN_PROJECTION_TOKENS or first.tokens >= expected:
            return False
        elapsed = first.last_chunk - first.first_token
        if elapsed <= 0.0:
            return False
        rate = (first.tokens - 1) / elapsed
        finish = first.last_chunk + (expected - first.tokens) / rate
        return finish > min(self._instants(first)[1], self.deadline)

    def _act(self, first: Live, why: str, at: float) -> None:
        action, step = self.step.on_cutoff, self.step
        if action == "wait":
            return
        if action == "fail":
            spent = at - self.start
            self._cut_all("cancelled")
            msg = f"step {step.name!r} gave up at its {why} cutoff after {spent:.3f} s"
            msg += " (on_cutoff: fail)"
            raise StepTimeout(msg, step=step.name, spent_s=spent, cutoff_s=spent)
        if action not in _ACTION_ROLES:
            return
        routes = {"hedge": step.hedge_route, "retry": first.attempt.route,
                  "downgrade": step.downgrade_route}  # fmt: skip
        route = routes[action]
        if action == "hedge" and route is not None:
            route = self.hedge_target(first.attempt.route)
        if route is None or not (step.idempotent or self.policy.resend_non_idempotent):
            first.extra["action_skipped"] = "no route" if route is None else "not idempotent"
            return
        if self.deadline - at < NO_TIME_S:
            first.extra["action_skipped"] = "no time left"
            return
        if not self._grant(first, route, "hedge_denied", action, speculative=True):
            return
        self.acted = True
        if action != "hedge":
            self._cut(first, "cancelled", at)
        self._launch(route, action, cause="cutoff")

    def _cut(self, live: Live, status: str, at: float) -> None:
        if live.task is not None and not live.task.done():
            live.task.cancel()
            if self.cut_tasks is None:
                self.cut_tasks = []
            self.cut_tasks.append(live.task)
        elif live.task is not None and not live.task.cancelled():
            live.task.exception()  # it ended as it was cut: its error is read, never logged
        if live in self.running:
            self.running.remove(live)
        if not live.recorded:
            self._write(live, status, at, censored=True)

    def _cut_all(self, status: str, *, losers: bool = False) -> None:
        """
        Cut every attempt still running; beside a winner (``losers``) they may finish instead.
        """
        at = now()
        for live in list(self.running):
            finish = losers and self.policy.losers == "finish" and status == "cancelled"
            if finish and live.task is not None:
                self._abandon(live)
            else:
                self._cut(live, status, at)

    def _abandon(self, live: Live) -> None:
        """
        Let a loser finish; its line is written, as abandoned, when it lands (or is cut).
        """
        self.running.remove(live)
        if self.choice is not None and live is self.lives[0]:
            self._observe(live, "cancelled", now(), censored=True)  # it lost the race
        task = live.task
        assert task is not None  # noqa: S101 - only called with a task
        self.s.abandoned.add(task)
        task.add_done_callback(self.s.abandoned.discard)
        if not math.isinf(self.deadline):
            asyncio.get_running_loop().call_at(self.deadline, task.cancel)

        def landed(done: asyncio.Task[Any]) -> None:
            at = now()
            if done.cancelled():
                self._write(live, "timeout", at, abandoned=True, censored=True)
                return
            error = done.exception()
            status = "ok" if error is None else classify(error)[0]
            self._write(live, status, at, error=error, abandoned=True)

        task.add_done_callback(landed)

    def _failed(self, error: BaseException) -> None:
        if self.errors is None:
            self.errors = []
        self.errors.append(error)

    def _all_failed(self) -> AllAttemptsFailed:
        spent = now() - self.start
        failures = self.errors or []
        causes = "; ".join(f"{type(e).__name__}: {e}" for e in failures)
        msg = f"step {self.step.name!r}: all {len(self.lives)} attempt(s) failed in {spent:.3f} s"
        msg += f": {causes}"
        error = AllAttemptsFailed(msg, step=self.step.name, spent_s=spent,
                                  exceptions=tuple(failures))  # fmt: skip
        errors = [e for e in failures if isinstance(e, Exception)]
        if errors:
            error.__cause__ = ExceptionGroup(f"attempts of step {self.step.name!r}", errors)
        return error


def _status_of(error: BaseException) -> str:
    """
    How a step call that raised ended, for its span: timeout, failed, cancelled or error.
    """
    if isinstance(error, StepTimeout):
        return "timeout"
    if isinstance(error, AllAttemptsFailed):
        return "failed"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "error"


class _Won:
    """
    Strictly private: wraps a winning ``None`` so ``None`` still means "no winner yet".
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def unwrap(result: Any) -> Any:
    """
    The step's value (see `_Won`).
    """
    return result.value if isinstance(result, _Won) else result
