"""
The tail table: one row per group (route, step, token bucket, …) saying where its tail is.

One SQL pass counts each group's calls and lists the ones with a latency (finished or cut).
Everything else is numpy on those lists, batched across groups where it pays: exact
order-statistic intervals from each group's sorted latencies (Kaplan-Meier when calls were
cut), the lognormal fit (closed form, or censoring-aware), the goodness-of-fit verdict, the
transient-tail mixture, the phase split and the work-vs-transient verdicts. Fits that iterate
run on a seeded subsample of at most ``fit_max_n`` calls per group; intervals, the lognormal
fit, the phase split and the verdicts always use every call.
"""

from __future__ import annotations

import math

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tailkit._stats._query import QUANTILES, TableQuery, groups_sql, hedges_sql, order_columns
from tailkit._stats._verdicts import RouteAccumulator
from tailkit.fit import (
    empirical_quantiles,
    fit_lognormal,
    fit_transient_tails,
    goodness_of_fit_many,
    phase_split,
    sorted_quantiles,
    tail_warning,
)
from tailkit.store import Store


_Array = npt.NDArray[np.float64]
_NAMES = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}


@dataclass(frozen=True, slots=True)
class Calls:
    """
    The listed calls of every group as flat columns, a group's rows in no particular order.

    Group ``i`` holds rows ``starts[i] : starts[i] + sizes[i]``. ``total_s`` is NaN unless the
    call finished, ``cut_s`` NaN unless it was cut.
    """

    total_s: _Array
    cut_s: _Array
    ttft_s: _Array
    started_s: _Array
    output_tokens: _Array
    input_tokens: _Array
    starts: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]

    def rows(self, group: int) -> slice:
        """
        The rows of ``group``.
        """
        start = int(self.starts[group])
        return slice(start, start + int(self.sizes[group]))


def fetch_groups(store: Store, query: TableQuery) -> tuple[pl.DataFrame, Calls]:
    """
    Run the one pass: group counts in table order (column ``group`` indexes `Calls`), calls.
    """
    import pyarrow.compute as pc

    table = store.arrow(groups_sql(query))
    listed = table.column("calls").combine_chunks()
    columns = listed.values.flatten()  # the structs' fields, zero-copy: no NULLs, only NaN
    total_s, cut_s, ttft_s, started_s, output_tokens, input_tokens = (
        np.asarray(c.to_numpy(zero_copy_only=False), dtype=np.float64) for c in columns
    )
    calls = Calls(
        total_s, cut_s, ttft_s, started_s, output_tokens, input_tokens,
        starts=np.asarray(listed.offsets.to_numpy()[:-1], dtype=np.int64),
        sizes=np.asarray(pc.list_value_length(listed).fill_null(0).to_numpy(), dtype=np.int64),
    )  # fmt: skip
    frame = pl.from_arrow(table.drop_columns(["calls"]))
    assert isinstance(frame, pl.DataFrame)  # noqa: S101 - a table converts to a frame
    frame = frame.with_row_index("group").sort(
        order_columns(query), nulls_last=True, maintain_order=True
    )
    return frame, calls


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
    min_group: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
    window_s: float = 60.0,
) -> TailReport:
    """
    The tail table and the work-vs-transient verdicts, from one read of the store.

    Args:
        store: An open store.
        query: Grouping, buckets and filter (provider x model x both buckets by default).
        min_group: Leave out groups with fewer calls (attempts) than this.
        level: Confidence level of every interval.
        fit_max_n: Largest seeded subsample per group for the iterative fits (goodness of
            fit and the transient-tail mixture).
        window_s: Time window, in seconds, for the clustering of tail calls.

    Returns:
        Both tables as polars DataFrames (columns listed in the README).
    """
    query = query or TableQuery()
    groups, calls = fetch_groups(store, query)
    keys = list(query.keys)
    rows: list[dict[str, Any]] = []
    described: list[_Group] = []
    # Every call goes to its route's verdict, also those of groups too thin to describe
    # (cut calls, with no output tokens, often fill a bucket of their own).
    routes = RouteAccumulator(len(query.by), window_s=window_s, level=level)
    for agg in groups.iter_rows(named=True):
        n, n_ok, n_censored = int(agg["n"]), int(agg["n_ok"]), int(agg["n_censored"])
        if n < min_group:
            continue
        key = tuple(agg[k] for k in keys)
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        speed = agg["tokens_per_s"] or [None, None]
        row |= {
            "n": n,
            "n_ok": n_ok,
            "censored_share": n_censored / n,
            "failed_share": int(agg["n_failed"]) / n,
            "tokens_per_s_p50": speed[0],
            "tokens_per_s_p10": speed[1],
        }
        rows.append(row)
        if calls.sizes[agg["group"]] == 0 or n_ok < 2:
            # Every group keeps its row so counts add up; with under two finished calls there
            # is no latency to describe.
            row["warning"] = f"{n_ok} finished call(s): no latency statistics"
            routes.add(key, row, _route_columns(calls, calls.rows(int(agg["group"]))))
            continue
        described.append(_Group(row, key, int(agg["group"]), n_ok + n_censored, n_censored > 0))
    hedges = {tuple(r[:-2]): (int(r[-2]), int(r[-1])) for r in store.fetchall(hedges_sql(query))}
    if described:
        _describe(described, calls, routes, level=level, max_n=fit_max_n, hedges=hedges)
    else:
        routes.judge(hedges)
    verdicts = routes.verdicts(list(query.by))
    table = pl.DataFrame(rows, infer_schema_length=None)
    if "transient" in table.columns:
        table = table.with_columns(pl.col("transient").cast(pl.Boolean))
    return TailReport(table, verdicts)


def tail_table(
    store: Store,
    query: TableQuery | None = None,
    *,
    min_group: int = 1,
    level: float = 0.95,
    fit_max_n: int = 2000,
) -> pl.DataFrame:
    """
    The tail table alone (see `tail_report`).
    """
    return tail_report(store, query, min_group=min_group, level=level, fit_max_n=fit_max_n).table


@dataclass(slots=True)
class _Group:
    """
    Strictly private: a group with latencies to describe, its row, key and place in `Calls`.
    """

    row: dict[str, Any]
    key: tuple[Any, ...]
    index: int
    used: int  # finished and cut calls, as counted by SQL
    censored: bool


def _describe(
    described: list[_Group],
    calls: Calls,
    routes: RouteAccumulator,
    *,
    level: float,
    max_n: int,
    hedges: dict[tuple[Any, ...], tuple[int, int]],
) -> None:
    """
    Add the latency columns to each group's row; the routes get the calls and judge them.
    """
    # Each group's latencies sorted, the finished first (NaN sorts last): quantiles are indexes.
    ordered = np.full(calls.total_s.shape, np.nan)
    done = np.empty(len(described), dtype=np.int64)
    for i, g in enumerate(described):
        part = calls.rows(g.index)
        ordered[part] = np.sort(calls.total_s[part])
        done[i] = np.count_nonzero(~np.isnan(ordered[part]))
    starts = calls.starts[[g.index for g in described]]
    finished = [ordered[s : s + k] for s, k in zip(starts.tolist(), done.tolist(), strict=True)]
    samples = [_fit_input(f, calls, g) for g, f in zip(described, finished, strict=True)]
    _quantile_columns(described, samples, ordered, starts, done, level=level)
    # The phase split and the routes need every call but no fit: numpy works through them in a
    # second thread (it lets go of the GIL while it partitions and sorts) while this one fits.
    with ThreadPoolExecutor(max_workers=1) as pool:
        phases = pool.submit(_phase_columns, described, calls, routes, hedges)
        notes = _fit_columns(described, samples, level=level, max_n=max_n)
        for g, sample, note, columns in zip(
            described, samples, notes, phases.result(), strict=True
        ):
            g.row |= columns
            # The intervals are in the row already: only an unbounded one needs the warning.
            bounded = math.isfinite(g.row["p99_s_hi"]) and math.isfinite(g.row["p99_p50_hi"])
            said = (
                None if bounded else tail_warning(sample[0], censored_at_s=sample[1], level=level)
            )
            g.row["warning"] = "; ".join(w for w in (said, note) if w) or None


def _phase_columns(
    described: list[_Group],
    calls: Calls,
    routes: RouteAccumulator,
    hedges: dict[tuple[Any, ...], tuple[int, int]],
) -> list[dict[str, Any]]:
    """
    Each group's phase split; its calls go to the routes, which then judge their tails.
    """
    out = []
    for g in described:
        part = calls.rows(g.index)
        total = calls.total_s[part]
        split = phase_split(calls.ttft_s[part], total)
        out.append({
            "ttft_p50_s": split.ttft_p50_s,
            "ttft_p99_s": split.ttft_p99_s,
            "gen_p50_s": split.gen_p50_s,
            "gen_p99_s": split.gen_p99_s,
            "tail_phase": split.tail_phase,
            "ttft_share": split.ttft_share,
            "signal": split.signal,
        })  # fmt: skip
        routes.add(g.key, g.row, _route_columns(calls, part))
    routes.judge(hedges)
    return out


def _route_columns(calls: Calls, part: slice) -> tuple[_Array, ...]:
    """
    A group's calls as its route's verdict takes them.
    """
    return (
        calls.total_s[part], calls.cut_s[part], calls.output_tokens[part],
        calls.input_tokens[part], calls.started_s[part], calls.ttft_s[part],
    )  # fmt: skip


def _fit_input(finished: _Array, calls: Calls, g: _Group) -> tuple[_Array, _Array | None]:
    """
    A group's calls as the fits take them, in a fixed order (sorted) so subsamples repeat.
    """
    if not g.censored:
        return finished, None
    cut = np.sort(calls.cut_s[calls.rows(g.index)])
    cut = cut[~np.isnan(cut)]
    gap = np.full(cut.size, np.nan), np.full(finished.size, np.nan)
    return np.concatenate([finished, gap[0]]), np.concatenate([gap[1], cut])


def _interval_columns(name: str, value: _Array, low: _Array, high: _Array) -> dict[str, _Array]:
    return {name: value, f"{name}_lo": low, f"{name}_hi": high}


def _quantile_columns(
    described: list[_Group],
    samples: list[tuple[_Array, _Array | None]],
    ordered: _Array,
    starts: npt.NDArray[np.int64],
    done: npt.NDArray[np.int64],
    *,
    level: float,
) -> None:
    """
    p50 to p99 with their intervals, and p99/p50 with an interval that holds at ``level``.
    """
    wide = (1 + level) / 2  # each end of p99/p50 at (1 + level) / 2: the ratio's holds at level
    sizes = np.maximum(done, 1)
    value, low, high = sorted_quantiles(ordered, starts, sizes, np.array(QUANTILES), 1 - level)
    _, low2, high2 = sorted_quantiles(ordered, starts, sizes, np.array([0.5, 0.99]), 1 - wide)
    for i, g in enumerate(described):
        if g.censored:
            # Kaplan-Meier, which counts a cut call as "longer than its cut"
            latency, cut = samples[i]
            est = empirical_quantiles(latency, qs=QUANTILES, level=level, censored_at_s=cut)
            value[i] = [e.value for e in est]
            low[i], high[i] = [e.interval.low for e in est], [e.interval.high for e in est]
            est = empirical_quantiles(latency, qs=(0.5, 0.99), level=wide, censored_at_s=cut)
            low2[i], high2[i] = [e.interval.low for e in est], [e.interval.high for e in est]
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
    described: list[_Group],
    samples: list[tuple[_Array, _Array | None]],
    *,
    level: float,
    max_n: int,
) -> list[str | None]:
    """
    The lognormal fit, the goodness-of-fit verdict and the transient-tail mixture.

    Returns, per group, why its lognormal fit has no estimate (``None`` when it has one).
    """
    gofs = goodness_of_fit_many(samples, max_n=max_n)
    mixes = fit_transient_tails(samples, max_n=max_n, level=level)
    notes: list[str | None] = []
    for g, (latency, cut), gof, mix in zip(described, samples, gofs, mixes, strict=True):
        note = None
        if cut is None and np.ptp(latency) > 0.0:
            # uncensored: closed form, the mean and population sd of log latency
            y = np.log(latency)
            mu, sigma = float(np.mean(y)), float(np.std(y))
        else:
            # censored (the censored MLE), or no spread: a note says why when there is no estimate
            fit = fit_lognormal(latency, censored_at_s=cut, level=level)
            mu, sigma, note = fit.mu, fit.sigma, fit.note
        notes.append(note)
        g.row |= {
            "mu": mu,
            "sigma": sigma,
            "fit": gof.verdict,
            "fit_p": gof.p_value,
            "best_family": gof.best_family,
            "transient_share": mix.tail_share,
            "transient_share_lo": mix.tail_share_interval.low,
            "transient_share_hi": mix.tail_share_interval.high,
            "transient_scale": mix.tail_scale,
            "transient_mixture": mix.has_transient_tail,
        }
    return notes
