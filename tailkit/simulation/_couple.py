"""
What a repeat attempt shares with the attempt it repeats: coupled draws.

A hedge, retry, downgrade or upgrade does the same job as the step's first attempt: about the
same amount of work (output length, hidden reasoning, a slow tool) and, on the same provider,
the same moment (a slow spell). The simulator keeps every route's latency as measured (its
marginal) and couples the *ranks* of a step's attempts with a Gaussian copula: the first
attempt's rank ``u0`` on its route becomes a normal score ``z0``, and a repeat on a route with
correlation ``rho`` lands at rank ``Phi(rho z0 + sqrt(1 - rho^2) e)``, ``e`` its own fresh
part. ``rho = 0`` is an independent draw (the transient tail only, which a fresh attempt
escapes); ``rho`` near 1 repeats the first attempt's rank (the work itself, which a fresh
attempt repeats). A slow first attempt thus finds its repeat slow more often than chance, as
paired benchmark data shows.

Failures stay independent: whether a repeat fails is its own slot's draw, as measured; only
the rank of a repeat that finishes is coupled. A first attempt that failed has no latency
rank, so its position among the route's failures stands for its job (a uniform as good as
any). With ``rho = 0`` the coupled index is the raw draw, bit for bit, so plans and tests
without sharing see exactly the draws they always saw.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailkit.simulation._model import StepModel
from tailkit.simulation._sample import TABLE, Index, RouteSample


__all__ = [
    "AFTER_RETRY", "RETRY", "SlotSource", "StepSlots", "action_route", "after_retry_index",
    "couple", "repeat_route", "retry_index", "step_indexes",
]  # fmt: skip

AFTER_RETRY = 3
"""The slot of the cutoff's attempt when slot 1 went to an error's retry (its own stream)."""

RETRY = 4
"""The virtual slot of an error's retry: slot 1's draw, coupled for the retry's route."""


class SlotSource(Protocol):
    """
    Where a step's raw draws come from: `Draws`, or the rows of a block live routing plays.
    """

    def slot(self, name: str, k: int) -> Index:
        """
        The next block of draws of slot ``k`` of step ``name``, one per run.
        """
        ...


def _scores(index: Index, route: RouteSample) -> np.ndarray:
    """
    The normal score of each draw's rank among the route's finished (or failed) outcomes.
    """
    from scipy import special

    ok = route.ok_entries
    i = index.astype(np.float64)
    failed = i >= ok
    u = np.where(failed, (i - ok + 0.5) / max(TABLE - ok, 1), (i + 0.5) / ok)
    return special.ndtri(u)  # type: ignore[no-any-return]


def couple(
    first: Index, raw: Index, rho: float, first_route: RouteSample, route: RouteSample
) -> Index:
    """
    A repeat attempt's table indexes, coupled to the first attempt's by correlation ``rho``.

    Args:
        first: The first attempt's indexes into ``first_route``'s table.
        raw: The repeat's own uniform indexes (its slot's draws).
        rho: Correlation of the two attempts' normal scores, in [0, 1).
        first_route: The first attempt's route.
        route: The repeat's route.

    Returns:
        Indexes into ``route``'s table: a failure wherever ``raw`` is one, elsewhere a
        finished outcome whose rank is coupled to the first attempt's.
    """
    if rho <= 0.0:
        return raw
    from scipy import special

    ok = route.ok_entries
    finished = raw < ok
    if not finished.any():
        return raw
    fresh = special.ndtri((raw[finished].astype(np.float64) + 0.5) / ok)
    z = rho * _scores(first[finished], first_route) + math.sqrt(1.0 - rho * rho) * fresh
    rank = np.minimum((special.ndtr(z) * ok).astype(np.int64), ok - 1)
    out = raw.copy()
    out[finished] = rank.astype(raw.dtype)
    return out


def repeat_route(step: StepModel, k: int) -> RouteSample:
    """
    The route slot ``k``'s attempt goes to (the step's own where the step names none).

    The one rule for where a repeat goes, as the executor sends it. Slot 1 is the cutoff's
    attempt (the step's second route), slot 2 the upgrade, `RETRY` an error's retry: on the
    step's hedge route when that is on another provider (a failover: ``step.failover``), else
    on the step's own route; `AFTER_RETRY` the cutoff's attempt on that retry (`action_route`).
    A cutoff that fires on an upgrade reads slot 1 (or `AFTER_RETRY`) for its attempt too,
    coupled as that slot is.
    """
    if k == RETRY:
        return step.failover or step.primary
    if k == AFTER_RETRY:
        return action_route(step, repeat_route(step, RETRY))
    return (step.second if k == 1 else step.upgrade) or step.primary


def action_route(step: StepModel, head: RouteSample) -> RouteSample:
    """
    Where the step's action sends its attempt when a cutoff fires on an attempt on ``head``.

    A retry goes to ``head`` itself; a downgrade to the step's second route; a hedge to the
    step's second route, or to its own route when ``head`` is that second route (an attempt
    that failed over to the hedge route is hedged back on the step's route, as the executor's
    ``hedge_target`` does; `StepModel.back` where live routing chose another first route).
    """
    second = step.second or step.primary
    if step.action == "retry":
        return head
    if step.action == "hedge" and head is second and second is not step.primary:
        return step.back or step.primary
    return second


def retry_index(draws: Sequence[int]) -> int:
    """
    The index an error's retry reads in a run's per-step draws (the reference's rule).

    Four draws are the raw slots (no coupling: the retry reads slot 1); a fifth, when given,
    is the retry's own coupled index (`RETRY`, as `step_indexes` gives it).
    """
    return draws[RETRY] if len(draws) > RETRY else draws[1]


def after_retry_index(draws: Sequence[int]) -> int:
    """
    The index the cutoff's attempt after an error's retry reads (`AFTER_RETRY`).
    """
    return draws[AFTER_RETRY]


def step_indexes(step: StepModel, raw: Index) -> Index:
    """
    A step's indexes as the engine reads them, from its raw ``(4, runs)`` slot draws.

    Rows: the first attempt, the cutoff's attempt (on the step's second route, else its
    own), the upgrade, the cutoff's attempt after an error's retry (`AFTER_RETRY`), and an
    error's retry (`RETRY`), the last four coupled to the first.
    """
    first = raw[0]
    coupled = []
    for k in (1, 2, AFTER_RETRY, RETRY):
        route = repeat_route(step, k)
        draws = raw[1 if k == RETRY else k]  # an error's retry reads slot 1
        coupled.append(couple(first, draws, step.rho(route), step.primary, route))
    return np.stack([first, *coupled])


class StepSlots:
    """
    A step's draws for one block of runs: raw slots read once each, repeats coupled on demand.

    Slots 0, 1, 2 are the first attempt, the cutoff's attempt and the upgrade, `AFTER_RETRY`
    the cutoff's attempt after an error's retry; `RETRY` is an error's retry. Raw draws are
    read from `Draws` on first use only (a slot no plan uses is
    never drawn, and the streams stay aligned block by block). Coupling costs two inverse
    normals and a normal CDF per draw, so it is done only for the runs that start the repeat
    (`where`, `at`): a run's coupled draw depends on that run's draws alone, so coupling a
    subset gives those runs exactly what coupling all of them would.
    """

    __slots__ = ("_draws", "_raw", "_step")

    def __init__(self, step: StepModel, draws: SlotSource) -> None:
        self._step, self._draws = step, draws
        self._raw: dict[int, Index] = {}

    def raw(self, k: int) -> Index:
        """
        Slot ``k``'s own uniform draws (`RETRY` reads slot 1's).
        """
        k = 1 if k == RETRY else k
        if k not in self._raw:
            self._raw[k] = self._draws.slot(self._step.name, k)
        return self._raw[k]

    def at(self, k: int, rows: npt.NDArray[np.intp]) -> Index:
        """
        Slot ``k``'s draws for the runs ``rows``, coupled to their first attempts' (k > 0).
        """
        raw = self.raw(k)[rows]
        if k == 0:
            return raw
        # a repeat of the same job (an error's retry on the step's own route): its rank
        # coupled to the first attempt's
        route = repeat_route(self._step, k)
        return couple(self.raw(0)[rows], raw, self._step.rho(route), self._step.primary, route)

    def where(self, k: int, mask: npt.NDArray[np.bool_]) -> Index:
        """
        Slot ``k``'s draws for every run, coupled where ``mask`` is set (raw elsewhere).
        """
        raw = self.raw(k)
        rows = np.flatnonzero(mask)
        if not rows.size or self._step.rho(repeat_route(self._step, k)) <= 0.0:
            return raw
        out = raw.copy()
        out[rows] = self.at(k, rows)
        return out
