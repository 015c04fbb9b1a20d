"""
The tail table: one row per group (route, step, token bucket, …) saying where its tail is.

Memory grows with the number of groups, not of calls. One SQL pass counts each group's calls
and aggregates what is a count, a quantile or a moment: the shares, tokens per second, the
TTFT and generation quantiles (in DuckDB's memory while they fit, else exactly from a narrow
band around an estimate, `_bands.py`), the mean and sd of log latency. A second reads each group's
latencies sorted by DuckDB, in chunks, for the exact quantiles and their intervals: order
statistics at ranks computed from n and the level, or Kaplan-Meier where calls were cut (see
`_order.py`) -- the same numbers as `tailkit.fit.empirical_quantiles` on every call. Per
group, a seeded sample of at most ``fit_max_n`` calls drawn inside DuckDB
(`tailkit.store.group_sample_sql`) feeds the goodness-of-fit verdict, the transient-tail
mixture, the phase split's shares and, where calls were cut, the censoring-aware lognormal
fit; per route, a sample of at most `MAX_ROUTE_CALLS` calls feeds its work-vs-transient
verdict and clustering test. Without cut calls the lognormal fit is closed form on every call
(SQL's mean and sd of log latency); with cut calls it has, on top of its own interval, the
sampling error of a ``fit_max_n``-call sample: for 2,000 calls about ``sigma / 45`` on ``mu``
and ``sigma / 60`` on ``sigma`` (one standard error, less where fewer calls were cut).
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from tailkit.errors import OutOfMemoryError
from tailkit.fit import TransientTailFit, fit_lognormal, phase_split, tail_warning
from tailkit.fit.lowlevel import fit_transient_tails, goodness_of_fit_many
from tailkit.store import Store
from tailkit.store.lowlevel import paired_calls_sql
from tailkit.tails._bands import NO_ESTIMATES, band_estimates_sql, exact_in_bands
from tailkit.tails._order import GroupTimes, Quantiles, sorted_statistics
from tailkit.tails._query import (
    GROUP_ID,
    QUANTILES,
    ROUTE_ID,
    TableQuery,
    groups_sql,
    hedges_sql,
    order_columns,
)
from tailkit.tails._samples import Calls, fetch_calls, fetch_samples
from tailkit.tails._verdicts import MAX_ROUTE_CALLS, RouteAccumulator


_Array = npt.NDArray[np.float64]
_NAMES = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}
FIT_COLUMNS = (
    "best_family",
    "transient_share",
    "transient_share_lo",
    "transient_share_hi",
    "transient_scale",
    "transient_mixture",
)
"""
The columns of the family ranking and the transient-tail mixture: computed with ``fits``.

They cost most of the table's per-group work (three more maximum-likelihood families and a
mixture searched from five starts with a profile-likelihood interval, on every row), and none
is needed for a row's quantiles, intervals, lognormal fit, verdict or phase split, nor for the
route's verdict, which regresses on the calls' size itself. The library computes them by
default (``tail_report(fits=True)``); the ``stats`` command only when asked, and otherwise
leaves them null and says so in its JSON under ``"fits"``.
"""
WARNING_MAX_CALLS = 1_000_000  # a warning's Kaplan-Meier curve reads up to this many calls


def fetch_groups(
    store: Store, query: TableQuery, *, approx: bool = False, holistic: bool = True
) -> pl.DataFrame:
    """
    The one aggregating pass (`groups_sql`): a row per group, in table order.
    """
    if holistic:
        table = store.arrow(groups_sql(query, approx=approx))
    else:
        try:
            table = store.arrow(groups_sql(query, phase_columns=band_estimates_sql()))
        except OutOfMemoryError:  # a t-digest per group and series: too many groups for it
            table = store.arrow(groups_sql(query, phase_columns=NO_ESTIMATES))
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)  # noqa: S101 - a table converts to a frame
    return frame.sort(order_columns(query), nulls_last=True, maintain_order=True)


HOLISTIC_BYTES_PER_CALL = 64  # DuckDB's quantile_cont of TTFT, generation and speed (measured)
_UNITS = {"": 1, "B": 1, "BYTES": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def holistic_fits(store: Store) -> bool:
    """
    Whether the TTFT, generation and speed quantiles can be aggregated in DuckDB's memory.

    DuckDB's ``quantile_cont`` holds every value of a group and cannot spill: about
    `HOLISTIC_BYTES_PER_CALL` bytes a call (an aggregate of 2 M calls needed 100-130 MB).
    It is used while the store's calls need at most half of the memory limit in force;
    beyond, or for calls read in place (a view, whose size is unknown until read), they are
    read exactly from bands (`exact_in_bands`), at one more scan.
    """
    row = store.fetchone(
        "SELECT (SELECT estimated_size FROM duckdb_tables() WHERE table_name = 'calls' "
        "AND schema_name = current_schema()), current_setting('memory_limit')"
    )
    if row is None or row[0] is None:
        return False
    number, _, unit = str(row[1]).strip().partition(" ")
    try:
        limit = float(number) * _UNITS[unit.strip().upper()]
    except (KeyError, ValueError):
        return False
    return int(row[0]) * HOLISTIC_BYTES_PER_CALL <= limit / 2


class TableSource(Protocol):
    """
    Where the table's numbers come from: a store's calls, or merged summaries (`_summary.py`).
    """

    def groups(self, query: TableQuery) -> pl.DataFrame:
        """
        `fetch_groups`: a row per group (`groups_sql`'s columns), in table order.
        """

    def latency(
        self,
        query: TableQuery,
        described: list[DescribedGroup],
        aggs: list[dict[str, Any]],
        level: float,
    ) -> tuple[Quantiles, dict[str, list[float]]]:
        """
        The described groups' quantiles, and columns to add to their rows.

        Fills in each aggregate's ``ttft_q``, ``gen_q`` and ``speed_q`` where it lacks them.
        """

    def hedges(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        """
        Per route, ``(pairs, escaped)`` (`hedges_sql`).
        """

    def paired(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        """
        Per route, ``(pairs, escaped)`` from the same job on other routes (`paired_calls_sql`).
        """

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
        """
        `fetch_samples`: the groups' samples; each route's to ``on_route``.
        """

    def every_call(self, query: TableQuery, gid: int) -> Calls | None:
        """
        Every finished or cut call of a group (``None``: only its sample is known).
        """


class _StoreSource:
    """
    Strictly private: the numbers read from a store's calls, exactly (or with ``approx``).
    """

    def __init__(self, store: Store, *, approx: bool) -> None:
        self.store, self.approx = store, approx
        self.holistic = approx or holistic_fits(store)

    def groups(self, query: TableQuery) -> pl.DataFrame:
        return fetch_groups(self.store, query, approx=self.approx, holistic=self.holistic)

    def latency(
        self,
        query: TableQuery,
        described: list[DescribedGroup],
        aggs: list[dict[str, Any]],
        level: float,
    ) -> tuple[Quantiles, dict[str, list[float]]]:
        if self.approx:
            from tailkit.tails._approx import approx_statistics

            found, errors = approx_statistics(
                self.store, query, group_times(described), level=level
            )
            return found, {"approx_rank_error": errors.tolist()}
        phases = not self.holistic
        found = _sorted_pass(self.store, query, described, aggs, level=level, phases=phases)
        return found, {}

    def hedges(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        rows = self.store.fetchall(hedges_sql(query))
        return {tuple(r[:-2]): (int(r[-2]), int(r[-1])) for r in rows}

    def paired(self, query: TableQuery) -> dict[tuple[Any, ...], tuple[int, int]]:
        rows = self.store.fetchall(paired_calls_sql(query.source_sql(), query.by))
        return {tuple(r[:-2]): (int(r[-2]), int(r[-1])) for r in rows}

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
        return fetch_samples(
            self.store, query, groups, routes,
            group_size=group_size, route_size=route_size, on_route=on_route,
        )  # fmt: skip

    def every_call(self, query: TableQuery, gid: int) -> Calls | None:
        return fetch_calls(self.store, query, gid)


@dataclass(frozen=True, slots=True)
class TailReport:
    """
    The tail table and, per route (the ``by`` columns), whether its tail is work or transient.

    ``fits``: whether `FIT_COLUMNS` were computed (else they are null).
    """

    table: pl.DataFrame
    verdicts: pl.DataFrame
    fits: bool = True


def tail_report(
    store: Store,
    query: TableQuery | None = None,
    *,
    min_group: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
    window_s: float = 60.0,
    approx: bool = False,
    fits: bool = True,
) -> TailReport:
    """
    The tail table and the work-vs-transient verdicts, in memory that grows with groups.

    Args:
        store: An open store.
        query: Grouping, buckets and filter (provider x model x both buckets by default).
        min_group: Leave out groups with fewer calls (attempts) than this.
        level: Confidence level of every interval.
        fit_max_n: Calls per group in the seeded sample the fits read (goodness of fit, the
            transient-tail mixture, the phase split's shares, the lognormal fit with cut calls).
        window_s: Time window, in seconds, for the clustering of tail calls.
        approx: Quantiles from DuckDB's approximate aggregate (t-digest) instead of sorted
            latencies, for very large stores (groups with cut calls stay exact): column
            ``approx_rank_error`` then states, per row, the largest distance measured between
            the rank of p50..p99 and its target (0.001: 0.1 % of the group's calls away); the
            TTFT, generation and tokens-per-second quantiles are approximate too, unmeasured.
        fits: Fit each row's transient-tail mixture (with its profile interval) and rank the
            families by AIC; without, `FIT_COLUMNS` are null (see `FIT_COLUMNS`).

    Returns:
        Both tables as polars DataFrames (columns listed in the README).

    Raises:
        QueryError: DuckDB refused a query (a ``where`` that is not valid SQL).
    """
    source = _StoreSource(store, approx=approx)
    return build_report(
        source, query or TableQuery(),
        min_group=min_group, level=level, fit_max_n=fit_max_n, window_s=window_s, fits=fits,
    )  # fmt: skip


def build_report(
    source: TableSource,
    query: TableQuery,
    *,
    min_group: int,
    level: float,
    fit_max_n: int,
    window_s: float,
    fits: bool = True,
) -> TailReport:
    """
    The tail table and the verdicts from ``source``'s numbers (see `tail_report`).
    """
    groups = source.groups(query)
    # Every call goes to its route's verdict, also those of groups too thin to describe
    # (cut calls, with no output tokens, often fill a bucket of their own).
    routes = RouteAccumulator(len(query.by), window_s=window_s, level=level, background=True)
    try:
        return _build(
            source, query, groups, routes,
            min_group=min_group, level=level, fit_max_n=fit_max_n, fits=fits,
        )  # fmt: skip
    finally:
        routes.close()


def _build(
    source: TableSource,
    query: TableQuery,
    groups: pl.DataFrame,
    routes: RouteAccumulator,
    *,
    min_group: int,
    level: float,
    fit_max_n: int,
    fits: bool,
) -> TailReport:
    """
    `build_report` once the groups are read: rows, samples and verdicts, then the fits.

    The routes are judged on their own thread (`RouteAccumulator`) as their samples arrive;
    meanwhile this thread reads the exact quantiles (the sorted pass) and fits the rows.
    """
    keys = list(query.keys)
    rows: list[dict[str, Any]] = []
    described: list[DescribedGroup] = []
    kept: dict[int, int | None] = {}  # group id: its finished and cut calls when described
    aggs: list[dict[str, Any]] = []
    for agg in groups.iter_rows(named=True):
        n, n_ok, n_censored = int(agg["n"]), int(agg["n_ok"]), int(agg["n_censored"])
        if n < min_group:
            continue
        kept[int(agg[GROUP_ID])] = None
        key = tuple(agg[k] for k in keys)
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row |= {
            "n": n,
            "n_ok": n_ok,
            "censored_share": n_censored / n,
            "failed_share": int(agg["n_failed"]) / n,
            "tokens_per_s_p50": None,  # filled in from the sorted pass
            "tokens_per_s_p10": None,
        }
        rows.append(row)
        aggs.append(agg)
        routes.add(key, row, int(agg[ROUTE_ID]))
        if int(agg["n_listed"]) == 0 or n_ok < 2:
            # Every group keeps its row so counts add up; with under two finished calls there
            # is no latency to describe.
            row["warning"] = f"{n_ok} finished call(s): no latency statistics"
            continue
        described.append(DescribedGroup(row, key, agg, censored=n_censored > 0))
        kept[int(agg[GROUP_ID])] = int(agg["n_listed"])
    hedges, paired = source.hedges(query), source.paired(query)
    group_calls = source.samples(
        query, kept, _route_counts(kept, groups),
        group_size=fit_max_n, route_size=MAX_ROUTE_CALLS,
        on_route=lambda route_id, calls: routes.judge(route_id, calls, hedges, paired),
    )  # fmt: skip
    latency = source.latency(query, described, aggs, level)
    for row, agg in zip(rows, aggs, strict=True):
        speed = agg.get("speed_q") or [None, None]
        row["tokens_per_s_p50"], row["tokens_per_s_p10"] = speed[0], speed[1]
    if described:
        _describe(
            source, query, described, group_calls, latency,
            level=level, max_n=fit_max_n, fits=fits,
        )  # fmt: skip
    routes.finish(hedges, paired)
    verdicts = routes.verdicts(list(query.by))
    table = pl.DataFrame(rows, infer_schema_length=None)
    if "transient" in table.columns:
        table = table.with_columns(pl.col("transient").cast(pl.Boolean))
    return TailReport(table, verdicts, fits)


def _route_counts(kept: dict[int, int | None], groups: pl.DataFrame) -> dict[int, int]:
    """
    Per route id, the finished and cut calls of its groups in the table.
    """
    counts: dict[int, int] = {}
    for gid, rid, listed in groups.select(GROUP_ID, ROUTE_ID, "n_listed").iter_rows():
        if int(gid) in kept:
            counts[int(rid)] = counts.get(int(rid), 0) + int(listed)
    return counts


def tail_table(
    store: Store,
    query: TableQuery | None = None,
    *,
    min_group: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
    approx: bool = False,
) -> pl.DataFrame:
    """
    The tail table alone (see `tail_report`).
    """
    return tail_report(
        store, query, min_group=min_group, level=level, fit_max_n=fit_max_n, approx=approx
    ).table


@dataclass(slots=True)
class DescribedGroup:
    """
    A group with latencies to describe (its row, key and aggregates), as a source sees it.
    """

    row: dict[str, Any]
    key: tuple[Any, ...]
    agg: dict[str, Any]
    censored: bool

    @property
    def gid(self) -> int:
        return int(self.agg[GROUP_ID])


def _describe(
    source: TableSource,
    query: TableQuery,
    described: list[DescribedGroup],
    drawn: dict[int, Calls],
    latency: tuple[Quantiles, dict[str, list[float]]],
    *,
    level: float,
    max_n: int,
    fits: bool,
) -> None:
    """
    Add the latency columns to each group's row; ``drawn`` holds the groups' samples.

    ``latency`` holds the quantiles and the source's own columns (a value per group).
    """
    found, extra = latency
    for name, values in extra.items():
        for g, value in zip(described, values, strict=True):
            g.row[name] = value
    _quantile_columns(described, found)
    calls = [drawn.get(g.gid, Calls.empty()) for g in described]
    samples = [c.fit_input(censored=g.censored) for g, c in zip(described, calls, strict=True)]
    notes = _fit_columns(described, samples, level=level, max_n=max_n, fits=fits)
    for g, sample, c, note in zip(described, samples, calls, notes, strict=True):
        g.row |= _phase_columns(g, c)
        # The intervals are in the row already: only an unbounded one needs the warning.
        bounded = math.isfinite(g.row["p99_s_hi"]) and math.isfinite(g.row["p99_p50_hi"])
        said = None if bounded else _warning(source, query, g, sample, max_n=max_n, level=level)
        g.row["warning"] = "; ".join(w for w in (said, note) if w) or None


def group_times(described: list[DescribedGroup]) -> list[GroupTimes]:
    """
    What the sorted pass needs to know of each described group.
    """
    return [GroupTimes(g.gid, int(g.agg["n_events"]), int(g.agg["n_cuts"])) for g in described]


def _sorted_pass(
    store: Store,
    query: TableQuery,
    described: list[DescribedGroup],
    aggs: list[dict[str, Any]],
    *,
    level: float,
    phases: bool,
) -> Quantiles:
    """
    The exact quantiles of the described groups (`sorted_statistics`).

    With ``phases`` the TTFT, generation and speed quantiles are read from their bands
    (`exact_in_bands`) into each group's aggregates (``ttft_q``, ``gen_q``, ``speed_q``), and
    sorted here where a band missed; otherwise the aggregating pass has them.
    """
    if not phases:
        return sorted_statistics(store, query, group_times(described), level=level).latency
    phase, speed = exact_in_bands(store, query, aggs)
    found = sorted_statistics(
        store, query, group_times(described), level=level, phase=phase, speed=speed
    )
    found.fill(aggs)
    return found.latency


def _warning(
    source: TableSource,
    query: TableQuery,
    g: DescribedGroup,
    sample: tuple[_Array, _Array | None],
    *,
    max_n: int,
    level: float,
) -> str | None:
    """
    The tail warning on every call of the group (on its sample beyond `WARNING_MAX_CALLS`).
    """
    listed = int(g.agg["n_listed"])
    if listed <= max_n:  # the sample is the whole group
        return tail_warning(sample[0], censored_at_s=sample[1], level=level)
    every = source.every_call(query, g.gid) if listed <= WARNING_MAX_CALLS else None
    if every is not None:
        latency, cut = every.fit_input(censored=g.censored)
        return tail_warning(latency, censored_at_s=cut, level=level)
    said = tail_warning(sample[0], censored_at_s=sample[1], level=level)
    return f"{said} (from a seeded sample of {sample[0].size:,} calls)" if said else None


def _phase_columns(g: DescribedGroup, calls: Calls) -> dict[str, Any]:
    """
    TTFT and generation quantiles over every call; which phase holds the tail, from the sample.
    """
    split = phase_split(calls.ttft_s, calls.total_s)
    ttft = g.agg["ttft_q"] or [math.nan, math.nan]
    gen = g.agg["gen_q"] or [math.nan, math.nan]
    return {
        "ttft_p50_s": float(ttft[0]),
        "ttft_p99_s": float(ttft[1]),
        "gen_p50_s": float(gen[0]),
        "gen_p99_s": float(gen[1]),
        "tail_phase": split.tail_phase,
        "ttft_share": split.ttft_share,
        "signal": split.signal,
    }


def _interval_columns(name: str, value: _Array, low: _Array, high: _Array) -> dict[str, _Array]:
    return {name: value, f"{name}_lo": low, f"{name}_hi": high}


def _quantile_columns(described: list[DescribedGroup], stats: Quantiles) -> None:
    """
    p50 to p99 with their intervals, and p99/p50 with an interval that holds at ``level``.
    """
    value, low, high, low2, high2 = stats.value, stats.low, stats.high, stats.low2, stats.high2
    columns: dict[str, _Array] = {}
    for j, q in enumerate(QUANTILES):
        columns |= _interval_columns(f"{_NAMES[q]}_s", value[:, j], low[:, j], high[:, j])
    p50, p99 = value[:, 0], value[:, 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p50 > 0, p99 / p50, math.nan)
        ratio_low = np.where(high2[:, 0] > 0, low2[:, 1] / high2[:, 0], 0.0)
        ratio_high = np.where(low2[:, 0] > 0, high2[:, 1] / low2[:, 0], math.inf)
    columns |= _interval_columns("p99_p50", ratio, ratio_low, ratio_high)
    for i, g in enumerate(described):
        g.row |= {name: float(col[i]) for name, col in columns.items()}


def _fit_columns(
    described: list[DescribedGroup],
    samples: list[tuple[_Array, _Array | None]],
    *,
    level: float,
    max_n: int,
    fits: bool,
) -> list[str | None]:
    """
    The lognormal fit and the goodness-of-fit verdict; with ``fits``, `FIT_COLUMNS` too.

    Without ``fits`` the family ranking and the transient-tail mixture are not computed, and
    their columns are null.

    Returns, per group, why its lognormal fit has no estimate (``None`` when it has one).
    """
    gofs = goodness_of_fit_many(samples, max_n=max_n, families=fits)
    mixes: list[TransientTailFit | None] = (
        list(fit_transient_tails(samples, max_n=max_n, level=level))
        if fits
        else [None] * len(samples)
    )
    notes: list[str | None] = []
    for g, (latency, cut), gof, mix in zip(described, samples, gofs, mixes, strict=True):
        note = None
        if not g.censored and g.agg["event_max"] > g.agg["event_min"]:
            # uncensored: closed form on every call, the mean and population sd of log latency
            mu, sigma = float(g.agg["log_mean"]), float(g.agg["log_sd"])
        else:
            # censored (the censored MLE), or no spread: a note says why when there is no estimate
            fit = fit_lognormal(latency, censored_at_s=cut, level=level)
            mu, sigma, note = fit.mu, fit.sigma, fit.note
        notes.append(note)
        g.row |= {"mu": mu, "sigma": sigma, "fit": gof.verdict, "fit_p": gof.p_value}
        g.row |= dict.fromkeys(FIT_COLUMNS) if mix is None else {
            "best_family": gof.best_family,
            "transient_share": mix.tail_share,
            "transient_share_lo": mix.tail_share_interval.low,
            "transient_share_hi": mix.tail_share_interval.high,
            "transient_scale": mix.tail_scale,
            "transient_mixture": mix.has_transient_tail,
        }  # fmt: skip
    return notes
