"""
The measured calls a replay aligns: each one with its job, size, start, outcome.

The simulator keeps a route's latencies as a sorted table, which forgets which call was which;
to serve a repeat the same job (or a call of the same size and moment) the replay reads the
calls themselves. A step's route *pool* is what the simulator draws from: its finished calls
in the step's token bucket (a seeded sample of at most ``max_rows``), with its cut, failed and
invalid calls of the input bucket in their measured proportion to the finished ones (they have
no output tokens, so no output bucket), as `tailkit.simulation.route_sample` takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailkit.config import Route, Step
from tailkit.record import Buckets
from tailkit.simulation.lowlevel import CUT, FAILED, OK
from tailkit.store import Store
from tailkit.store.lowlevel import calls_with_buckets_sql


__all__ = ["Calls", "job_calls", "pool"]

Floats = npt.NDArray[np.float64]
KIND = (
    f"CASE WHEN {CUT} THEN 'c' WHEN {OK} THEN 'o' WHEN {FAILED} THEN 'e' "
    "WHEN status = 'invalid' THEN 'i' END"
)
"""One letter per call: o finished, c cut (latency beyond its cut), e failed, i invalid."""
_SELECT = (
    f"SELECT call_id, job_key, coalesce(attempt, 0), epoch(started_at), {KIND}, total_s, "
    "ttft_s, censored_at_s, output_tokens FROM ({base}) WHERE {where}"
)


@dataclass(frozen=True, slots=True)
class Calls:
    """
    Measured calls of one route, as columns (NaN or ``None``: unknown).

    Args:
        call_id: The calls' ids.
        job: Their job keys (``None``: none).
        attempt: Their attempt numbers (0: a first attempt).
        start_s: Start, seconds since the epoch.
        kind: One letter each (see `KIND`).
        total_s: Seconds to the last token (to the failure).
        ttft_s: Seconds to the first token.
        cut_s: The age a cut call was cut at.
        tokens: Output tokens.
    """

    call_id: npt.NDArray[np.object_]
    job: npt.NDArray[np.object_]
    attempt: npt.NDArray[np.int64]
    start_s: Floats
    kind: npt.NDArray[np.str_]
    total_s: Floats
    ttft_s: Floats
    cut_s: Floats
    tokens: Floats

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]]) -> Calls:
        """
        Calls from query rows in `_SELECT`'s column order.
        """
        cols = list(zip(*rows, strict=True)) if rows else [()] * 9

        def floats(values: Sequence[Any]) -> Floats:
            return np.asarray([np.nan if v is None else float(v) for v in values], np.float64)

        return cls(
            call_id=np.asarray([str(v) for v in cols[0]], dtype=object),
            job=np.asarray(list(cols[1]), dtype=object),
            attempt=np.asarray(cols[2], dtype=np.int64),
            start_s=floats(cols[3]),
            kind=np.asarray(cols[4], dtype="<U1"),
            total_s=floats(cols[5]),
            ttft_s=floats(cols[6]),
            cut_s=floats(cols[7]),
            tokens=floats(cols[8]),
        )

    def __len__(self) -> int:
        return int(self.call_id.size)

    def take(self, index: npt.NDArray[np.intp]) -> Calls:
        """
        The calls at ``index``, in its order.
        """
        return Calls(*(getattr(self, name)[index] for name in self.__slots__))

    @classmethod
    def joined(cls, parts: Sequence[Calls]) -> Calls:
        """
        The calls of ``parts``, one after another.
        """
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in cls.__slots__))


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _route_sql(route: Route) -> str:
    return f"(provider = {_lit(route.provider)} AND model = {_lit(route.model)})"


def pool(
    store: Store, route: Route, step: Step, *, buckets: Buckets, seed: int, max_rows: int
) -> Calls:
    """
    The route's calls the simulator would draw from for ``step`` (module docstring).

    Args:
        store: An open store.
        route: The route.
        step: The step (its expected tokens pick the bucket).
        buckets: Bucket edges.
        seed: Seed of the sample (a hash order of the call ids).
        max_rows: Most finished calls kept.
    """
    tokens = step.expected_tokens
    in_f = (
        "TRUE"
        if tokens.input is None
        else f"input_bucket = {_lit(buckets.input_label(tokens.input))}"
    )
    out_f = (
        "TRUE"
        if tokens.output is None
        else f"output_bucket = {_lit(buckets.output_label(tokens.output))}"
    )
    base = calls_with_buckets_sql(buckets, where=_route_sql(route))
    row = store.fetchone(
        f"SELECT count(*) FILTER ({OK}), count(*) FILTER (NOT ({OK}) AND ({KIND}) IS NOT NULL) "
        f"FROM ({base}) WHERE {in_f}"
    )
    ok, others = row if row is not None else (0, 0)
    order = f"ORDER BY hash(call_id || '#{int(seed)}'), call_id"
    finished = store.fetchall(
        _SELECT.format(base=base, where=f"{in_f} AND {OK} AND {out_f}")
        + f" {order} LIMIT {max_rows}"
    )
    keep = round(others * len(finished) / ok) if ok else 0
    rest = store.fetchall(
        _SELECT.format(base=base, where=f"{in_f} AND NOT ({OK}) AND ({KIND}) IS NOT NULL")
        + f" {order} LIMIT {keep}"
    )
    return Calls.of([*finished, *rest])


def job_calls(store: Store, route: Route, jobs: Sequence[str], *, buckets: Buckets) -> Calls:
    """
    Every call of ``route`` that did one of ``jobs`` (any bucket: the same job), whatever ended it.
    """
    if not jobs:
        return Calls.of([])
    base = calls_with_buckets_sql(buckets, where=_route_sql(route))
    where = f"job_key IN (SELECT unnest(?)) AND ({KIND}) IS NOT NULL"
    return Calls.of(store.fetchall(_SELECT.format(base=base, where=where), [list(jobs)]))
