"""
The embedded executor: deadlines, cutoffs, hedging, budgets, the ledger and its telemetry.

Standard library only (plus `tailkit.config` and `tailkit.errors`): this is what runs in
production, next to the user's own code. `Executor` holds a plan, its hedge budget, the
per-provider throttle, the ledger and an `Observer` (event hook, OpenTelemetry spans when
installed); `Executor.run_step` runs one logical call of a step, `Executor.run` a whole
workflow under one deadline, `Executor.replace_plan` swaps in a recalibrated plan.
"""

from tailkit.errors import AllAttemptsFailed as AllAttemptsFailed
from tailkit.errors import StepTimeout as StepTimeout
from tailkit.executor._breaker import Breaker as Breaker
from tailkit.executor._budget import BudgetAccount as BudgetAccount
from tailkit.executor._budget import HedgeBudget as HedgeBudget
from tailkit.executor._budget import ProviderThrottle as ProviderThrottle
from tailkit.executor._budget import retry_after_fits as retry_after_fits
from tailkit.executor._deadline import DEADLINE_HEADER as DEADLINE_HEADER
from tailkit.executor._deadline import REMAINING_HEADER as REMAINING_HEADER
from tailkit.executor._deadline import DeadlineScope as DeadlineScope
from tailkit.executor._deadline import carry_deadline_after as carry_deadline_after
from tailkit.executor._deadline import carry_deadline_at as carry_deadline_at
from tailkit.executor._deadline import current_deadline as current_deadline
from tailkit.executor._deadline import deadline_after as deadline_after
from tailkit.executor._deadline import deadline_at as deadline_at
from tailkit.executor._deadline import deadline_at_wall as deadline_at_wall
from tailkit.executor._deadline import deadline_from_headers as deadline_from_headers
from tailkit.executor._deadline import deadline_headers as deadline_headers
from tailkit.executor._deadline import fail_after as fail_after
from tailkit.executor._deadline import fail_at as fail_at
from tailkit.executor._deadline import move_on_after as move_on_after
from tailkit.executor._deadline import move_on_at as move_on_at
from tailkit.executor._deadline import now as now
from tailkit.executor._deadline import remaining as remaining
from tailkit.executor._events import EVENT_KINDS as EVENT_KINDS
from tailkit.executor._events import Event as Event
from tailkit.executor._events import Observer as Observer
from tailkit.executor._events import trace_headers as trace_headers
from tailkit.executor._executor import Executor as Executor
from tailkit.executor._executor import idempotency_key as idempotency_key
from tailkit.executor._executor import new_run_id as new_run_id
from tailkit.executor._executor import run_step as run_step
from tailkit.executor._ledger import AttemptRecord as AttemptRecord
from tailkit.executor._ledger import CallbackSink as CallbackSink
from tailkit.executor._ledger import JsonlSink as JsonlSink
from tailkit.executor._ledger import Ledger as Ledger
from tailkit.executor._ledger import MemorySink as MemorySink
from tailkit.executor._shared import InvalidOutput as InvalidOutput
from tailkit.executor._shared import StepPolicy as StepPolicy
from tailkit.executor._types import FINAL as FINAL
from tailkit.executor._types import Attempt as Attempt
from tailkit.executor._types import AttemptError as AttemptError
from tailkit.executor._types import AttemptFn as AttemptFn
from tailkit.executor._types import Chunk as Chunk
from tailkit.executor._types import StreamResult as StreamResult
from tailkit.executor._types import TruncatedStream as TruncatedStream
from tailkit.executor._workflow import RunResult as RunResult
from tailkit.executor._workflow import run_workflow as run_workflow


__all__ = [
    "DEADLINE_HEADER",
    "EVENT_KINDS",
    "FINAL",
    "REMAINING_HEADER",
    "AllAttemptsFailed",
    "Attempt",
    "AttemptError",
    "AttemptFn",
    "AttemptRecord",
    "Breaker",
    "BudgetAccount",
    "CallbackSink",
    "Chunk",
    "DeadlineScope",
    "Event",
    "Executor",
    "HedgeBudget",
    "InvalidOutput",
    "JsonlSink",
    "Ledger",
    "MemorySink",
    "Observer",
    "ProviderThrottle",
    "RunResult",
    "StepPolicy",
    "StepTimeout",
    "StreamResult",
    "TruncatedStream",
    "carry_deadline_after",
    "carry_deadline_at",
    "current_deadline",
    "deadline_after",
    "deadline_at",
    "deadline_at_wall",
    "deadline_from_headers",
    "deadline_headers",
    "fail_after",
    "fail_at",
    "idempotency_key",
    "move_on_after",
    "move_on_at",
    "new_run_id",
    "now",
    "remaining",
    "retry_after_fits",
    "run_step",
    "run_workflow",
    "trace_headers",
]
