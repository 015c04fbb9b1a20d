"""
What the steps of one executor share, and what a caller may say about a step beyond the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailkit.config import Plan
from tailkit.executor._budget import BudgetAccount, HedgeBudget, ProviderThrottle
from tailkit.executor._ledger import Ledger
from tailkit.executor._types import AttemptError, Validator


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """
    How the executor treats a step beyond what the plan says.

    Args:
        validator: Checks a result; a falsy return value escalates to the upgrade route.
        losers: ``cancel`` a losing attempt, or let it ``finish`` (recorded as abandoned).
        error_retries: Immediate retries after the first attempt fails before the step acted
            on a cutoff (0 or more; the simulator models 0 or 1).
        project_overrun: Also downgrade as soon as a stream is projected to overrun the
            cutoff (``on_cutoff: downgrade`` with expected output tokens). The simulator does
            not model this, so a calibrated plan's predictions assume it off.
    """

    validator: Validator | None = None
    losers: str = "cancel"
    error_retries: int = 1
    project_overrun: bool = False


DEFAULT_POLICY = StepPolicy()


class InvalidOutput(AttemptError):  # noqa: N818 - reads as the status it maps to
    """
    An attempt's result failed the step's validator.
    """


@dataclass(slots=True, eq=False)
class Shared:
    """
    What every step of one executor shares: the plan, budgets, ledger.
    """

    plan: Plan
    budget: HedgeBudget
    throttle: ProviderThrottle
    ledger: Ledger
    policies: dict[str, StepPolicy] = field(default_factory=dict)
    denials: dict[str, int] = field(default_factory=lambda: {"budget": 0, "throttle": 0})


class RunBook:
    """
    What the steps of one run share: its budget account and the actions refused to it.
    """

    __slots__ = ("account", "denials")

    def __init__(self, account: BudgetAccount) -> None:
        self.account = account
        self.denials = {"budget": 0, "throttle": 0}
