"""
Approximate quantiles for very large stores, with the error of each row measured, not assumed.

`tail_report(..., approx=True)`: a group without cut calls takes its p50 to p99 from DuckDB's
``approx_quantile`` (a t-digest per group: one pass, memory per group fixed, no sort), and the
ends of its intervals from the same digest at the ranks the exact intervals use
(`OrderStatisticRanks`: the ``l``-th and ``u``-th of ``n`` sorted calls, read as quantile
``(l + 0.5) / n``). A t-digest's error has no useful a-priori bound for every distribution,
so one more counting pass measures it: for each quantile estimate ``v`` of a group, the share
of the group's calls below ``v`` and at or below it. ``approx_rank_error`` is, per row, the
largest distance between a target ``q`` (0.5 to 0.99) and that range: 0 when ``v`` is an
exact q-quantile, 0.001 when ``v`` sits 0.1 % of the calls away from one. A group with cut
calls keeps its exact Kaplan-Meier quantiles (sorted, see `_order.py`) and an error of 0.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailkit.fit.lowlevel import OrderStatisticRanks
from tailkit.store import Store
from tailkit.tails._order import GroupTimes, Quantiles, sorted_statistics
from tailkit.tails._query import EVENT, GROUP_ID, QUANTILES, TableQuery, group_id_sql


_Array = npt.NDArray[np.float64]
_Q = np.array(QUANTILES)
_Q2 = np.array([0.5, 0.99])


def approx_statistics(
    store: Store, query: TableQuery, groups: Sequence[GroupTimes], *, level: float
) -> tuple[Quantiles, _Array]:
    """
    Each group's quantiles and intervals, approximate where no call was cut, and their error.

    Returns:
        The quantiles (as `sorted_statistics` gives them) and, per group, the largest rank
        error measured over p50, p90, p95 and p99 (0.0 for the exact Kaplan-Meier groups).
    """
    k = len(groups)
    out = Quantiles(*(np.full((k, size), math.nan) for size in (4, 4, 4, 2, 2)))
    errors = np.zeros(k)
    cut = [i for i, g in enumerate(groups) if g.cuts]
    if cut:
        exact = sorted_statistics(store, query, [groups[i] for i in cut], level=level).latency
        for name in ("value", "low", "high", "low2", "high2"):
            getattr(out, name)[cut] = getattr(exact, name)
    plain = [i for i, g in enumerate(groups) if not g.cuts]
    if not plain:
        return out, errors
    sizes = np.array([max(groups[i].events, 1) for i in plain], dtype=np.int64)
    main = OrderStatisticRanks.of(sizes, _Q, 1.0 - level)
    wide = OrderStatisticRanks.of(sizes, _Q2, 1.0 - (1.0 + level) / 2.0)
    n = sizes[:, None].astype(np.float64)
    ends = [(main.low, main.n), (main.high, main.n), (wide.low, wide.n), (wide.high, wide.n)]
    fractions = [np.clip((index + 0.5) / n, 0.0, 1.0) for index, _ in ends]
    grid = np.unique(np.concatenate([_Q, *(f.ravel() for f in fractions)]))
    gids = [groups[i].gid for i in plain]
    wanted = [np.broadcast_to(_Q, (len(plain), _Q.size)), *fractions]
    picks = np.concatenate([np.searchsorted(grid, f) for f in wanted], axis=1)
    rows = _digest(store, query, gids, grid, picks)
    parts = np.split(rows, np.cumsum([f.shape[1] for f in wanted])[:-1], axis=1)
    value = parts[0]
    low = np.where(main.low >= 0, parts[1], 0.0)
    high = np.where(main.high < main.n, parts[2], math.inf)
    out.value[plain] = value
    out.low[plain], out.high[plain] = np.minimum(low, value), np.maximum(high, value)
    out.low2[plain] = np.where(wide.low >= 0, parts[3], 0.0)
    out.high2[plain] = np.where(wide.high < wide.n, parts[4], math.inf)
    errors[plain] = _rank_errors(store, query, gids, value, sizes)
    return out, errors


def _digest(
    store: Store,
    query: TableQuery,
    gids: list[int],
    grid: _Array,
    picks: npt.NDArray[np.intp],
) -> _Array:
    """
    Per group (rows, in the order of ``gids``), its t-digest read at its own fractions.

    DuckDB evaluates ``approx_quantile`` of each group's finished latencies at every fraction
    of ``grid`` (the union of all groups' fractions) and keeps, in SQL, only the group's row
    of ``picks`` (indices into ``grid``): the whole grid per group never reaches Python.
    """
    fractions = "[" + ", ".join(repr(float(f)) for f in grid) + "]"
    index = "[" + ", ".join("[" + ", ".join(str(int(i) + 1) for i in row) + "]" for row in picks)
    digests = (
        f"SELECT {group_id_sql(query.keys)} AS {GROUP_ID}, "
        f"approx_quantile(total_s, {fractions}) AS _d FROM {query.source_sql()} "
        f"WHERE {EVENT} AND {_among(query, gids)} GROUP BY ALL"
    )
    wanted = f"SELECT unnest({_ubigints(gids)}) AS {GROUP_ID}, unnest({index}]::INTEGER[][]) AS _i"
    sql = (
        f"SELECT {GROUP_ID}, list_select(_d, _i) FROM ({digests}) "
        f"JOIN ({wanted}) USING ({GROUP_ID})"
    )
    found = {int(g): v for g, v in store.fetchall(sql)}
    missing = [math.nan] * picks.shape[1]
    return np.array([found.get(g, missing) for g in gids], dtype=np.float64).reshape(
        len(gids), picks.shape[1]
    )


def _rank_errors(
    store: Store, query: TableQuery, gids: list[int], value: _Array, sizes: npt.NDArray[np.int64]
) -> _Array:
    """
    Per group, the largest distance between ``q`` and the share of calls at its estimate.
    """
    names = [f"_v{j}" for j in range(_Q.size)]
    values = ", ".join(f"unnest({_list(value[:, j])}) AS {name}" for j, name in enumerate(names))
    table = f"SELECT unnest({_ubigints(gids)}) AS {GROUP_ID}, {values}"
    counts = ", ".join(
        f"count(*) FILTER (total_s < {v}), count(*) FILTER (total_s <= {v})" for v in names
    )
    sql = (
        f"SELECT c.{GROUP_ID}, {counts} FROM (SELECT {group_id_sql(query.keys)} AS {GROUP_ID}, "
        f"total_s FROM {query.source_sql()} WHERE {EVENT}) AS c "
        f"JOIN ({table}) AS e USING ({GROUP_ID}) GROUP BY ALL"
    )
    found = {int(r[0]): r[1:] for r in store.fetchall(sql)}
    errors = np.zeros(len(gids))
    for i, gid in enumerate(gids):
        got = found.get(gid)
        if got is None:
            errors[i] = math.nan
            continue
        n = float(sizes[i])
        for j, q in enumerate(QUANTILES):
            below, at_or_below = got[2 * j] / n, got[2 * j + 1] / n
            errors[i] = max(errors[i], below - q, q - at_or_below, 0.0)
    return errors


def _among(query: TableQuery, gids: list[int]) -> str:
    return f"{group_id_sql(query.keys)} IN (SELECT unnest({_ubigints(gids)}))"


def _ubigints(values: list[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]::UBIGINT[]"


def _list(values: _Array) -> str:
    return (
        "["
        + ", ".join(repr(float(v)) if math.isfinite(v) else "'NaN'" for v in values)
        + "]::DOUBLE[]"
    )
