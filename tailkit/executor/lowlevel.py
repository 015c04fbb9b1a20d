"""
The executor's building blocks, for adapters, extensions and tests; they may change.

An adapter maps its client's exceptions to attempt statuses with `classify`,
`provider_failure` and `retry_after_from` (as `tailkit.adapters` does); `read_chunk` is how
the executor reads what an attempt streams (`UnreadableChunk` when it cannot); the rest are
the pieces `Executor` is made of: the hedge budget's per-run account, the event kinds an
`Observer` hook may receive, the validator's refusal, the Retry-After rule, live routing's
state and decision (`LiveRouter`, `Decision`, and `order_index`, the order statistic both it
and the simulator take) and the workflow runner behind `Executor.run`. Code written against
`tailkit.executor` needs none of them.
"""

from tailkit.executor._budget import BudgetAccount, retry_after_fits
from tailkit.executor._chunks import UnreadableChunk, read_chunk
from tailkit.executor._events import EVENT_KINDS
from tailkit.executor._live import Decision, LiveRouter, order_index
from tailkit.executor._shared import InvalidOutput
from tailkit.executor._types import classify, provider_failure, retry_after_from
from tailkit.executor._workflow import run_workflow


__all__ = [
    "EVENT_KINDS",
    "BudgetAccount",
    "Decision",
    "InvalidOutput",
    "LiveRouter",
    "UnreadableChunk",
    "classify",
    "order_index",
    "provider_failure",
    "read_chunk",
    "retry_after_fits",
    "retry_after_from",
    "run_workflow",
]
