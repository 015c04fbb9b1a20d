"""
One step call's telemetry: its span, its attempts' spans, and the events of its decisions.

The step runner keeps a `StepTelemetry` only when its executor's `Observer` is active (a hook
or tracing), so an executor that nobody watches builds no events and no spans.
"""

from __future__ import annotations

import time

from typing import Any

from tailkit.deadline import now
from tailkit.executor._attempt import Live
from tailkit.executor._events import NO_SPAN, Event, Observer, SpanHandle, deadline_wall
from tailkit.ledger import AttemptRecord


class StepTelemetry:
    """
    The span and events of one logical step call.

    Args:
        observer: The executor's observer (active).
        step: The step's name.
        run_id: The run.
        deadline: The run deadline on the loop clock.
        workflow: The plan's workflow name.
    """

    __slots__ = ("deadline", "observer", "run_id", "span", "started", "step", "wall")

    def __init__(
        self, observer: Observer, step: str, run_id: str | None, deadline: float, workflow: str
    ) -> None:
        self.observer, self.step, self.run_id, self.deadline = observer, step, run_id, deadline
        self.started = now()
        self.wall = deadline_wall(deadline)
        self.span: SpanHandle = observer.step_span(step, run_id, self.wall, workflow)
        left = None if self.wall is None else max(self.wall - time.time(), 0.0)
        self.emit("step_started", None, workflow=workflow, deadline_remaining_s=left)

    def emit(self, kind: str, live: Live | None, **detail: Any) -> None:
        """
        Hand an event about the step (or one of its attempts, ``live``) to the observer.
        """
        attempt = None if live is None else live.attempt
        event = Event(
            kind,
            step=self.step,
            run_id=self.run_id,
            attempt=None if attempt is None else attempt.attempt,
            route=None if attempt is None else attempt.route,
            provider=None if attempt is None else attempt.provider,
            detail=detail,
        )
        span = self.span if live is None or live.span is None else live.span
        self.observer.emit(event, span=span)

    def attempt_started(self, live: Live) -> None:
        """
        An attempt started: its span (a child of the step's) and an event.
        """
        a = live.attempt
        live.span = self.observer.attempt_span(
            self.span, step=a.step, attempt=a.attempt, role=a.role, route=a.route,
            provider=a.provider, model=a.model, idempotency_key=a.idempotency_key,
            deadline_wall=self.wall, run_id=a.run_id,
        )  # fmt: skip
        self.emit(
            "attempt_started", live, role=a.role, model=a.model,
            started_by=live.extra.get("started_by"),
        )  # fmt: skip

    def attempt_ended(self, live: Live, record: AttemptRecord, error: BaseException | None) -> None:
        """
        An attempt's ledger line was written: end its span, and say so.
        """
        if live.span is not None:
            live.span.end(
                record.status, error=error,
                attrs={"ttft_s": record.ttft_s, "output_tokens": record.output_tokens,
                       "input_tokens": record.input_tokens, "http_status": record.http_status},
            )  # fmt: skip
        self.emit(
            "attempt_ended", live, status=record.status, winner=record.winner,
            censored=record.censored_at_s is not None, abandoned=record.abandoned,
            ttft_s=record.ttft_s, total_s=record.total_s,
        )  # fmt: skip

    def ended(self, status: str, attempts: int, error: BaseException | None = None) -> None:
        """
        The step call returned (``ok``) or raised: end its span, and say so.
        """
        elapsed = now() - self.started
        self.emit("step_ended", None, status=status, attempts=attempts, elapsed_s=elapsed)
        self.span.end(status, error=error)


__all__ = ["NO_SPAN", "StepTelemetry"]
