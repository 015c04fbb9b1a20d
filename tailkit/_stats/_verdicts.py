"""
Work or transient: per route, does the tail grow with call size, and do slow calls cluster?

A tail that grows with the work in a call (bigger buckets, longer p99/p50) is work-driven: a
fresh attempt would be slow too. A tail that does not grow, and whose slow calls come in bursts,
is transient: cutting the call and racing a fresh attempt escapes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from tailkit.fit import tail_growth, time_clustering


_TAIL_Q = 0.95  # a call is in its bucket's tail above the bucket's p95


class RouteAccumulator:
    """
    Collects, per route, the bucket rows and which calls were in their bucket's tail.
    """

    def __init__(self, n_route_keys: int) -> None:
        self._n = n_route_keys
        self._rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._times: dict[tuple[Any, ...], list[np.ndarray[Any, Any]]] = {}
        self._tails: dict[tuple[Any, ...], list[np.ndarray[Any, Any]]] = {}

    def add(self, key: tuple[Any, ...], row: dict[str, Any], sample: Any) -> None:
        """
        Record one group (a route's bucket) and its sample.
        """
        route = key[: self._n]
        self._rows.setdefault(route, []).append(row)
        total = sample.total_s
        finished = np.isfinite(total)
        threshold = np.quantile(total[finished], _TAIL_Q) if finished.any() else np.inf
        # A cut call is slower than its cut age: it is in the tail if that age already is.
        slow = np.where(finished, total, sample.censored_at_s) >= threshold
        self._times.setdefault(route, []).append(sample.started_s)
        self._tails.setdefault(route, []).append(slow)

    def verdicts(self, by: list[str], *, window_s: float) -> pl.DataFrame:
        """
        One row per route: tail growth with work, clustering in time, and a verdict.
        """
        out = []
        for route, rows in self._rows.items():
            p50 = np.array([r["p50_s"] for r in rows], dtype=float)
            ratio = np.array([r["p99_p50"] for r in rows], dtype=float)
            n = np.array([r["n_ok"] for r in rows], dtype=float)
            growth = tail_growth(np.argsort(np.argsort(p50)), ratio, n)
            clustering = time_clustering(
                np.concatenate(self._times[route]),
                np.concatenate(self._tails[route]),
                window_s=window_s,
            )
            record: dict[str, Any] = dict(zip(by, route, strict=True))
            record |= {
                "buckets": growth.n_buckets,
                "growth_rho": growth.spearman_rho,
                "growth_p": growth.p_value,
                "tail_grows": growth.grows,
                "clustering": clustering.dispersion,
                "clustering_p": clustering.p_value,
                "clustered": clustering.clustered,
                "verdict": _verdict(growth.grows, clustering.clustered, growth.verdict,
                                    clustering.verdict),
            }  # fmt: skip
            out.append(record)
        return pl.DataFrame(out, infer_schema_length=None)


def _verdict(grows: bool, clustered: bool, growth: str, clustering: str) -> str:
    if grows and not clustered:
        return "work-driven: " + growth
    if clustered and not grows:
        return "transient: " + clustering
    return f"{growth}; {clustering}"
