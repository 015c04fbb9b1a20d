"""
The per-route data the tail figures draw: the tail table rows and each route's latencies.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailkit.config import Plan
from tailkit.record import Buckets
from tailkit.report._common import labels
from tailkit.store import Store
from tailkit.store.lowlevel import OK_CALL
from tailkit.tails import TableQuery, tail_report


_Array = npt.NDArray[np.float64]
MIN_ROUTE_CALLS = 20  # fewer finished calls draw no curve worth reading (its last step is 5%)
_PLAN_COLUMNS = ("provider", "model")  # what a plan's route names of the call record


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
class LeftOut:
    """
    A route the per-route figures do not draw, and why.

    Args:
        label: The route's label.
        row: Its tail-table row (its p99/p50 may still be known).
        why: The reason in words.
    """

    label: str
    row: dict[str, Any]
    why: str


@dataclass(frozen=True, slots=True)
class TailData:
    """
    Everything the tail sections need, from three reads of the store.

    Args:
        routes: The biggest routes with latency statistics, biggest first.
        buckets: The tail table by route and both token buckets (rows as dicts).
        verdicts: Per route, whether its tail grows with work (rows as dicts).
        left_out: The routes of the store not drawn, biggest first, each with its reason.
        edges: The token bucket edges of ``buckets``.
        ties: How routes tied in calls at the last place drawn were chosen, in words
            (``""``: no tie there).
    """

    routes: tuple[Route, ...]
    buckets: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    left_out: tuple[LeftOut, ...] = ()
    edges: Buckets = field(default_factory=Buckets)
    ties: str = ""

    def heaviest(self) -> tuple[str, dict[str, Any], LeftOut | None] | None:
        """
        The route with the largest p99/p50 over every route, drawn or not (``None``: no ratio).

        Returns:
            Its label, its tail-table row, and its `LeftOut` record when it is not drawn.
        """
        every: list[tuple[str, dict[str, Any], LeftOut | None]] = [
            (r.label, r.row, None) for r in self.routes
        ]
        every += [(r.label, r.row, r) for r in self.left_out]
        known = [e for e in every if heaviness(e[1].get("p99_p50")) > 0]
        return max(known, key=lambda e: heaviness(e[1].get("p99_p50"))) if known else None

    def left_out_words(self) -> str:
        """
        ``left out: a/b (12 finished calls, fewer than the 50 a curve needs), …``, or ``""``.
        """
        if not self.left_out:
            return ""
        # routes with the same reason (beyond the biggest) are listed once, with it
        by_why: dict[str, list[str]] = {}
        for r in self.left_out:
            by_why.setdefault(r.why, []).append(r.label)
        return "left out: " + "; ".join(
            f"{', '.join(names)} ({why})" for why, names in by_why.items()
        )


def heaviness(value: Any) -> float:
    """
    A p99/p50 ratio to rank tails by: unknown (``None``, NaN) ranks last, unbounded first.
    """
    return 0.0 if value is None or math.isnan(float(value)) else float(value)


def _array(values: list[float] | None) -> _Array:
    return np.asarray(values or [], dtype=np.float64)


def load_tail_data(
    store: Store,
    *,
    by: tuple[str, ...],
    where: str | None,
    max_routes: int,
    buckets: Buckets | None = None,
    plan: Plan | None = None,
) -> TailData:
    """
    The tail table per route and per bucket, and the latencies of the ``max_routes`` biggest.

    The biggest are those with the most calls; among routes with as many calls, the ones
    ``plan`` sends attempts to come first, then those with more finished calls, then by name
    (`rank`), and `TailData.ties` says so when that chose at the last place.

    Args:
        store: An open store.
        by: Call-record columns that make a route.
        where: SQL filter on call-record columns.
        max_routes: Most routes drawn.
        buckets: The token bucket edges (the defaults of `Buckets` when ``None``).
        plan: A plan whose routes are drawn first among equals (``None``: none).
    """
    edges = buckets or Buckets()
    whole = tail_report(store, TableQuery(by=by, bucket=(), where=where, buckets=edges))
    planned = plan_routes(plan, by)
    every = sorted(whole.table.iter_rows(named=True), key=lambda r: rank(r, by, planned))
    names = labels(tuple(r[k] for k in by) for r in every)
    rows: list[dict[str, Any]] = []
    left_out: list[LeftOut] = []
    drawable: list[dict[str, Any]] = []
    for r in every:
        name = names[tuple(r[k] for k in by)]
        finished = int(r["n_ok"])
        if r.get("p50_s") is None or finished < MIN_ROUTE_CALLS:
            why = (
                f"{finished:,} finished call{'s' * (finished != 1)}, fewer than the "
                f"{MIN_ROUTE_CALLS} a curve needs"
            )
            left_out.append(LeftOut(name, r, why))
            continue
        drawable.append(r)
        if len(rows) >= max_routes:
            left_out.append(LeftOut(name, r, f"beyond the {max_routes} biggest routes"))
        else:
            rows.append(r)
    ties = _ties(drawable, max_routes, bool(planned))
    split = tail_report(
        store, TableQuery(by=by, bucket=("input", "output"), where=where, buckets=edges)
    )
    ok = OK_CALL
    keys = ", ".join(f'"{k}"' for k in by)
    sql = (
        f"SELECT {keys}, list(total_s) FILTER ({ok}), "
        "list(censored_at_s) FILTER (censored_at_s > 0), "
        f"list(ttft_s) FILTER ({ok} AND ttft_s > 0 AND total_s >= ttft_s), "
        f"list(total_s - ttft_s) FILTER ({ok} AND ttft_s > 0 AND total_s >= ttft_s) "
        f"FROM {TableQuery(by=by, bucket=(), where=where, buckets=edges).source_sql()} "
        "GROUP BY ALL"
    )
    lists = {tuple(r[: len(by)]): r[len(by) :] for r in store.fetchall(sql)}
    routes = []
    for row in rows:
        key = tuple(row[k] for k in by)
        total, cut, ttft, gen = lists.get(key, (None, None, None, None))
        routes.append(
            Route(key, names[key], row, _array(total), _array(cut), _array(ttft), _array(gen))
        )
    return TailData(
        tuple(routes),
        list(split.table.iter_rows(named=True)) if len(split.table) else [],
        list(split.verdicts.iter_rows(named=True)) if len(split.verdicts) else [],
        tuple(left_out),
        edges,
        ties,
    )


def plan_routes(plan: Plan | None, by: tuple[str, ...]) -> frozenset[tuple[Any, ...]]:
    """
    The ``by`` values of the routes ``plan``'s steps send attempts to, where ``by`` has them.

    Only ``provider`` and ``model`` are known from a plan: a route is the plan's when the
    columns of ``by`` that are one of them match (empty: no plan, or ``by`` has neither).
    """
    if plan is None or not any(k in _PLAN_COLUMNS for k in by):
        return frozenset()
    names = {
        name
        for step in plan.steps.values()
        for name in (step.route, step.hedge_route, step.downgrade_route, step.upgrade_route)
        if name is not None and name in plan.routes
    }
    return frozenset(
        tuple(getattr(plan.routes[n], k) for k in by if k in _PLAN_COLUMNS) for n in names
    )


def rank(
    row: dict[str, Any], by: tuple[str, ...], planned: frozenset[tuple[Any, ...]]
) -> tuple[int, bool, int, tuple[str, ...]]:
    """
    How a route ranks for drawing: most calls; among equals the plan's, more finished, name.
    """
    mine = tuple(row[k] for k in by if k in _PLAN_COLUMNS) in planned
    name = tuple("" if row[k] is None else str(row[k]) for k in by)
    return -int(row["n"]), not mine, -int(row["n_ok"]), name


def _ties(drawable: list[dict[str, Any]], max_routes: int, planned: bool) -> str:
    """
    How the last places were chosen among routes with as many calls (``""``: no tie there).
    """
    if len(drawable) <= max_routes:
        return ""
    calls = int(drawable[max_routes - 1]["n"])
    if int(drawable[max_routes]["n"]) != calls:
        return ""
    tied = [r for r in drawable if int(r["n"]) == calls]
    places = sum(1 for r in drawable[:max_routes] if int(r["n"]) == calls)
    order = "the plan's routes first, then " if planned else ""
    return (
        f"{len(tied)} routes tie at {calls:,} calls for the last {places} of {max_routes} "
        f"places, {len(tied) - places} of them left out: drawn {order}by the most finished "
        "calls, then by name"
    )
