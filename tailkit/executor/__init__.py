"""
The embedded executor: cutoffs, hedging, failover, budgets and telemetry for each step.

Standard library only (plus `tailkit.config`, `tailkit.deadline`, `tailkit.ledger` and
`tailkit.errors`): this is what runs in production, next to the user's own code. `Executor`
holds a plan, its hedge budget, the per-provider throttle and circuit breaker, the ledger and
an `Observer` (event hook, OpenTelemetry spans when installed); `Executor.run_step` runs one
logical call of a step, `Executor.run` a whole workflow under one deadline,
`Executor.replace_plan` swaps in a recalibrated plan (`follow_plan` does it whenever the plan
file changes), `Executor.live_state` shows what live routing has learnt. The attempt function
the caller writes gets an `Attempt` and returns a result or streams `Chunk`s.

``__all__`` is what the guides show (docs/executor.md, docs/sdk.md, docs/operations.md). The
deadline API lives in `tailkit.deadline` and the ledger in `tailkit.ledger`; their names are
re-exported here too, so ``from tailkit.executor import deadline_after, Ledger`` keeps working.
Building blocks for adapters, extensions and tests are in `tailkit.executor.lowlevel`.
"""

from tailkit.deadline import DEADLINE_HEADER as DEADLINE_HEADER
from tailkit.deadline import REMAINING_HEADER as REMAINING_HEADER
from tailkit.deadline import DeadlineScope as DeadlineScope
from tailkit.deadline import carry_deadline_after as carry_deadline_after
from tailkit.deadline import carry_deadline_at as carry_deadline_at
from tailkit.deadline import current_deadline as current_deadline
from tailkit.deadline import deadline_after as deadline_after
from tailkit.deadline import deadline_at as deadline_at
from tailkit.deadline import deadline_at_wall as deadline_at_wall
from tailkit.deadline import deadline_from_headers as deadline_from_headers
from tailkit.deadline import deadline_headers as deadline_headers
from tailkit.deadline import fail_after as fail_after
from tailkit.deadline import fail_at as fail_at
from tailkit.deadline import move_on_after as move_on_after
from tailkit.deadline import move_on_at as move_on_at
from tailkit.deadline import now as now
from tailkit.deadline import remaining as remaining
from tailkit.errors import AllAttemptsFailed as AllAttemptsFailed
from tailkit.errors import StepTimeout as StepTimeout
from tailkit.executor._breaker import Breaker as Breaker
from tailkit.executor._budget import HedgeBudget as HedgeBudget
from tailkit.executor._budget import ProviderThrottle as ProviderThrottle
from tailkit.executor._events import Event as Event
from tailkit.executor._events import Observer as Observer
from tailkit.executor._events import trace_headers as trace_headers
from tailkit.executor._executor import Executor as Executor
from tailkit.executor._executor import idempotency_key as idempotency_key
from tailkit.executor._executor import new_run_id as new_run_id
from tailkit.executor._executor import run_step as run_step
from tailkit.executor._follow import PlanFollower as PlanFollower
from tailkit.executor._follow import follow_plan as follow_plan
from tailkit.executor._live import LiveValue as LiveValue
from tailkit.executor._shared import StepPolicy as StepPolicy
from tailkit.executor._types import FINAL as FINAL
from tailkit.executor._types import Attempt as Attempt
from tailkit.executor._types import AttemptError as AttemptError
from tailkit.executor._types import AttemptFn as AttemptFn
from tailkit.executor._types import Chunk as Chunk
from tailkit.executor._types import StreamResult as StreamResult
from tailkit.executor._types import StreamTooLarge as StreamTooLarge
from tailkit.executor._types import TruncatedStream as TruncatedStream
from tailkit.executor._workflow import RunResult as RunResult
from tailkit.ledger import AttemptRecord as AttemptRecord
from tailkit.ledger import CallbackSink as CallbackSink
from tailkit.ledger import JsonlSink as JsonlSink
from tailkit.ledger import Ledger as Ledger
from tailkit.ledger import MemorySink as MemorySink


__all__ = [
    "FINAL",
    "AllAttemptsFailed",
    "Attempt",
    "AttemptError",
    "AttemptFn",
    "Breaker",
    "Chunk",
    "Event",
    "Executor",
    "HedgeBudget",
    "LiveValue",
    "Observer",
    "PlanFollower",
    "ProviderThrottle",
    "RunResult",
    "StepPolicy",
    "StepTimeout",
    "StreamResult",
    "StreamTooLarge",
    "TruncatedStream",
    "follow_plan",
    "idempotency_key",
    "new_run_id",
    "run_step",
    "trace_headers",
]
