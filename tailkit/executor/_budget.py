"""
The global hedge budget: extra attempts as a share of first attempts, per fleet.

Every hedge, or retry or downgrade at a cutoff, is load that nobody asked for, so the executor
caps it twice: here, and per provider in `tailkit.executor._throttle`.

The hedge budget speaks the simulator's language. `tailkit calibrate` keeps a plan's *expected*
extra attempts per first attempt within ``hedge_budget``, counting a run's steps as its first
attempts; the budget grants an extra attempt while the extras spent stay within that share of
the first attempts credited, plus the noise a plan on budget makes, plus a small allowance:

    extras + 1 <= ratio * firsts + sigmas * sqrt(ratio * firsts) + allowance

It counts first attempts, never seconds, for three reasons:

- **A plan within budget is not denied.** A run is credited with all its first attempts when it
  starts, so a step late in a run spends credit its run brought along, however many runs started
  together; a count over a sliding minute instead sees a burst of runs hedge their late steps
  before the next burst's first attempts arrive, and denies hedges the simulation counted on.
  The extras of many independent runs scatter around their mean with a standard deviation of
  at most ``sqrt(ratio * firsts)`` (a sum of rare events is at most Poisson-wide), so a plan
  whose mean is on budget exceeds the bound only at a ``sigmas``-deviation fluke.
- **It is still a brake.** A plan or a provider brownout that hedges far more than planned is
  held to the share plus that noise term, which shrinks relative to the share as traffic grows
  (at 5 % over 10,000 first attempts, to 5.7 %).
- **Nothing depends on wall-clock time**, so a plan time-scaled for a test or a demo needs no
  scaled budget; the deposits and spends are the same at any speed.

The budget remembers every run in flight, and the closed runs that brought the latest
``window_firsts`` first attempts: a long quiet spell cannot bank credit for a later storm. The
allowance lets a service that has barely started still hedge. Decisions are exact (integer
arithmetic on the decimal ratio), so the simulator's reference can replay them bit for bit.

**One budget per fleet.** A service usually runs as N worker processes (gunicorn, uvicorn
``--workers``), each with its own executor and its own count. The share term adds up across
them (N processes with F/N first attempts each grant ``ratio * F`` between them), but the
noise term and the allowance do not: N processes each allowed ``sigmas * sqrt(ratio * F/N) +
allowance`` grant sqrt(N) times the noise and N times the allowance a single process serving
all of F would. At 5 %, 16 workers sharing 400 first attempts were allowed 24 % extra where one
process was allowed 8.8 %. So the rule describes the *fleet*: a process that is one of
``processes`` estimates the fleet's first attempts as ``processes`` times its own and takes
its 1/``processes`` share of what the fleet's rule allows them, and the window is the fleet's
too (each process remembers ``window_firsts / processes``):

    processes * (extras + 1) <= ratio * P * firsts + sigmas * sqrt(ratio * P * firsts) + allowance

with ``P = processes``. Evenly loaded processes together grant exactly what one process seeing
all the traffic would; unevenly loaded ones grant less (the square root is concave), never
more. ``processes`` defaults to the ``TAILKIT_WORKERS`` environment variable, else
``WEB_CONCURRENCY`` (what gunicorn and uvicorn read for their worker count), else 1.

**A reserve for recovery.** Not every extra attempt is speculative. A hedge (or a retry or
downgrade at a cutoff) races an attempt that may still answer; an error retry, a failover or
an upgrade after invalid output is the step's only way to an answer. First come first served,
a brownout's hedges spend the whole bound and a single error then fails its run. So the
speculative extra attempts counted may reach only ``1 - reserve`` of what the rule allows
(its right-hand side times ``1 - reserve``), besides all extra attempts staying within the
rule; recovery needs the rule alone. Whatever the hedges do, a ``reserve`` share of the
bound is left to recovery, and recovery that came first never shrinks the hedges' share
(only the whole bound). The default reserve is 0.2: at 5 % of 400 first attempts the rule
allows 35.4 extra attempts, hedges stop at 28 and at least 7 remain for recovery; over the
10,000 first attempts of the window, 569 and 455. Calibrate counts a plan's recovery attempts
in its ``hedge_budget`` too, so a plan whose errors and invalid results take a fifth of its
budget or more meets the reserve only at a 2.7-sigma fluke of its hedges; one that spends
nearly all of it on
hedges loses some once a window holds more than about 3,000 first attempts (set ``reserve``
lower, or 0). Callers say which kind they ask for (``try_extra(account,
speculative=True)``); one that does not say draws from the whole bound, as before the
reserve.
"""

from __future__ import annotations

import math
import os

from collections import deque
from collections.abc import Mapping
from fractions import Fraction

from tailkit.errors import ConfigError
from tailkit.executor._throttle import ProviderThrottle, retry_after_fits


__all__ = [
    "DEFAULT_RESERVE",
    "WORKERS_ENV",
    "BudgetAccount",
    "HedgeBudget",
    "ProviderThrottle",
    "fleet_processes",
    "retry_after_fits",
]

DEFAULT_RESERVE = 0.2  # the bound's share that hedges leave to error retries and upgrades
WORKERS_ENV = ("TAILKIT_WORKERS", "WEB_CONCURRENCY")  # read in this order for `processes`


class BudgetAccount:
    """
    One run's share of the hedge budget: the first attempts it brought, the extras it spent.

    Returned by `HedgeBudget.open`; pass it to `HedgeBudget.try_extra` and `HedgeBudget.close`.

    Attributes:
        firsts: First attempts credited when the run started.
        extras: Extra attempts granted to the run.
        hedges: Of those, the speculative ones (hedges, retries or downgrades at a cutoff).
        denials: Extra attempts refused to the run.
    """

    __slots__ = ("closed", "denials", "extras", "firsts", "hedges")

    def __init__(self, firsts: int) -> None:
        self.firsts = firsts
        self.extras = 0
        self.hedges = 0
        self.denials = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"BudgetAccount(firsts={self.firsts}, extras={self.extras}, denials={self.denials})"


class HedgeBudget:
    """
    Global hedge budget: extra attempts as a share of first attempts, counted per run.

    An extra attempt is granted iff ``processes * (extras + 1) <= ratio * P * firsts + sigmas
    * sqrt(ratio * P * firsts) + allowance`` (``P = processes``), where ``firsts`` and
    ``extras`` count this process's runs still open and the closed runs that brought the
    latest ``window_firsts / processes`` first attempts; a speculative one (a hedge, or a retry
    or downgrade at a cutoff) iff, besides, the same holds for the speculative extras alone
    with the right-hand side times ``1 - reserve`` (see the module docstring). A workflow run
    opens an account with one first attempt per step of its plan (the simulator's count), a
    lone step call with one. Synchronous, not thread-safe.

    Args:
        ratio: Extra attempts allowed per first attempt, in [0, 1]; read as the decimal it
            prints as, so 0.29 of 100 first attempts is exactly 29.
        allowance: Extra attempts granted on top, whatever the traffic, to the whole fleet.
        sigmas: Headroom for the noise of a plan on budget, in standard deviations of the
            fleet's extra attempts (0: none; the share and the allowance only).
        window_firsts: Closed runs are remembered until newer closed runs bring this many
            first attempts across the fleet (runs in flight always count).
        processes: Worker processes that share this budget, each with its own `HedgeBudget`
            and about the same traffic; each takes 1/``processes`` of the fleet's allowance,
            noise headroom and window. ``None``: the ``TAILKIT_WORKERS`` environment variable,
            else ``WEB_CONCURRENCY`` (gunicorn's and uvicorn's worker count), else 1.
        reserve: The share of the bound only recovery (error retries, failovers, upgrades)
            may spend, in [0, 1]: speculative extra attempts stop at ``1 - reserve`` of it
            (counting only themselves; all extras together stay within the whole bound).
        window_s: Ignored. Budgets used to count over a sliding window of seconds; callers that
            still pass one keep working, with no window in time.

    Raises:
        ConfigError: An argument (or the environment variable read for ``processes``) is
            out of range.

    Example::

        budget = HedgeBudget(plan.hedge_budget)  # what Executor(plan) uses by default
        budget = HedgeBudget(0.05, processes=16)  # one of 16 workers sharing 5 %
    """

    __slots__ = (
        "_allowance", "_closed", "_closed_firsts", "_den", "_extras", "_firsts", "_hedges",
        "_keep_den", "_keep_num", "_num", "_processes", "_reserve", "_sigma_den", "_sigma_num",
        "_window_firsts",
    )  # fmt: skip

    def __init__(
        self,
        ratio: float = 0.05,
        *,
        allowance: int = 2,
        sigmas: float = 3.0,
        window_firsts: int = 10_000,
        processes: int | None = None,
        reserve: float = DEFAULT_RESERVE,
        window_s: float | None = None,
    ) -> None:
        del window_s  # accepted for callers written for the time window, which it replaced
        if allowance < 0:
            msg = f"{{field}} must be 0 or more (extra attempts), got {allowance!r}."
            raise ConfigError(msg, field="allowance", value=allowance, fix="Pass 0 or more.")
        if not 0.0 <= sigmas < math.inf:
            msg = f"{{field}} must be 0 or more (standard deviations of the noise), got {sigmas!r}."
            raise ConfigError(msg, field="sigmas", value=sigmas, fix="Pass 0 or more.")
        if window_firsts < 1:
            msg = f"{{field}} must be at least 1 (first attempts), got {window_firsts!r}."
            raise ConfigError(
                msg, field="window_firsts", value=window_firsts, fix="Pass 1 or more."
            )
        if not 0.0 <= reserve <= 1.0:
            msg = (
                f"reserve must be in [0, 1] (the bound's share kept for recovery), got {reserve!r}"
            )
            raise ConfigError(msg)
        self._processes = fleet_processes() if processes is None else _check_processes(processes)
        self.set_ratio(ratio)
        # Compare in integers: as a float 0.29 * 100 is 28.999999999999996, which would deny
        # the 29th extra that the rule grants.
        spread = Fraction(repr(float(sigmas))) ** 2
        self._sigma_num, self._sigma_den = spread.numerator, spread.denominator
        keep = 1 - Fraction(repr(float(reserve)))  # a speculative attempt's share of the bound
        self._reserve = reserve
        self._keep_num, self._keep_den = keep.numerator, keep.denominator
        self._allowance = allowance
        self._window_firsts = -(
            -window_firsts // self._processes
        )  # this process's part, rounded up
        self._firsts = self._extras = self._hedges = 0  # open runs and remembered closed runs
        self._closed: deque[BudgetAccount] = deque()
        self._closed_firsts = 0

    def set_ratio(self, ratio: float) -> None:
        """
        Change the share (a recalibrated plan's ``hedge_budget``), keeping what was counted.

        Raises:
            ConfigError: ``ratio`` is not in [0, 1].
        """
        if not 0.0 <= ratio <= 1.0:
            msg = f"{{field}} must be in [0, 1] (extra attempts per first attempt), got {ratio!r}."
            raise ConfigError(
                msg,
                field="ratio",
                value=ratio,
                fix="Pass a share of the first attempts, e.g. 0.05 for 5 extra per 100.",
            )
        exact = Fraction(repr(float(ratio)))
        self._num, self._den = exact.numerator, exact.denominator

    @property
    def ratio(self) -> float:
        """
        Extra attempts allowed per first attempt.
        """
        return self._num / self._den

    @property
    def processes(self) -> int:
        """
        Worker processes sharing the budget (this one included).
        """
        return self._processes

    @property
    def reserve(self) -> float:
        """
        The share of the bound that only recovery may spend.
        """
        return self._reserve

    @property
    def firsts(self) -> int:
        """
        First attempts counted now: runs in flight and the remembered closed runs.
        """
        return self._firsts

    @property
    def extras(self) -> int:
        """
        Extra attempts counted now, of the same runs.
        """
        return self._extras

    @property
    def hedges(self) -> int:
        """
        Of those, the speculative ones (hedges, retries or downgrades at a cutoff).
        """
        return self._hedges

    def allows(self, extras: int, firsts: int, *, hedges: int | None = None) -> bool:
        """
        Whether the rule grants one more extra attempt after ``extras``, given ``firsts``.

        ``hedges``: the speculative extras among ``extras``, for a speculative attempt (a
        hedge, or a retry or downgrade at a cutoff): they must also stay within ``1 -
        reserve`` of the bound. ``None``: recovery, held to the bound alone.
        """
        if not self._fits(extras + 1, firsts, 1, 1):
            return False
        return hedges is None or self._fits(hedges + 1, firsts, self._keep_num, self._keep_den)

    def _fits(self, count: int, firsts: int, keep_num: int, keep_den: int) -> bool:
        """
        ``processes * count <= keep * (ratio * P * firsts + sigmas * sqrt(...) + allowance)``.

        Every term times ``den * keep_num`` (``keep = keep_num / keep_den``), in integers.
        """
        fleet_firsts = self._processes * firsts
        need = self._den * (self._processes * count * keep_den - self._allowance * keep_num)
        need -= self._num * fleet_firsts * keep_num
        if need <= 0:
            return True
        if keep_num == 0:
            return False  # a reserve of 1: speculative attempts get nothing
        spread = self._sigma_num * self._num * fleet_firsts * self._den * keep_num * keep_num
        return need * need * self._sigma_den <= spread

    def open(self, firsts: int = 1) -> BudgetAccount:
        """
        A run starts: credit its first attempts (a workflow: one per step; a lone call: 1).
        """
        if firsts < 0:
            msg = f"{{field}} must be 0 or more (first attempts of the run), got {firsts!r}."
            raise ConfigError(msg, field="firsts", value=firsts, fix="Pass 0 or more.")
        self._firsts += firsts
        return BudgetAccount(firsts)

    def try_extra(self, account: BudgetAccount, *, speculative: bool = False) -> bool:
        """
        Ask whether an extra attempt may start now.

        A grant is counted to ``account``, a refusal too (as a denial).

        Args:
            account: The run's account.
            speculative: A hedge, or a retry or downgrade at a cutoff: the speculative
                extras may reach only ``1 - reserve`` of the bound. ``False`` (an error
                retry, a failover, an upgrade): recovery, which may spend all of it.

        Returns:
            True if granted.
        """
        hedges = self._hedges if speculative else None
        if not self.allows(self._extras, self._firsts, hedges=hedges):
            account.denials += 1
            return False
        account.extras += 1
        self._extras += 1
        if speculative:
            account.hedges += 1
            self._hedges += 1
        return True

    def close(self, account: BudgetAccount) -> None:
        """
        A run ended: it is remembered until newer closed runs bring the window's firsts.

        Closing an account twice does nothing.
        """
        if account.closed:
            return
        account.closed = True
        self._closed.append(account)
        self._closed_firsts += account.firsts
        while self._closed and self._closed_firsts - self._closed[0].firsts >= self._window_firsts:
            gone = self._closed.popleft()
            self._closed_firsts -= gone.firsts
            self._firsts -= gone.firsts
            self._extras -= gone.extras
            self._hedges -= gone.hedges

    def __repr__(self) -> str:
        return (
            f"HedgeBudget(ratio={self.ratio!r}, allowance={self._allowance!r}, "
            f"sigmas={math.sqrt(self._sigma_num / self._sigma_den)!r}, "
            f"window_firsts={self._window_firsts * self._processes!r}, "
            f"processes={self._processes!r}, reserve={self._reserve!r}, "
            f"firsts={self._firsts}, extras={self._extras}, hedges={self._hedges})"
        )


def fleet_processes(environ: Mapping[str, str] | None = None) -> int:
    """
    Worker processes sharing a budget, as the environment says.

    ``TAILKIT_WORKERS``, else ``WEB_CONCURRENCY`` (the worker count gunicorn and uvicorn
    read), else 1.

    Raises:
        ConfigError: The variable is set but not a positive integer.
    """
    env = os.environ if environ is None else environ
    for name in WORKERS_ENV:
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            msg = (
                f"{name} must be a positive integer (worker processes sharing the hedge "
                f"budget), got {text!r}; or pass HedgeBudget(processes=...)"
            )
            raise ConfigError(msg)
        return value
    return 1


def _check_processes(processes: int) -> int:
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        msg = f"{{field}} must be a positive integer (worker processes), got {processes!r}."
        raise ConfigError(
            msg,
            field="processes",
            value=processes,
            fix="Pass the number of worker processes, 1 or more.",
        )
    return processes
