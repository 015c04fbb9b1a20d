"""
Work or transient: per route, does the tail grow with call size, and do slow calls cluster?

A tail that grows with the work in a call (bigger buckets, longer p99/p50) is work-driven: a
fresh attempt would be slow too. A tail that does not grow, and whose slow calls come in bursts,
is transient: cutting the call and racing a fresh attempt escapes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tailkit.fit import TimeClustering, tail_growth, time_clustering


class RouteAccumulator:
    """
    Collects, per route, the bucket rows and which calls were in their bucket's tail.
    """

    def __init__(self, n_route_keys: int, *, window_s: float) -> None:
        self._n = n_route_keys
        self._window_s = window_s
        self._clustering: dict[tuple[Any, ...], TimeClustering] = {}
        self._rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._times: dict[tuple[Any, ...], list[np.ndarray[Any, Any]]] = {}
        self._tails: dict[tuple[Any, ...], list[np.ndarray[Any, Any]]] = {}

    def add(
        self,
        key: tuple[Any, ...],
        row: dict[str, Any],
        started_s: npt.NDArray[np.float64],
        is_tail: npt.NDArray[np.bool_],
    ) -> None:
        """
        Record one group (a route's bucket): its row, and per call its start and tail flag.
        """
        route = key[: self._n]
        self._rows.setdefault(route, []).append(row)
        self._times.setdefault(route, []).append(started_s)
        self._tails.setdefault(route, []).append(is_tail)

    def cluster(self) -> None:
        """
        Test every route's tail calls for clustering in time (`verdicts` does it otherwise).
        """
        for route, times in self._times.items():
            self._clustering[route] = time_clustering(
                np.concatenate(times), np.concatenate(self._tails[route]), window_s=self._window_s
            )

    def verdicts(self, by: list[str]) -> pl.DataFrame:
        """
        One row per route: tail growth with work, clustering in time, and a verdict.
        """
        if len(self._clustering) < len(self._rows):
            self.cluster()
        out = []
        for route, rows in self._rows.items():
            p50 = np.array([r["p50_s"] for r in rows], dtype=float)
            ratio = np.array([r["p99_p50"] for r in rows], dtype=float)
            n = np.array([r["n_ok"] for r in rows], dtype=float)
            growth = tail_growth(np.argsort(np.argsort(p50)), ratio, n)
            clustering = self._clustering[route]
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
