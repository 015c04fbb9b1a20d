"""
Per-group samples drawn inside DuckDB: what the fits, the phase split and the verdicts read.
"""

from __future__ import annotations

import itertools

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailkit.store import Store
from tailkit.store.lowlevel import keep_threshold, record_batches
from tailkit.tails._query import GROUP_ID, ROUTE_ID, TableQuery, calls_sql, samples_sql


_Array = npt.NDArray[np.float64]
CHUNK_ROWS = 1 << 16  # sample rows per chunk read
FIELDS = ("total_s", "cut_s", "ttft_s", "started_s", "output_tokens", "input_tokens")


@dataclass(frozen=True, slots=True)
class Calls:
    """
    Some calls of one group as columns (`FIELDS`), NaN where unknown.

    ``total_s`` is NaN unless the call finished, ``cut_s`` NaN unless it was cut.
    """

    total_s: _Array
    cut_s: _Array
    ttft_s: _Array
    started_s: _Array
    output_tokens: _Array
    input_tokens: _Array

    @classmethod
    def empty(cls) -> Calls:
        """
        No calls.
        """
        return cls(*(np.empty(0) for _ in FIELDS))

    def columns(self) -> tuple[_Array, ...]:
        """
        The columns in the order of `FIELDS`.
        """
        return (
            self.total_s, self.cut_s, self.ttft_s,
            self.started_s, self.output_tokens, self.input_tokens,
        )  # fmt: skip

    def fit_input(self, *, censored: bool) -> tuple[_Array, _Array | None]:
        """
        The calls as the fits take them, in a fixed order (sorted) so subsamples repeat.

        Finished latencies sorted, then (when the group had cut calls) NaN for each cut one,
        with the cut ages aligned: NaN for each finished call, then the cut ages sorted.
        """
        finished = np.sort(self.total_s)
        finished = finished[~np.isnan(finished)]
        if not censored:
            return finished, None
        cut = np.sort(self.cut_s)
        cut = cut[~np.isnan(cut)]
        gap = np.full(cut.size, np.nan), np.full(finished.size, np.nan)
        return np.concatenate([finished, gap[0]]), np.concatenate([gap[1], cut])


def fetch_samples(
    store: Store,
    query: TableQuery,
    groups: Mapping[int, int | None],
    routes: Mapping[int, int],
    *,
    group_size: int,
    route_size: int,
    on_route: Callable[[int, Calls], None],
) -> dict[int, Calls]:
    """
    Seeded samples of finished and cut calls, per table group and per route, in one scan.

    The rows arrive sorted by route, in chunks: each route's sample goes to ``on_route`` as
    soon as it is complete and is dropped, so memory holds the groups' samples and one route's.

    Args:
        store: An open store.
        query: The table's query.
        groups: Per group id, its finished and cut calls (`groups_sql`'s ``n_listed``); ``None``
            for a group whose calls only its route's sample needs.
        routes: Per route id, its finished and cut calls in the groups of ``groups``.
        group_size: Calls per group sample.
        route_size: Calls per route sample.
        on_route: Called with each route id and its sample, once per route with calls.

    Returns:
        The samples by group id. Every sample is sorted by its draw (so the same calls give
        the same rows in the same order).
    """
    sql = samples_sql(
        query,
        {g: 0.0 if n is None else keep_threshold(n, group_size) for g, n in groups.items()},
        {r: keep_threshold(n, route_size) for r, n in routes.items()},
        group_size=group_size,
        route_size=route_size,
    )
    batches = record_batches(store, f"{sql} ORDER BY {ROUTE_ID}, _h", rows=CHUNK_ROWS)
    return read_samples(batches, on_route)


def read_samples(
    batches: Iterable[Any], on_route: Callable[[int, Calls], None]
) -> dict[int, Calls]:
    """
    The group samples of `samples_sql`'s rows; each route's sample goes to ``on_route``.

    ``batches`` are Arrow record batches of the rows sorted by route id, then draw.
    """
    kept: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], list[_Array]]] = []
    route: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], list[_Array]]] = []
    for batch in batches:

        def column(name: str, dtype: type, batch: Any = batch) -> npt.NDArray[Any]:
            return np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=dtype)

        gid, rid, draw = (column(c, np.uint64) for c in (GROUP_ID, ROUTE_ID, "_h"))
        in_group, in_route = column("in_group", np.bool_), column("in_route", np.bool_)
        fields = [column(name, np.float64) for name in FIELDS]
        kept.append((gid[in_group], draw[in_group], [f[in_group] for f in fields]))
        rid, draw, fields = rid[in_route], draw[in_route], [f[in_route] for f in fields]
        # a route is complete once a later one starts (rows come sorted by route)
        for start, stop in _runs(rid):
            if route and route[0][0][0] != rid[start]:
                _deliver(route, on_route)
                route = []
            route.append((rid[start:stop], draw[start:stop], [f[start:stop] for f in fields]))
    if route:
        _deliver(route, on_route)
    if not kept:
        return {}
    return _split(
        np.concatenate([k[0] for k in kept]),
        np.concatenate([k[1] for k in kept]),
        [np.concatenate([k[2][i] for k in kept]) for i in range(len(FIELDS))],
    )


def _runs(ids: npt.NDArray[np.uint64]) -> list[tuple[int, int]]:
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1, [ids.size]]).tolist()
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _deliver(
    parts: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], list[_Array]]],
    on_route: Callable[[int, Calls], None],
) -> None:
    fields = [np.concatenate([p[2][i] for p in parts]) for i in range(len(FIELDS))]
    on_route(int(parts[0][0][0]), Calls(*fields))


def _split(
    ids: npt.NDArray[np.uint64], draw: npt.NDArray[np.uint64], fields: list[_Array]
) -> dict[int, Calls]:
    order = np.lexsort((draw, ids))
    ids, fields = ids[order], [f[order] for f in fields]
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1, [ids.size]])
    out: dict[int, Calls] = {}
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if stop > start:
            out[int(ids[start])] = Calls(*(f[start:stop] for f in fields))
    return out


def fetch_calls(store: Store, query: TableQuery, gid: int) -> Calls:
    """
    Every finished or cut call of one group.
    """
    table = store.arrow(calls_sql(query, gid))
    return Calls(*(
        np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
        for name in FIELDS
    ))  # fmt: skip
