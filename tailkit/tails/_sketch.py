"""
DDSketch bins in SQL: each group's latencies as counts per logarithmic bucket, mergeable.

A quantile sketch for heavy tails must bound the error of p99 *in seconds*, relative to it:
a 1 % rank error (KLL's kind of guarantee) at p99 of a heavy tail can be anywhere from p98 to
p100, a factor of two in seconds. DDSketch (Masson, Rim and Lee, VLDB 2019) guarantees a
relative error on the value of every quantile: a value ``x > 0`` goes to bucket
``k = ceil(ln x / ln gamma)`` with ``gamma = (1 + alpha) / (1 - alpha)``, the bucket's value
``2 gamma^k / (gamma + 1)`` is within ``alpha`` of every value in it, and two sketches merge by
adding counts per bucket (associative, exact). Its size grows with the log of the range, not
with the calls: at ``alpha`` = 0.5 % a group whose latencies span 0.1 s to 1,000 s has at most
about 920 buckets. The buckets are computed by DuckDB (`bins_sql`, one scan), so the sketch
never loops over calls in Python.

The bins stand in for `times_sql`'s sorted distinct times (`bins_chunk`): the same order
statistics, Kaplan-Meier curves and type-7 quantiles read them (`sorted_statistics`), so a
quantile from the bins is within ``alpha`` of the exact one (its order statistics each are).
Kaplan-Meier needs one more care: calls cut inside a bucket count as at risk for all of its
events (as if cut last); the curve with them cut first is the other extreme, and the exact
curve lies between the two (`km_bound`).
"""

from __future__ import annotations

import math

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import polars as pl

from tailkit.tails._order import Chunk
from tailkit.tails._query import GROUP_ID, TIME_SERIES, TableQuery, group_id_sql


RELATIVE_ACCURACY = 0.005
"""DDSketch's ``alpha``: every quantile from the bins is within 0.5 % of the exact value."""
GAMMA = (1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)
_LN_GAMMA = math.log(GAMMA)
ZERO_KEY = -(2**31)  # values at or below `MIN_POSITIVE` (a TTFT of 0): their value is 0
MIN_POSITIVE = 1e-9
_Array = npt.NDArray[np.float64]


def key_sql(value: str) -> str:
    """
    SQL for the bucket of a value (``INTEGER``): `ZERO_KEY` at or below `MIN_POSITIVE`.
    """
    return (
        f"CASE WHEN ({value}) > {MIN_POSITIVE} THEN ceil(ln({value}) / {_LN_GAMMA!r})::INTEGER "
        f"ELSE {ZERO_KEY} END"
    )


def key_values(keys: npt.NDArray[np.int64]) -> _Array:
    """
    Each bucket's value: within `RELATIVE_ACCURACY` of every value in the bucket.
    """
    k = keys.astype(np.float64)
    return np.where(keys == ZERO_KEY, 0.0, 2.0 * np.exp(k * _LN_GAMMA) / (GAMMA + 1.0))


def bins_sql(query: TableQuery) -> str:
    """
    One scan: per group, series and bucket, the finished calls (``d``) and the cut ones (``c``).

    The series of `times_sql` (0: latency and cut age, 1: TTFT, 2: generation, 3: speed).
    Columns ``_gid``, ``s`` (``TINYINT``), ``k`` (``INTEGER``), ``d`` and ``c`` (``BIGINT``).
    """
    gid, src = group_id_sql(query.keys), query.source_sql()
    columns = ", ".join(
        f"CASE WHEN {where} THEN {key_sql(f'({value})::DOUBLE')} END AS _k{i}"
        for i, (_, value, _, where) in enumerate(TIME_SERIES)
    )
    sets = ", ".join(f"({GROUP_ID}, _k{i})" for i in range(len(TIME_SERIES)))
    picks = " ".join(
        f"WHEN _k{i} IS NOT NULL THEN {series}" for i, (series, *_) in enumerate(TIME_SERIES)
    )
    key = "coalesce(" + ", ".join(f"_k{i}" for i in range(len(TIME_SERIES))) + ")"
    event = " ".join(
        f"WHEN _k{i} IS NOT NULL THEN n * {e}" for i, (_, _, e, _) in enumerate(TIME_SERIES)
    )
    # Each set of the GROUPING SETS leaves the other keys NULL: the one set tells the series.
    return (
        f"SELECT {GROUP_ID}, (CASE {picks} END)::TINYINT AS s, {key} AS k, "
        f"sum(CASE {event} END)::BIGINT AS d, sum(n - CASE {event} END)::BIGINT AS c "
        f"FROM (SELECT {GROUP_ID}, {', '.join(f'_k{i}' for i in range(len(TIME_SERIES)))}, "
        f"count(*) AS n FROM (SELECT {gid} AS {GROUP_ID}, {columns} FROM {src}) "
        f"GROUP BY GROUPING SETS ({sets})) WHERE {key} IS NOT NULL GROUP BY ALL"
    )


def bins_chunk(bins: pl.DataFrame, wanted: Sequence[tuple[int, int]], *, cuts_first: bool) -> Chunk:
    """
    The bins of the ``(group id, series)`` pairs wanted, as `sorted_statistics` reads times.

    With ``cuts_first`` each bucket's cut calls come just before its finished ones (a time
    a hair lower), the other extreme of the order of ties inside a bucket.
    """
    want = pl.DataFrame(
        {GROUP_ID: [w[0] for w in wanted], "s": [w[1] for w in wanted]},
        schema={GROUP_ID: pl.UInt64, "s": pl.Int8},
    )
    rows = bins.join(want, on=[GROUP_ID, "s"], how="semi").sort(GROUP_ID, "s", "k")
    gid = rows[GROUP_ID].to_numpy().astype(np.uint64)
    series = rows["s"].to_numpy().astype(np.int64)
    t = key_values(rows["k"].to_numpy().astype(np.int64))
    d = rows["d"].to_numpy().astype(np.int64)
    c = rows["c"].to_numpy().astype(np.int64)
    if not cuts_first:
        return gid, series, t, d, c
    cut = c > 0
    early = np.nextafter(t[cut], -np.inf)
    gid = np.concatenate([gid, gid[cut]])
    series = np.concatenate([series, series[cut]])
    t = np.concatenate([t, early])
    d = np.concatenate([d, np.zeros(int(cut.sum()), dtype=np.int64)])
    c = np.concatenate([np.where(cut, 0, c), c[cut]])
    order = np.lexsort((t, series, gid))
    return gid[order], series[order], t[order], d[order], c[order]


def km_bound(reported: _Array, earliest: _Array) -> _Array:
    """
    Per group, the relative error bound of Kaplan-Meier quantiles read from bins.

    ``reported`` are the quantiles (rows: groups) with cut calls counted last in their
    bucket, ``earliest`` those with them counted first: the exact curve crosses each level
    between the two, so the exact quantile lies between the lower edge of the earlier one's
    bucket and the upper edge of the reported one's; the bound is the larger relative distance
    from the reported value to those edges, at least `RELATIVE_ACCURACY` (NaN: no quantile).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.ceil(np.log(earliest) / _LN_GAMMA)
        lower_edge = np.exp((k - 1.0) * _LN_GAMMA)
        spread = np.where(earliest > 0, reported / lower_edge - 1.0, math.nan)
    worst = np.nanmax(np.where(np.isfinite(spread), spread, math.nan), axis=1, initial=0.0)
    # one bucket apart is alpha itself, up to rounding: say alpha, not alpha + 1e-16
    bound = np.where(worst <= RELATIVE_ACCURACY * (1 + 1e-9), RELATIVE_ACCURACY, worst)
    return np.asarray(bound, dtype=np.float64)
