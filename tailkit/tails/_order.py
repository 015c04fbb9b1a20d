"""
Exact quantiles and intervals of every group from its sorted latencies, read in chunks.

DuckDB sorts each group's distinct latencies and cut ages (`times_sql`, out of core under its
memory limit) and hands them over in chunks of at most `CHUNK_ROWS` rows; Python keeps per
group only a running count (the order statistics) or a running product and sum (Kaplan-Meier,
see `KaplanMeierStream`). So memory holds one chunk and a few numbers per group, whatever the
number of calls, and the numbers are those of `tailkit.fit.lowlevel.sorted_quantiles` /
`empirical_quantiles` on the whole arrays, bit for bit.
"""

from __future__ import annotations

import itertools
import math

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailkit.fit.lowlevel import KaplanMeierStream, OrderStatisticRanks
from tailkit.store import Store
from tailkit.store.lowlevel import record_batches
from tailkit.tails._query import GROUP_ID, QUANTILES, TableQuery, times_sql


CHUNK_ROWS = 1 << 18  # distinct times per chunk: 256 Ki rows, 6 MiB of columns
_Array = npt.NDArray[np.float64]
_Q = np.array(QUANTILES)
_Q2 = np.array([0.5, 0.99])  # each end of p99/p50


@dataclass(frozen=True, slots=True)
class GroupTimes:
    """
    What the stream needs to know of a group before reading it.

    Args:
        gid: The group's id (`group_id_sql`).
        events: Finished latencies (`EVENT`), the order statistics' n.
        cuts: Finite cut ages (`CUT`); with any, the group's quantiles are Kaplan-Meier's.
    """

    gid: int
    events: int
    cuts: int


@dataclass(frozen=True, slots=True)
class Quantiles:
    """
    Quantiles per group (rows) and quantile (columns).

    ``value``, ``low`` and ``high`` at ``level`` for `QUANTILES`; ``low2`` and ``high2`` at
    ``(1 + level) / 2`` for p50 and p99 (the ends of p99/p50).
    """

    value: _Array
    low: _Array
    high: _Array
    low2: _Array
    high2: _Array


class _Ranks:
    """
    Strictly private: the order statistics an uncensored group needs, filled in as they pass.
    """

    def __init__(self, main: OrderStatisticRanks, wide: OrderStatisticRanks) -> None:
        self.main, self.wide = main, wide
        wanted = [
            r.ravel() for x in (self.main, self.wide) for r in (x.below, x.above, x.low, x.high)
        ]
        self.index = np.unique(np.concatenate(wanted))
        self.value = np.full(self.index.size, math.nan)
        self.seen = 0

    def add(self, times: _Array, events: npt.NDArray[np.int64]) -> None:
        # The k-th latency (0-based) is the first distinct time whose running count exceeds k.
        upto = self.seen + np.cumsum(events)
        where = np.searchsorted(upto, self.index, side="right")
        hit = (where < times.size) & (self.index >= self.seen)
        self.value[hit] = times[where[hit]]
        self.seen = int(upto[-1])

    def at(self, index: npt.NDArray[np.int64]) -> _Array:
        spot = np.searchsorted(self.index, index)
        return self.value[np.clip(spot, 0, self.index.size - 1)]

    def quantiles(self, ranks: OrderStatisticRanks) -> tuple[_Array, _Array, _Array]:
        v, lo, hi = ranks.quantiles(
            self.at(ranks.below), self.at(ranks.above), self.at(ranks.low), self.at(ranks.high)
        )
        return v[0], lo[0], hi[0]


class Type7(_Ranks):
    """
    The type-7 quantiles ``q`` of ``n`` values, as they pass.

    ``lo + (hi - lo) * (rn - floor(rn))`` with ``rn = (n - 1) q``, numpy's default and DuckDB's
    ``quantile_cont`` (whose rounding differs in the last bit at times).
    """

    def __init__(self, n: int, q: tuple[float, ...]) -> None:
        self.rn = (max(n, 1) - 1) * np.array(q)
        self.lo, self.hi = np.floor(self.rn).astype(np.int64), np.ceil(self.rn).astype(np.int64)
        self.index = np.unique(np.concatenate([self.lo, self.hi]))
        self.value = np.full(self.index.size, math.nan)
        self.seen = 0

    def values(self) -> tuple[float, ...]:
        lo, hi = self.at(self.lo), self.at(self.hi)
        v = np.where(self.lo == self.hi, lo, lo + (hi - lo) * (self.rn - self.lo))
        return tuple(float(x) for x in v)


@dataclass(frozen=True, slots=True)
class Sorted:
    """
    What the sorted pass found.

    Latency quantiles per group; per group id, the TTFT and generation p50 and p99 and the
    speed's p50 and p10 (a group without such calls is absent).
    """

    latency: Quantiles
    ttft: dict[int, tuple[float, ...]]
    gen: dict[int, tuple[float, ...]]
    speed: dict[int, tuple[float, ...]]

    def fill(self, aggs: list[dict[str, Any]]) -> None:
        """
        Write the TTFT, generation and speed quantiles found into the groups' aggregates.
        """
        for a in aggs:
            gid = int(a[GROUP_ID])
            if gid in self.ttft:
                a["ttft_q"], a["gen_q"] = self.ttft[gid], self.gen[gid]
            if gid in self.speed:
                a["speed_q"] = self.speed[gid]


def sorted_statistics(
    store: Store | None,
    query: TableQuery,
    groups: Sequence[GroupTimes],
    *,
    level: float,
    phase: dict[int, int] | None = None,
    speed: dict[int, int] | None = None,
    chunks: Iterable[Chunk] | None = None,
) -> Sorted:
    """
    Each group's quantiles with their intervals, in the order of ``groups``, in one sorted pass.

    A group without cut calls gets the order statistics (`OrderStatisticRanks`), one with cut
    calls Kaplan-Meier (`KaplanMeierStream`), as `empirical_quantiles` chooses. ``phase`` and
    ``speed`` (calls per group id) ask for the TTFT / generation p50 and p99 and the speed's
    p50 and p10 (type 7, as numpy's default quantile). ``chunks``, when given, stand in for
    the store's sorted times (`times_sql`'s columns and order): the bins of merged sketches.

    Raises:
        QueryError: DuckDB refused the query.
    """
    phase, speed = phase or {}, speed or {}
    k = len(groups)
    out = Quantiles(*(np.full((k, size), math.nan) for size in (4, 4, 4, 2, 2)))
    wide = (1.0 + level) / 2.0
    states: dict[tuple[int, int], Any] = {}
    plain = [g for g in groups if not g.cuts]
    sizes = np.array([max(g.events, 1) for g in plain], dtype=np.int64)
    main = OrderStatisticRanks.of(sizes, _Q, 1.0 - level)  # one call for every group: cheaper
    wide_ranks = OrderStatisticRanks.of(sizes, _Q2, 1.0 - wide)
    for i, g in enumerate(plain):
        row = np.array([i])
        states[g.gid, 0] = _Ranks(main.take(row), wide_ranks.take(row))
    for g in groups:
        if g.cuts:
            total = g.events + g.cuts
            km = KaplanMeierStream(total, _Q, level), KaplanMeierStream(total, _Q2, wide)
            states[g.gid, 0] = km
    for gid, n in phase.items():
        states[gid, 1], states[gid, 2] = Type7(n, (0.5, 0.99)), Type7(n, (0.5, 0.99))
    for gid, n in speed.items():
        states[gid, 3] = Type7(n, (0.5, 0.1))
    if not states:
        return Sorted(out, {}, {}, {})
    if chunks is None:
        assert store is not None  # noqa: S101 - without chunks the store is read
        chunks = _chunks(store, times_sql(query, [g.gid for g in groups], list(phase), list(speed)))
    _consume(states, chunks)
    _fill(out, [states[g.gid, 0] for g in groups])
    return Sorted(
        out,
        {gid: states[gid, 1].values() for gid in phase},
        {gid: states[gid, 2].values() for gid in phase},
        {gid: states[gid, 3].values() for gid in speed},
    )


def _consume(states: dict[tuple[int, int], Any], chunks: Iterable[Chunk]) -> None:
    """
    Feed each (group, series) run of the chunks to its state; runs come sorted by time.
    """
    for ids, series, t, d, c in chunks:
        change = np.flatnonzero((np.diff(ids) != 0) | (np.diff(series) != 0)) + 1
        for start, stop in itertools.pairwise([0, *change.tolist(), ids.size]):
            state = states[int(ids[start]), int(series[start])]
            part = slice(start, stop)
            if isinstance(state, _Ranks):
                state.add(t[part], d[part])
            else:
                state[0].add(t[part], d[part], c[part])
                state[1].add(t[part], d[part], c[part])


def _fill(out: Quantiles, states: list[Any]) -> None:
    for i, state in enumerate(states):
        if isinstance(state, _Ranks):
            out.value[i], out.low[i], out.high[i] = state.quantiles(state.main)
            _, out.low2[i], out.high2[i] = state.quantiles(state.wide)
        else:
            out.value[i], out.low[i], out.high[i] = state[0].quantiles()
            _, out.low2[i], out.high2[i] = state[1].quantiles()


Chunk = tuple[
    npt.NDArray[np.uint64], npt.NDArray[np.int64], _Array, npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]  # fmt: skip


def _chunks(store: Store, sql: str) -> Iterator[Chunk]:
    """
    The rows of ``sql`` (``_gid``, ``s``, ``t``, ``d``, ``c``) as numpy columns, a chunk at a time.
    """
    for batch in record_batches(store, sql, rows=CHUNK_ROWS):
        if batch.num_rows:
            gid, series, t, d, c = (
                np.asarray(batch.column(i).to_numpy(zero_copy_only=False)) for i in range(5)
            )
            yield gid, series, t, d, c
