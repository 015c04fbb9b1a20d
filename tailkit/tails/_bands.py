"""
Exact TTFT, generation and speed quantiles in bounded memory: a narrow band around an estimate.

DuckDB's ``quantile_cont`` holds every value of a group and cannot spill, so when a store is
too big for it (`holistic_fits`) the aggregating pass estimates, per group, where each wanted
quantile lies with DuckDB's ``approx_quantile`` (a t-digest of fixed size) at ``q - BAND`` and
``q + BAND``. One more scan (`band_sql`) counts the values below each band and lists those
inside it: the two order statistics a type-7 quantile interpolates are in the list whenever
the estimate was off by less than `BAND` in rank (a t-digest is far closer), and the quantile
is then exact, read from the list in SQL (`band_quantile_sql`, as `Type7` computes it). A
band that missed sends its group to the sorted pass (`sorted_statistics`), so no value is ever
an estimate. Memory: the lists hold about ``2 * BAND`` of each series' values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailkit.store import Store
from tailkit.store.lowlevel import band_quantile_sql
from tailkit.tails._query import GROUP_ID, PHASE, SPEED, TableQuery, group_id_sql


BAND = 0.005  # each side of a quantile, in rank: t-digest's error is far smaller
SERIES = {  # aggregate column: (value SQL, which calls, quantiles)
    "ttft_q": ("ttft_s", PHASE, (0.5, 0.99)),
    "gen_q": ("total_s - ttft_s", PHASE, (0.5, 0.99)),
    "speed_q": ("(output_tokens - 1) / (total_s - ttft_s)", SPEED, (0.5, 0.1)),
}
COUNTS = {"ttft_q": "n_phase", "gen_q": "n_phase", "speed_q": "n_speed"}


def band_estimates_sql() -> str:
    """
    The aggregating pass's columns without `holistic_fits`: each series' band edges.

    Columns ``ttft_band``, ``gen_band`` and ``speed_band``: per quantile of `SERIES`, the
    approximate quantiles at ``q - BAND`` and ``q + BAND`` (clipped to 0..1), in that order;
    ``ttft_q``, ``gen_q`` and ``speed_q`` are NULL until `exact_in_bands` fills them in.
    """
    parts = []
    for name, (value, calls, qs) in SERIES.items():
        edges = [min(max(q + side * BAND, 0.0), 1.0) for q in qs for side in (-1, 1)]
        stem = name.removesuffix("_q")
        parts.append(
            f"approx_quantile(CASE WHEN {calls} THEN ({value})::DOUBLE END, {edges}) "
            f"AS {stem}_band, NULL::DOUBLE[] AS {name}"
        )
    return ", " + ", ".join(parts)


NO_ESTIMATES = ", " + ", ".join(
    f"NULL::DOUBLE[] AS {name}, NULL::DOUBLE[] AS {name.removesuffix('_q')}_band" for name in SERIES
)
"""The aggregating pass's columns when even the estimates do not fit: every group is sorted."""


@dataclass(frozen=True, slots=True)
class _Want:
    """
    Strictly private: one group's series and the calls it has.
    """

    gid: int
    name: str
    n: int
    edges: list[float]


def band_sql(query: TableQuery, wanted: Sequence[_Want]) -> str:
    """
    One scan: per group, the values below each band and inside it, and the quantiles they give.

    Columns ``_gid``, then per series ``{stem}_q{j}`` for its quantiles ``j`` = 0, 1: the exact
    value (`band_quantile_sql`), NULL where the band missed it or the group was not wanted.
    """
    gids = sorted({w.gid for w in wanted})
    edge_cols: dict[str, list[Any]] = {}
    for name in SERIES:
        stem = name.removesuffix("_q")
        by_gid = {w.gid: w for w in wanted if w.name == name}
        edge_cols[f"{stem}_n"] = [by_gid[g].n if g in by_gid else None for g in gids]
        for k in range(4):
            edge_cols[f"{stem}_e{k}"] = [by_gid[g].edges[k] if g in by_gid else None for g in gids]
    unnests = ", ".join(
        f"unnest([{', '.join('NULL' if v is None else repr(float(v)) for v in vals)}]"
        f"::DOUBLE[]) AS {col}"
        for col, vals in edge_cols.items()
    )
    table = f"SELECT unnest([{', '.join(str(g) for g in gids)}]::UBIGINT[]) AS _gid, {unnests}"
    values = ", ".join(
        f"CASE WHEN {calls} THEN ({value})::DOUBLE END AS {name.removesuffix('_q')}_v"
        for name, (value, calls, _) in SERIES.items()
    )
    rows = f"SELECT {group_id_sql(query.keys)} AS {GROUP_ID}, {values} FROM {query.source_sql()}"
    aggs, picks = [], []
    for name, (_, _, qs) in SERIES.items():
        stem = name.removesuffix("_q")
        v = f"{stem}_v"
        aggs.append(f"any_value(b.{stem}_n) AS {stem}_n")
        for j, q in enumerate(qs):
            lo, hi = f"b.{stem}_e{2 * j}", f"b.{stem}_e{2 * j + 1}"
            aggs.append(
                f"count(*) FILTER ({v} < {lo}) AS {stem}_below{j}, "
                f"list_sort(list({v}) FILTER ({v} >= {lo} AND {v} <= {hi})) AS {stem}_in{j}"
            )
            exact = band_quantile_sql(f"{stem}_n", f"{stem}_below{j}", f"{stem}_in{j}", q)
            picks.append(f"{exact} AS {stem}_q{j}")
    return (
        f"SELECT {GROUP_ID}, {', '.join(picks)} FROM (SELECT r.{GROUP_ID}, {', '.join(aggs)} "
        f"FROM ({rows}) AS r JOIN ({table}) AS b ON r.{GROUP_ID} = b._gid "
        f"GROUP BY r.{GROUP_ID})"
    )


def exact_in_bands(
    store: Store, query: TableQuery, aggs: list[dict[str, Any]]
) -> tuple[dict[int, int], dict[int, int]]:
    """
    Fill in each group's ``ttft_q``, ``gen_q`` and ``speed_q`` from their bands, exactly.

    Args:
        store: The store.
        query: The table's query.
        aggs: The aggregating pass's rows (`band_estimates_sql`'s columns), changed in place.

    Returns:
        The groups a band missed or that have none (`NO_ESTIMATES`), for the sorted pass:
        TTFT or generation (group id: its streamed calls) and speed (group id: its calls
        whose speed counts).

    Raises:
        QueryError: DuckDB refused the query.
    """
    phase: dict[int, int] = {}
    speed: dict[int, int] = {}
    wanted = []
    for a in aggs:
        for name in SERIES:
            gid, n = int(a[GROUP_ID]), int(a[COUNTS[name]])
            if n and a[_band(name)] is None:
                (speed if name == "speed_q" else phase)[gid] = n
            elif n:
                wanted.append(_Want(gid, name, n, list(a[_band(name)])))
    if not wanted:
        return phase, speed
    found = {int(r[GROUP_ID]): r for r in store.arrow(band_sql(query, wanted)).to_pylist()}
    by_gid = {int(a[GROUP_ID]): a for a in aggs}
    for w in wanted:
        stem, row = w.name.removesuffix("_q"), found.get(w.gid, {})
        values = [row.get(f"{stem}_q{j}") for j in range(len(SERIES[w.name][2]))]
        if any(v is None for v in values):
            (speed if w.name == "speed_q" else phase)[w.gid] = w.n
        else:
            by_gid[w.gid][w.name] = values
    return phase, speed


def _band(name: str) -> str:
    return f"{name.removesuffix('_q')}_band"
