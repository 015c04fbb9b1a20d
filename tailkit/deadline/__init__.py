"""
Deadlines: one absolute instant on the event loop's monotonic clock, shared by a whole run.

Standard library only: a service imports this (and `tailkit.executor`, which cuts its steps by
it; `tailkit.serve`, which honours the deadline a request carries) without any analysis
dependency. `tailkit.executor` re-exports these names, so ``from tailkit.executor import
deadline_after`` keeps working.

The deadline lives in a contextvar, so every task started under it inherits it: the
executor's cutoffs read it, and outgoing requests carry it in their headers. Scopes compose
with ``min()``: a scope never extends the deadline it was entered under. ``*_after(seconds)``
is a duration that becomes an instant when the scope is entered; ``*_at(when)`` is an instant
on the loop clock (`now()`); ``math.inf`` means no deadline of its own, and so does one more
than `tailkit.deadline.lowlevel.FAR_S` seconds (about 32 years) away. A negative duration has
passed; NaN and non-numbers are refused.

Three kinds of scope, named as in trio and anyio, each usable with ``with`` or ``async with``:

- `deadline_after` / `deadline_at` (also `fail_after` / `fail_at`): at the deadline the block
  is cancelled and `TimeoutError` comes out of the scope;
- `move_on_after` / `move_on_at`: at the deadline the block is cancelled and the scope ends
  quietly (``scope.cancelled_caught`` says it happened);
- `carry_deadline_after` / `carry_deadline_at`: only set the deadline that cutoffs and
  headers read; nothing is cancelled.

Enforcing needs a running asyncio task; outside one, a scope only sets the deadline. A scope
cancels its block the way ``asyncio.timeout`` does: a timer cancels the task, and on the way
out the scope takes its cancellation back (``Task.uncancel``) and turns it into
`TimeoutError`. A cancellation that came from elsewhere -- the task itself being cancelled --
always propagates as ``CancelledError``.

When the executor enforces the same deadline itself it raises `StepTimeout`, which names the
step. So that the scope's timer does not beat it to the instant, the executor marks the code it
cuts with `executor_cuts`: a scope whose deadline falls due under such a mark leaves the cut to
the executor for a moment (`CUT_GRACE_S`), or, once the executor says it is cutting
(`executor_cutting`), until the marked code ends; then the executor's error passes through.

Across a process boundary both the absolute wall-clock instant and the seconds remaining at
send time travel (`deadline_headers`); the receiver takes ``min(deadline_wall - now_wall,
remaining_at_send)`` (`deadline_from_headers`): time spent queued before it starts counts, and
a skewed clock can only make the deadline stricter.
"""

from tailkit.deadline._headers import DEADLINE_HEADER as DEADLINE_HEADER
from tailkit.deadline._headers import REMAINING_HEADER as REMAINING_HEADER
from tailkit.deadline._headers import deadline_from_headers as deadline_from_headers
from tailkit.deadline._headers import deadline_headers as deadline_headers
from tailkit.deadline._scope import DeadlineScope as DeadlineScope
from tailkit.deadline._scope import carry_deadline_after as carry_deadline_after
from tailkit.deadline._scope import carry_deadline_at as carry_deadline_at
from tailkit.deadline._scope import current_deadline as current_deadline
from tailkit.deadline._scope import deadline_after as deadline_after
from tailkit.deadline._scope import deadline_at as deadline_at
from tailkit.deadline._scope import deadline_at_wall as deadline_at_wall
from tailkit.deadline._scope import fail_after as fail_after
from tailkit.deadline._scope import fail_at as fail_at
from tailkit.deadline._scope import move_on_after as move_on_after
from tailkit.deadline._scope import move_on_at as move_on_at
from tailkit.deadline._scope import now as now
from tailkit.deadline._scope import remaining as remaining


__all__ = [
    "DEADLINE_HEADER",
    "REMAINING_HEADER",
    "DeadlineScope",
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
    "move_on_after",
    "move_on_at",
    "now",
    "remaining",
]
