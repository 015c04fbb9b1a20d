"""
The per-route data the tail figures draw: the tail table rows and each route's latencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailkit._stats import TableQuery, tail_report
from tailkit.report._common import label
from tailkit.store import Store


_Array = npt.NDArray[np.float64]
MIN_ROUTE_CALLS = 50  # fewer finished calls draw no curve worth reading (a p95 needs 72)


@dataclass(frozen=True, slots=True)
class Route:
    """
    One route (group of the ``by`` columns): its tail-table row and its calls' latencies.

    ``total_s`` holds finished calls, ``cut_s`` the cut ages of cut calls, ``ttft_s`` and
    ``gen_s`` the phases of finished streamed calls (seconds).
    """

    key: tuple[Any, ...]
    label: str
    row: dict[str, Any]
    total_s: _Array
    cut_s: _Array
    ttft_s: _Array
    gen_s: _Array


@dataclass(frozen=True, slots=True)
class TailData:
    """
    Everything the tail sections need, from three reads of the store.

    Args:
        routes: The biggest routes with latency statistics, biggest first.
        buckets: The tail table by route and both token buckets (rows as dicts).
        verdicts: Per route, whether its tail grows with work (rows as dicts).
    """

    routes: tuple[Route, ...]
    buckets: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]


def _array(values: list[float] | None) -> _Array:
    return np.asarray(values or [], dtype=np.float64)


def load_tail_data(
    store: Store, *, by: tuple[str, ...], where: str | None, max_routes: int
) -> TailData:
    """
    The tail table per route and per bucket, and the latencies of the ``max_routes`` biggest.
    """
    whole = tail_report(store, TableQuery(by=by, bucket=(), where=where))
    rows = [
        r
        for r in whole.table.iter_rows(named=True)
        if r.get("p50_s") is not None and int(r["n_ok"]) >= MIN_ROUTE_CALLS
    ]
    rows.sort(key=lambda r: -int(r["n"]))
    rows = rows[:max_routes]
    split = tail_report(store, TableQuery(by=by, bucket=("input", "output"), where=where))
    ok = "status = 'ok' AND total_s > 0"
    keys = ", ".join(f'"{k}"' for k in by)
    sql = (
        f"SELECT {keys}, list(total_s) FILTER ({ok}), "
        "list(censored_at_s) FILTER (censored_at_s > 0), "
        f"list(ttft_s) FILTER ({ok} AND ttft_s > 0 AND total_s >= ttft_s), "
        f"list(total_s - ttft_s) FILTER ({ok} AND ttft_s > 0 AND total_s >= ttft_s) "
        f"FROM {TableQuery(by=by, bucket=(), where=where).source_sql()} GROUP BY ALL"
    )
    lists = {tuple(r[: len(by)]): r[len(by) :] for r in store.fetchall(sql)}
    routes = []
    for row in rows:
        key = tuple(row[k] for k in by)
        total, cut, ttft, gen = lists.get(key, (None, None, None, None))
        routes.append(
            Route(key, label(key), row, _array(total), _array(cut), _array(ttft), _array(gen))
        )
    return TailData(
        tuple(routes),
        list(split.table.iter_rows(named=True)) if len(split.table) else [],
        list(split.verdicts.iter_rows(named=True)) if len(split.verdicts) else [],
    )
