"""
The tail table: one row per group (route, step, token bucket, …) saying where its tail is.

DuckDB computes what it can in one pass (counts, quantiles, log moments, TTFT and generation
quantiles). Python then adds what needs the samples: order-statistic intervals (Kaplan-Meier
when calls were cut), the censoring-aware lognormal fit, the goodness-of-fit verdict, the
transient-tail mixture and the phase split. Fits that iterate run on a seeded subsample of at
most ``fit_max_n`` calls per group; intervals always use every call.
"""

from __future__ import annotations

import math

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tailkit._stats._query import QUANTILES, TableQuery, aggregates_sql, samples_sql
from tailkit._stats._verdicts import RouteAccumulator
from tailkit.fit import (
    Interval,
    empirical_quantiles,
    fit_lognormal,
    fit_lognormal_moments,
    fit_transient_tail,
    goodness_of_fit,
    phase_split,
    quantile_warning,
)
from tailkit.store import Store


_NAMES = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}


@dataclass(frozen=True, slots=True)
class Sample:
    """
    One group's latency sample (total NaN for a cut call, which has ``censored_at_s``).
    """

    total_s: np.ndarray[Any, np.dtype[np.float64]]
    censored_at_s: np.ndarray[Any, np.dtype[np.float64]]
    ttft_s: np.ndarray[Any, np.dtype[np.float64]]
    started_s: np.ndarray[Any, np.dtype[np.float64]]


def group_samples(store: Store, query: TableQuery) -> Iterator[tuple[tuple[Any, ...], Sample]]:
    """
    Every group's sample, keyed like the aggregate rows.

    Rows are grouped by hashing in polars (no global sort) and handed out as slices of one flat
    array per column.
    """
    keys = list(query.keys)
    names = ("total_s", "censored_at_s", "ttft_s", "started_s")
    df = pl.from_arrow(store.arrow(samples_sql(query)))
    assert isinstance(df, pl.DataFrame)  # noqa: S101 - a table converts to a frame
    grouped = df.group_by(keys).agg(*(pl.col(n).cast(pl.Float64) for n in names))
    ends = np.cumsum(grouped["total_s"].list.len().to_numpy())
    flat = {n: grouped[n].explode().fill_null(np.nan).to_numpy() for n in names}
    start = 0
    for i, row in enumerate(grouped.select(keys).iter_rows()):
        part = slice(start, int(ends[i]))
        start = int(ends[i])
        yield tuple(row), Sample(*(flat[n][part] for n in names))


def _interval_cols(name: str, value: float, interval: Interval) -> dict[str, float]:
    return {name: value, f"{name}_lo": interval.low, f"{name}_hi": interval.high}


def _quantile_columns(
    sample: Sample, sql_q: list[float] | None, *, censored: bool, level: float
) -> dict[str, float]:
    cut = np.where(np.isfinite(sample.censored_at_s), sample.censored_at_s, np.nan)
    kwargs = {"censored_at_s": cut} if censored else {}
    out: dict[str, float] = {}
    for est in empirical_quantiles(sample.total_s, qs=QUANTILES, level=level, **kwargs):
        # Without cut calls DuckDB's quantile_cont is the point estimate (same interpolation);
        # with them, Kaplan-Meier's, which counts a cut call as "longer than its cut".
        point = est.value if censored or sql_q is None else sql_q[QUANTILES.index(est.q)]
        out |= _interval_cols(f"{_NAMES[est.q]}_s", point, est.interval)
    # p99/p50: each end at (1 + level) / 2, so the ratio's interval holds at `level` or more.
    wide = (1 + level) / 2
    p50, p99 = empirical_quantiles(sample.total_s, qs=(0.5, 0.99), level=wide, **kwargs)
    ratio = out["p99_s"] / out["p50_s"] if out["p50_s"] > 0 else math.nan
    low = p99.interval.low / p50.interval.high if p50.interval.high > 0 else 0.0
    high = p99.interval.high / p50.interval.low if p50.interval.low > 0 else math.inf
    out |= _interval_cols("p99_p50", ratio, Interval(low, high, level))
    return out


def _fit_columns(
    sample: Sample, agg: dict[str, Any], *, level: float, max_n: int
) -> dict[str, Any]:
    censored = int(agg["n_censored"]) > 0
    cut = sample.censored_at_s if censored else None
    if censored:
        ln = fit_lognormal(sample.total_s, censored_at_s=cut, level=level)
    else:
        ln = fit_lognormal_moments(
            int(agg["n_ok"]), float(agg["mean_log"]), float(agg["var_log"]), level=level
        )
    gof = goodness_of_fit(sample.total_s, censored_at_s=cut, max_n=max_n)
    mix = fit_transient_tail(sample.total_s, censored_at_s=cut, max_n=max_n, level=level)
    return {
        "mu": ln.mu,
        "sigma": ln.sigma,
        "fit": gof.verdict,
        "fit_p": gof.p_value,
        "best_family": gof.best_family,
        "transient_share": mix.tail_share,
        "transient_share_lo": mix.tail_share_interval.low,
        "transient_share_hi": mix.tail_share_interval.high,
        "transient_scale": mix.tail_scale,
        "transient": mix.has_transient_tail,
    }


def _phase_columns(sample: Sample, agg: dict[str, Any]) -> dict[str, Any]:
    ttft_q, gen_q = agg["ttft_q"] or [None, None], agg["gen_q"] or [None, None]
    split = phase_split(sample.ttft_s, sample.total_s)
    return {
        "ttft_p50_s": ttft_q[0],
        "ttft_p99_s": ttft_q[1],
        "gen_p50_s": gen_q[0],
        "gen_p99_s": gen_q[1],
        "tail_phase": split.tail_phase,
        "ttft_share": split.ttft_share,
        "signal": split.signal,
    }


@dataclass(frozen=True, slots=True)
class TailReport:
    """
    The tail table and, per route (the ``by`` columns), whether its tail is work or transient.
    """

    table: pl.DataFrame
    verdicts: pl.DataFrame


def tail_report(
    store: Store,
    query: TableQuery | None = None,
    *,
    min_calls: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
    window_s: float = 60.0,
) -> TailReport:
    """
    The tail table and the work-vs-transient verdicts, from one read of the store.

    Args:
        store: An open store.
        query: Grouping, buckets and filter (provider x model x both buckets by default).
        min_calls: Leave out groups with fewer calls (attempts) than this.
        level: Confidence level of every interval.
        fit_max_n: Largest seeded subsample per group for the iterative fits.
        window_s: Time window, in seconds, for the clustering of tail calls.

    Returns:
        Both tables as polars DataFrames (columns listed in the README).
    """
    query = query or TableQuery()
    aggs = pl.from_arrow(store.arrow(aggregates_sql(query)))
    assert isinstance(aggs, pl.DataFrame)  # noqa: S101 - a table converts to a frame
    keys = list(query.keys)
    by_key = {tuple(r[k] for k in keys): r for r in aggs.iter_rows(named=True)}
    samples = dict(group_samples(store, query))
    rows: list[dict[str, Any]] = []
    routes = RouteAccumulator(len(query.by))
    for key, agg in by_key.items():
        used = int(agg["n_ok"]) + int(agg["n_censored"])
        n = int(agg["n"])
        if n < min_calls:
            continue
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row |= {
            "n": n,
            "n_ok": int(agg["n_ok"]),
            "censored_share": int(agg["n_censored"]) / n,
            "failed_share": int(agg["n_failed"]) / n,
        }
        sample = samples.get(key)
        if sample is None or int(agg["n_ok"]) < 2:
            # Every group keeps its row so counts add up; with under two finished calls there
            # is no latency to describe.
            row["warning"] = f"{int(agg['n_ok'])} finished call(s): no latency statistics"
            rows.append(row)
            continue
        censored = int(agg["n_censored"]) > 0
        row |= _quantile_columns(sample, agg["total_q"], censored=censored, level=level)
        row |= _fit_columns(sample, agg, level=level, max_n=fit_max_n)
        row |= _phase_columns(sample, agg)
        row["warning"] = quantile_warning(used, 0.99, level=level)
        rows.append(row)
        routes.add(key, row, sample)
    return TailReport(
        pl.DataFrame(rows, infer_schema_length=None),
        routes.verdicts(list(query.by), window_s=window_s),
    )


def tail_table(
    store: Store,
    query: TableQuery | None = None,
    *,
    min_calls: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
) -> pl.DataFrame:
    """
    The tail table alone (see `tail_report`).
    """
    return tail_report(store, query, min_calls=min_calls, level=level, fit_max_n=fit_max_n).table
