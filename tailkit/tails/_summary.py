"""
Mergeable per-group summaries: the tail table of many partitions, without their calls.

A partition of the calls (a file, a day, a worker's share) is read twice. `aggregate` gives
per group exact counts and the log-latency moments, DDSketch bins of the latency, cut ages,
TTFT, generation time and speed (`_sketch.py`), and its repeat attempts of slow calls with
the bins of first attempts they are judged by (`_pairs.py`). Once every partition's are
merged, `draw` gives the partition's share of the seeded samples the fits and verdicts read:
the ``fit_max_n`` calls of each group and the `MAX_ROUTE_CALLS` of each route with the
smallest draws (`samples_sql`), pre-filtered with the counts of all partitions so that each
ships about its share. `merge` adds counts and bins,
pools the moments (Chan's formula) and keeps the smallest draws of the union: associative and
exact, so any tree of merges gives the summary of all the calls, and the samples are the very
calls the store's table draws. `summary_report` builds the table from a summary with the
table's own code (`build_report`): the same columns and verdicts, quantiles within the
sketch's bound (column ``quantile_rel_error``).

What a partition cannot know: a repeat attempt pairs with its first attempt only when both
are in it (keep each run's calls in one file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from tailkit.store import Store
from tailkit.store.lowlevel import keep_threshold
from tailkit.tails._bands import NO_ESTIMATES
from tailkit.tails._order import Quantiles, sorted_statistics
from tailkit.tails._pairs import firsts_sql, judge, merge_counts, pairs_sql
from tailkit.tails._query import (
    GROUP_ID,
    ROUTE_ID,
    TableQuery,
    groups_sql,
    order_columns,
    samples_sql,
)
from tailkit.tails._samples import CHUNK_ROWS, Calls, read_samples
from tailkit.tails._sketch import RELATIVE_ACCURACY, bins_chunk, bins_sql, km_bound
from tailkit.tails._table import DescribedGroup, TailReport, build_report, group_times
from tailkit.tails._verdicts import MAX_ROUTE_CALLS


_SUMS = ("n", "n_ok", "n_censored", "n_failed", "n_speed", "n_phase", "n_listed", "n_events",
         "n_cuts", "n_log")  # fmt: skip
_PHASE = ("ttft_q", "gen_q", "speed_q")


@dataclass(frozen=True, slots=True)
class Summary:
    """
    What the tail table needs of some calls, in memory that grows with groups, not calls.

    Attributes:
        groups: Per group (``_gid``): its key columns, ``_rid``, the counts of `groups_sql`,
            ``_order_*``, ``event_min``, ``event_max``, ``log_mean`` and ``log_m2`` (the sum of
            squared deviations of log latency over ``n_log`` calls).
        bins: ``_gid``, ``s`` (series), ``k`` (bucket), ``d`` (finished), ``c`` (cut).
        samples: `samples_sql`'s rows (``_gid``, ``_rid``, ``_h``, ``in_group``,
            ``in_route`` and the calls' fields).
        pairs: Slow first attempts and their fresh attempts (`pairs_sql`): the ``by``
            columns, the fresh attempt's ``_provider``, ``_model``, ``_step``, ``_total``, ``n``.
        firsts: DDSketch bins (``k``, ``n``) of finished first attempts per ``provider``,
            ``model`` and ``step``: what the fresh attempts are judged by (`_pairs.py`).
        partitions: How many partitions were merged into it.
        group_size: Calls per group sample (the fits' ``fit_max_n``).
        route_size: Calls per route sample.
    """

    groups: pl.DataFrame
    bins: pl.DataFrame
    samples: pl.DataFrame
    pairs: pl.DataFrame
    firsts: pl.DataFrame
    partitions: int = 1
    group_size: int = 2000
    route_size: int = MAX_ROUTE_CALLS

    def nbytes(self) -> int:
        """
        The summary's size in memory (about what a worker ships).
        """
        frames = (self.groups, self.bins, self.samples, self.pairs, self.firsts)
        return int(sum(f.estimated_size() for f in frames))


def tail_summary(
    store: Store,
    query: TableQuery,
    *,
    group_size: int = 2000,
    route_size: int = MAX_ROUTE_CALLS,
    min_group: int = 1,
) -> Summary:
    """
    The whole summary of a store's calls, taken as one partition: `aggregate`, then `draw`.

    Raises:
        QueryError: DuckDB refused a query (a ``where`` that is not valid SQL).
    """
    summary = aggregate(store, query, group_size=group_size, route_size=route_size)
    return replace(summary, samples=draw(store, query, summary, min_group=min_group))


def aggregate(
    store: Store,
    query: TableQuery,
    *,
    group_size: int = 2000,
    route_size: int = MAX_ROUTE_CALLS,
) -> Summary:
    """
    A partition's counts, moments, bins and repeat attempts (four scans), without samples.

    Raises:
        QueryError: DuckDB refused a query (a ``where`` that is not valid SQL).
    """
    groups = _frame(store, groups_sql(query, phase_columns=NO_ESTIMATES))
    groups = groups.drop([c for c in groups.columns if c.endswith(("_q", "_band"))])
    groups = groups.with_columns(
        (pl.col("log_sd").fill_null(0.0) ** 2 * pl.col("n_log")).alias("log_m2")
    ).drop("log_sd")
    bins = _frame(store, bins_sql(query)).cast({"s": pl.Int8, "k": pl.Int32})
    firsts = _frame(store, firsts_sql(query)).cast({"k": pl.Int32})
    pairs = _frame(store, pairs_sql(query))
    return Summary(groups, bins, pl.DataFrame(), pairs, firsts, 1, group_size, route_size)


def draw(store: Store, query: TableQuery, counts: Summary, *, min_group: int = 1) -> pl.DataFrame:
    """
    A partition's share of the seeded samples of all partitions (one scan).

    ``counts`` is the merged summary of every partition (`aggregate`, `merge`): its counts
    set the draw below which a call can be among the smallest of its group or route over all
    partitions (`keep_threshold`), so each partition ships about its share of the samples, not
    a sample of its own. The groups and routes are those the table describes (``min_group``),
    so the partitions' rows merge (`merge_samples`) into the rows the store's table draws.
    Rows come sorted by route and draw, as the table reads them.

    Raises:
        QueryError: DuckDB refused a query.
    """
    kept = counts.groups.filter(pl.col("n") >= min_group)
    if not kept.height:
        return pl.DataFrame()
    groups: dict[int, float] = {}
    routes: dict[int, int] = {}
    for gid, rid, listed, ok in kept.select(GROUP_ID, ROUTE_ID, "n_listed", "n_ok").iter_rows():
        # as the table: a group with under two finished calls has no sample of its own
        described = listed > 0 and ok >= 2
        groups[int(gid)] = keep_threshold(listed, counts.group_size) if described else 0.0
        routes[int(rid)] = routes.get(int(rid), 0) + int(listed)
    sql = samples_sql(
        query,
        groups,
        {r: keep_threshold(n, counts.route_size) for r, n in routes.items()},
        group_size=counts.group_size,
        route_size=counts.route_size,
    )
    return _frame(store, f"{sql} ORDER BY {ROUTE_ID}, _h")  # as the table reads them


def _frame(store: Store, sql: str) -> pl.DataFrame:
    frame = pl.from_arrow(store.arrow(sql))
    assert isinstance(frame, pl.DataFrame)  # noqa: S101 - a table converts to a frame
    return frame


def merge(summaries: Sequence[Summary]) -> Summary:
    """
    One summary of all the calls of ``summaries``: associative, exact, in any order.

    Raises:
        ValueError: No summaries, or summaries drawn with different sample sizes.
    """
    if not summaries:
        msg = "merge needs at least one summary"
        raise ValueError(msg)
    first = summaries[0]
    if any((s.group_size, s.route_size) != (first.group_size, first.route_size) for s in summaries):
        msg = "summaries drawn with different sample sizes cannot be merged"
        raise ValueError(msg)
    if len(summaries) == 1:
        return first
    return replace(
        first,
        groups=_merge_groups(pl.concat([s.groups for s in summaries], how="vertical_relaxed")),
        bins=pl.concat([s.bins for s in summaries])
        .group_by(GROUP_ID, "s", "k")
        .agg(pl.col("d").sum(), pl.col("c").sum()),
        samples=merge_samples([s.samples for s in summaries], first),
        pairs=merge_counts([s.pairs for s in summaries]),
        firsts=merge_counts([s.firsts for s in summaries]),
        partitions=sum(s.partitions for s in summaries),
    )


def _merge_groups(groups: pl.DataFrame) -> pl.DataFrame:
    keys = [c for c in groups.columns if c not in (*_SUMS, GROUP_ID, "log_mean", "log_m2")
            and not c.startswith(("_order_", "event_"))]  # fmt: skip
    # Chan et al.: the pooled mean, and the squared deviations within plus between partitions
    weighted = (pl.col("log_mean").fill_null(0.0) * pl.col("n_log")).sum() / pl.col("n_log").sum()
    pooled = groups.with_columns(weighted.over(GROUP_ID).alias("_mean"))
    between = pl.col("n_log") * (pl.col("log_mean").fill_null(0.0) - pl.col("_mean")) ** 2
    return (
        pooled.group_by(GROUP_ID, maintain_order=True)
        .agg(
            *(pl.col(k).first() for k in keys),
            *(pl.col(c).sum() for c in _SUMS),
            *(pl.col(c).min() for c in groups.columns if c.startswith("_order_")),
            pl.col("event_min").min(),
            pl.col("event_max").max(),
            pl.when(pl.col("n_log").sum() > 0).then(pl.col("_mean").first()).alias("log_mean"),
            (pl.col("log_m2").sum() + between.sum()).alias("log_m2"),
        )
        .select(groups.columns)
    )


def merge_samples(samples: Sequence[pl.DataFrame], sizes: Summary) -> pl.DataFrame:
    """
    The rows of several partitions' samples (`draw`) that are among the smallest draws of all.

    ``sizes`` gives the sample sizes (its ``group_size`` and ``route_size``).
    """
    samples = [s for s in samples if s.height]
    if not samples:
        return pl.DataFrame()
    rows = pl.concat(samples, how="vertical_relaxed", rechunk=False).lazy()
    rank = pl.col("_h").rank("ordinal")
    # sorted as the table reads them (by route, then draw), so it need not sort a copy
    return (
        rows.with_columns(
            in_group=pl.col("in_group") & (rank.over(GROUP_ID, "in_group") <= sizes.group_size),
            in_route=pl.col("in_route") & (rank.over(ROUTE_ID, "in_route") <= sizes.route_size),
        )
        .filter(pl.col("in_group") | pl.col("in_route"))
        .sort(ROUTE_ID, "_h")
        .collect()
    )


class SummarySource:
    """
    The table's numbers from a (merged) summary: `TableSource` for `build_report`.
    """

    def __init__(self, summary: Summary) -> None:
        self.summary = summary

    def groups(self, query: TableQuery) -> pl.DataFrame:
        g = self.summary.groups
        nulls = [pl.lit(None, dtype=pl.List(pl.Float64)).alias(c) for c in _PHASE]
        sd = pl.when(pl.col("n_log") > 0).then((pl.col("log_m2") / pl.col("n_log")).sqrt())
        return g.with_columns(*nulls, sd.alias("log_sd")).sort(
            order_columns(query), nulls_last=True, maintain_order=True
        )

    def latency(
        self,
        query: TableQuery,
        described: list[DescribedGroup],
        aggs: list[dict[str, Any]],
        level: float,
    ) -> tuple[Quantiles, dict[str, list[float]]]:
        times = group_times(described)
        phase = {int(a[GROUP_ID]): int(a["n_phase"]) for a in aggs if a["n_phase"]}
        speed = {int(a[GROUP_ID]): int(a["n_speed"]) for a in aggs if a["n_speed"]}
        wanted = [(t.gid, 0) for t in times] + [(g, s) for g in phase for s in (1, 2)]
        wanted += [(g, 3) for g in speed]
        chunk = bins_chunk(self.summary.bins, wanted, cuts_first=False)
        found = sorted_statistics(
            None, query, times, level=level, phase=phase, speed=speed, chunks=[chunk]
        )
        found.fill(aggs)
        bound = np.full(len(times), RELATIVE_ACCURACY)
        cut = [i for i, t in enumerate(times) if t.cuts]
        if cut:
            early = bins_chunk(self.summary.bins, [(times[i].gid, 0) for i in cut], cuts_first=True)
            other = sorted_statistics(
                None, query, [times[i] for i in cut], level=level, chunks=[early]
            )
            bound[cut] = km_bound(found.latency.value[cut], other.latency.value)
        return found.latency, {"quantile_rel_error": bound.tolist()}

    def hedges(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        return judge(self.summary.pairs, self.summary.firsts, query.by)

    def paired(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        # Summaries carry no job keys yet: the verdicts say single calls only look transient.
        return {}

    def samples(
        self,
        query: TableQuery,
        groups: dict[int, int | None],
        routes: dict[int, int],
        *,
        group_size: int,
        route_size: int,
        on_route: Callable[[int, Calls], None],
    ) -> dict[int, Calls]:
        rows = self.summary.samples
        if not rows.height:
            return {}
        wanted = pl.Series([g for g, n in groups.items() if n is not None], dtype=pl.UInt64)
        in_group = pl.col("in_group") & pl.col(GROUP_ID).is_in(wanted.implode())
        in_route = pl.col("in_route") & pl.col(ROUTE_ID).is_in(
            pl.Series(list(routes), dtype=pl.UInt64).implode()
        )
        # drawn for these groups and routes (`draw`'s min_group), unless drawn for others
        other = (pl.col("in_group") & ~in_group) | (pl.col("in_route") & ~in_route)
        if rows.select(other.any()).item():
            rows = rows.with_columns(in_group.alias("in_group"), in_route.alias("in_route"))
            rows = rows.filter(pl.col("in_group") | pl.col("in_route")).sort(ROUTE_ID, "_h")
        batches: Iterable[Any] = rows.to_arrow().to_batches(max_chunksize=CHUNK_ROWS)
        return read_samples(batches, on_route)

    def every_call(self, query: TableQuery, gid: int) -> Calls | None:
        return None


def summary_report(
    summary: Summary,
    query: TableQuery | None = None,
    *,
    min_group: int = 1,
    level: float = 0.95,
    window_s: float = 60.0,
    fits: bool = True,
) -> TailReport:
    """
    The tail table and verdicts of a summary, by the table's own code (`build_report`).

    Quantiles p50 to p99, TTFT, generation and speed come from the DDSketch bins: column
    ``quantile_rel_error`` bounds, per row, the relative distance of p50..p99 from the exact
    values (`RELATIVE_ACCURACY`, more where Kaplan-Meier curves meet cut calls inside a
    bucket). The fits and verdicts read the same seeded samples as the store's table;
    ``fits`` as for `tail_report`.
    """
    return build_report(
        SummarySource(summary), query or TableQuery(),
        min_group=min_group, level=level, fit_max_n=summary.group_size, window_s=window_s,
        fits=fits,
    )  # fmt: skip
