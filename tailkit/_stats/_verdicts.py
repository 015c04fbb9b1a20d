"""
Would a fresh attempt escape a route's tail? Per route: transient, work, mixed or unknown.

The table's groups (a route's token buckets) hand their calls to a `RouteAccumulator`; once
every group is in, `judge` gives each route one `tail_kind` verdict over all its calls, with
the evidence from repeat attempts the store holds (`hedges_sql`), and `verdicts` gives each of
its rows its ``transient`` flag from that verdict.
"""

from __future__ import annotations

import math

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tailkit.fit import HedgeEvidence, Interval, TailKind, hedge_evidence, tail_kind


MAX_ROUTE_CALLS = 200_000  # beyond this a route's verdict runs on a seeded subsample
_Array = npt.NDArray[np.float64]
_FIELDS = ("total_s", "cut_s", "output_tokens", "input_tokens", "started_s", "ttft_s")


class RouteAccumulator:
    """
    Collects, per route (the first ``n_route_keys`` of a group's key), its rows and calls.
    """

    def __init__(self, n_route_keys: int, *, window_s: float, level: float) -> None:
        self._n = n_route_keys
        self._window_s = window_s
        self._level = level
        self._rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._calls: dict[tuple[Any, ...], list[tuple[_Array, ...]]] = {}
        self._kinds: dict[tuple[Any, ...], TailKind] = {}

    def add(self, key: tuple[Any, ...], row: dict[str, Any], calls: tuple[_Array, ...]) -> None:
        """
        Record one group: its row and its calls' columns, in the order of ``_FIELDS``.
        """
        route = key[: self._n]
        self._rows.setdefault(route, []).append(row)
        self._calls.setdefault(route, []).append(calls)

    def judge(self, hedges: dict[tuple[Any, ...], tuple[int, int]] | None = None) -> None:
        """
        Decide every route's tail kind, once all its calls are in.

        Args:
            hedges: Per route, ``(pairs, escaped)`` from repeat attempts (see `hedges_sql`).
        """
        for route, parts in self._calls.items():
            columns = [np.concatenate([p[i] for p in parts]) for i in range(len(_FIELDS))]
            columns = _subsample(columns)
            pair = (hedges or {}).get(route)
            evidence = hedge_evidence(*pair, level=self._level) if pair else None
            self._kinds[route] = tail_kind(
                columns[0], censored_at_s=columns[1], output_tokens=columns[2],
                input_tokens=columns[3], started_at_s=columns[4], ttft_s=columns[5],
                hedges=evidence, window_s=self._window_s, level=self._level,
            )  # fmt: skip

    def verdicts(self, by: list[str]) -> pl.DataFrame:
        """
        One row per route with its tail kind and the evidence (`judge` first).

        Sets each table row's ``transient``: True for transient or mixed, False for work,
        else (unknown) True when the row's own mixture fit found a tail, else None.
        """
        out = []
        for route, verdict in self._kinds.items():
            for row in self._rows[route]:
                row["transient"] = _row_transient(verdict, row)
            out.append(dict(zip(by, route, strict=True)) | _record(verdict))
        if not out:
            return pl.DataFrame()
        frame = pl.DataFrame(out, infer_schema_length=None)
        return frame.with_columns(pl.col("transient").cast(pl.Boolean))


def _subsample(columns: list[_Array]) -> list[_Array]:
    n = columns[0].size
    if n <= MAX_ROUTE_CALLS:
        return columns
    keep = np.sort(np.random.default_rng(0).choice(n, size=MAX_ROUTE_CALLS, replace=False))
    return [c[keep] for c in columns]


def _row_transient(verdict: TailKind, row: dict[str, Any]) -> bool | None:
    if verdict.kind != "unknown":
        return verdict.transient
    return True if row.get("transient_mixture") else None


def _record(v: TailKind) -> dict[str, Any]:
    """
    The verdict's columns: kind, sentence and the evidence behind it.
    """
    nan = math.nan
    size, tail, clustering, first = v.size, v.tail, v.clustering, v.first_token
    hedges = v.hedges or HedgeEvidence(0, 0, nan, Interval(nan, nan), "unknown")
    return {
        "n": v.n,
        "n_cut": v.n_cut,
        "n_unsized_cut": v.n_unsized,
        "tail_kind": v.kind,
        "transient": v.transient,
        "size_features": ",".join(size.features) if size else "",
        "size_r2": size.r2 if size else nan,
        "size_p": size.p_value if size else nan,
        "size_elasticity": size.elasticity if size else nan,
        "residual_share": tail.share if tail else nan,
        "residual_share_lo": tail.share_interval.low if tail else nan,
        "residual_share_hi": tail.share_interval.high if tail else nan,
        "residual_scale": tail.scale if tail else nan,
        "body_sigma": tail.body_sigma if tail else nan,
        "top_transient": v.top_transient,
        "ttft_residual_share": first.share if first else nan,
        "ttft_residual_share_lo": first.share_interval.low if first else nan,
        "ttft_residual_share_hi": first.share_interval.high if first else nan,
        "ttft_residual_scale": first.scale if first else nan,
        "clustering": clustering.dispersion if clustering else nan,
        "clustering_p": clustering.p_value if clustering else nan,
        "clustered": clustering.clustered if clustering else False,
        "hedge_pairs": hedges.pairs,
        "hedge_escaped": hedges.escaped,
        "hedge_share": hedges.share,
        "hedge_share_lo": hedges.interval.low if hedges.pairs else nan,
        "hedge_share_hi": hedges.interval.high if hedges.pairs else nan,
        "verdict": v.sentence,
    }
