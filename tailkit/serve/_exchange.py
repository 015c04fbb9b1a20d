"""
One chat request as the server tracks it, and its access-log record (the call record).
"""

from __future__ import annotations

import contextlib
import math

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tailkit.ledger import AttemptRecord
from tailkit.serve._api import Api


__all__ = ["PROVIDER", "Exchange"]

PROVIDER = "tailkit-serve"  # the access log's provider column


@dataclass(slots=True)
class Exchange:
    """
    One chat (or Messages) request on its way to its access-log record (instants on the loop clock).

    Args:
        call_id: The server's request id.
        received: When the request was read whole.
        started_at: The same instant on the wall clock.
        wall: The same instant, epoch seconds.
        deadline: The request's deadline (``math.inf``: none).
        key: Its ``Idempotency-Key`` (``""``: none).
        attempt: How many times the key arrived before.
        api: The API it came in by, which renders its answer and its errors.
        model: The requested model (``""`` until the body is read).
        stream: Whether it asked for a stream.
        prompt_tokens: Words in its messages, ``None`` until the body is read.
        fault: The fault it was given, if any.
        stalled: Whether it drew a stall (``None``: it drew nothing).
        http_status: The status line sent, ``None`` before any.
        first_content: When the first content token was written (streams only).
        tokens_sent: Content tokens written so far (streams).
        keep_alive: Whether the connection can take another request afterwards.
        client_gone: The client closed the connection, or a write to it failed.
        recorded: Its record is written (there is exactly one).
        attrs: More access-log attributes.
    """

    call_id: str
    received: float
    started_at: datetime
    wall: float
    deadline: float
    key: str
    attempt: int
    api: Api
    model: str = ""
    stream: bool = False
    prompt_tokens: int | None = None
    fault: str | None = None
    stalled: bool | None = None
    http_status: int | None = None
    first_content: float | None = None
    tokens_sent: int = 0
    keep_alive: bool = True
    client_gone: bool = False
    recorded: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)

    def record(
        self,
        *,
        status: str,
        error_type: str | None,
        ended: float | None = None,
        cut: float | None = None,
        tokens: int | None = None,
    ) -> AttemptRecord:
        """
        The request's access-log record, in real seconds from its receipt.

        Args:
            status: Its call-record status.
            error_type: What went wrong, ``None`` for a success.
            ended: When it finished (loop clock); ``None``: it did not.
            cut: When it was cut (loop clock): deadline, client gone, server stopped.
            tokens: Completion tokens of a finished answer.
        """
        remaining_s = self.deadline - self.received if math.isfinite(self.deadline) else None
        deadline_at = None
        if remaining_s is not None:
            # The server clamps deadlines; a date past what datetime holds is left out anyway.
            with contextlib.suppress(OverflowError, OSError, ValueError):
                deadline_at = datetime.fromtimestamp(self.wall + remaining_s, UTC)
        attrs = {
            "fault": self.fault,
            "remaining_s_at_receive": remaining_s,
            "client_gone": self.client_gone,
            "stream": self.stream,
            "stalled": self.stalled,
            "tokens_sent": self.tokens_sent,
            **self.attrs,
        }
        return AttemptRecord(
            call_id=self.call_id,
            run_id=None,
            step=None,
            attempt=self.attempt,
            role="primary" if self.attempt == 0 else "retry",  # a hedge looks like a retry here
            provider=PROVIDER,
            model=self.model,
            started_at=self.started_at,
            ttft_s=None if self.first_content is None else self.first_content - self.received,
            total_s=None if ended is None else ended - self.received,
            input_tokens=self.prompt_tokens,
            output_tokens=tokens,
            status=status,
            error_type=error_type,
            http_status=self.http_status,
            censored_at_s=None if cut is None else cut - self.received,
            idempotency_key=self.key,
            deadline_at=deadline_at,
            attrs=attrs,
        )
