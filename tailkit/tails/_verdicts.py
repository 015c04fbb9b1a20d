"""
Would a fresh attempt escape a route's tail? Per route: transient, work, mixed or unknown.

The table's groups (a route's token buckets) hand their rows to a `RouteAccumulator`; `judge`
gives each route one `tail_kind` verdict over a seeded sample of its calls drawn in DuckDB (all
of them up to `MAX_ROUTE_CALLS`), with the evidence from repeat attempts the store holds
(`hedges_sql`) and from paired calls, the same job on several routes (`paired_calls_sql`), and
`verdicts` gives each of its rows its ``transient`` flag from that verdict. Single calls alone
only say that a tail looks transient; the verdict's sentence and its ``escape_confirmed_by``
column say whether repeat attempts or paired calls confirm that a fresh attempt escapes it.
The sample is uniform over the route's calls, so its shares are the route's; the clustering
test sees the sampled calls' start times (a uniform thinning keeps a Poisson stream Poisson
and a clustered one over-dispersed).
"""

from __future__ import annotations

import math

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import polars as pl

from tailkit.estimate import Estimate
from tailkit.fit import TailKind, tail_kind
from tailkit.fit.lowlevel import HedgeEvidence, hedge_evidence
from tailkit.tails._samples import Calls


MAX_ROUTE_CALLS = 200_000  # beyond this a route's verdict runs on a seeded sample
MAX_WAITING_BYTES = 64 * 2**20  # route samples handed to the judging thread, not yet judged
Counts = dict[tuple[Any, ...], tuple[int, int]]


class RouteAccumulator:
    """
    Collects, per route (the first ``n_route_keys`` of a group's key), its rows.

    With ``background``, routes are judged on a thread of their own, as their samples arrive,
    while the caller goes on (the table's sorted pass and its rows' fits): the judging is numpy
    on arrays (regressions, sorts, partitions), which releases the GIL, so it runs on the
    second core. Samples waiting for that thread hold at most `MAX_WAITING_BYTES` (beyond,
    `judge` waits for the oldest): memory stays bounded whatever the number of routes.
    `finish` waits for every verdict; `close` lets the thread go.
    """

    def __init__(
        self, n_route_keys: int, *, window_s: float, level: float, background: bool = False
    ) -> None:
        self._n = n_route_keys
        self._window_s = window_s
        self._level = level
        self._rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._ids: dict[tuple[Any, ...], int] = {}
        self._kinds: dict[tuple[Any, ...], TailKind] = {}
        self._pool = ThreadPoolExecutor(1, "tailkit-routes") if background else None
        self._waiting: deque[tuple[Future[None], int]] = deque()
        self._waiting_bytes = 0

    def add(self, key: tuple[Any, ...], row: dict[str, Any], route_id: int) -> None:
        """
        Record one group's row; ``route_id`` is its route's id in the route samples.
        """
        route = key[: self._n]
        self._rows.setdefault(route, []).append(row)
        self._ids[route] = route_id

    def judge(
        self,
        route_id: int,
        calls: Calls,
        hedges: Counts | None = None,
        paired: Counts | None = None,
    ) -> None:
        """
        Decide the tail kind of the route(s) with id ``route_id`` from a sample of its calls.

        Args:
            route_id: The route's id, as given to `add`.
            calls: A seeded sample of the route's finished and cut calls.
            hedges: Per route, ``(pairs, escaped)`` from repeat attempts (see `hedges_sql`).
            paired: Per route, ``(pairs, escaped)`` from paired calls (`paired_calls_sql`).
        """
        routes = [route for route, rid in self._ids.items() if rid == route_id]
        if self._pool is None:
            for route in routes:
                self._judge(route, calls, hedges, paired)
            return
        size = sum(column.nbytes for column in calls.columns())
        while self._waiting and self._waiting_bytes + size > MAX_WAITING_BYTES:
            self._wait_oldest()
        for route in routes:
            self._waiting.append(
                (self._pool.submit(self._judge, route, calls, hedges, paired), size)
            )
            self._waiting_bytes += size
            size = 0  # one sample, however many routes share its id

    def _wait_oldest(self) -> None:
        future, size = self._waiting.popleft()
        self._waiting_bytes -= size
        future.result()  # a verdict that failed raises here

    def finish(self, hedges: Counts | None = None, paired: Counts | None = None) -> None:
        """
        Wait for every route judged in the background; decide the routes with no calls.
        """
        while self._waiting:
            self._wait_oldest()
        self.judge_rest(hedges, paired)

    def close(self) -> None:
        """
        Let the judging thread go (once the verdicts are in, or on an error).
        """
        if self._pool is not None:
            for future, _ in self._waiting:
                future.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None

    def judge_rest(self, hedges: Counts | None = None, paired: Counts | None = None) -> None:
        """
        Decide the routes not judged yet: they have no finished or cut call.

        With ``background``, after `finish` (which calls it).
        """
        for route in self._ids:
            if route not in self._kinds:
                self._judge(route, Calls.empty(), hedges, paired)

    def _judge(
        self,
        route: tuple[Any, ...],
        c: Calls,
        hedges: Counts | None,
        paired: Counts | None,
    ) -> None:
        repeats, jobs = (hedges or {}).get(route), (paired or {}).get(route)
        self._kinds[route] = tail_kind(
            c.total_s, censored_at_s=c.cut_s, output_tokens=c.output_tokens,
            input_tokens=c.input_tokens, started_at_s=c.started_s, ttft_s=c.ttft_s,
            hedges=hedge_evidence(*repeats, level=self._level) if repeats else None,
            paired=hedge_evidence(*jobs, level=self._level) if jobs else None,
            window_s=self._window_s, level=self._level,
        )  # fmt: skip

    def verdicts(self, by: list[str]) -> pl.DataFrame:
        """
        One row per route with its tail kind and the evidence (`judge` first).

        Sets each table row's ``tail_kind``, its route's verdict (``transient``, ``mixed``,
        ``work`` or ``unknown``: one word, so "transient" never covers a mixed route), and its
        ``transient``: True for transient or mixed (a fresh attempt escapes some of the tail),
        False for work, else (unknown) True when the row's own mixture fit found a tail, else
        None.
        """
        out = []
        for route, verdict in self._kinds.items():
            for row in self._rows[route]:
                row["tail_kind"] = verdict.kind
                row["transient"] = _row_transient(verdict, row)
            out.append(dict(zip(by, route, strict=True)) | _record(verdict))
        if not out:
            return pl.DataFrame()
        frame = pl.DataFrame(out, infer_schema_length=None)
        return frame.with_columns(pl.col("transient").cast(pl.Boolean))


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
    none = HedgeEvidence(0, 0, nan, Estimate(nan, nan, nan), "unknown")
    hedges, paired = v.hedges or none, v.paired or none
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
        "paired_pairs": paired.pairs,
        "paired_escaped": paired.escaped,
        "paired_share": paired.share,
        "paired_share_lo": paired.interval.low if paired.pairs else nan,
        "paired_share_hi": paired.interval.high if paired.pairs else nan,
        "token_counts": ",".join(v.counted),
        "second_mode_s": v.mode.at_s if v.mode else nan,
        "second_mode_share": v.mode.share if v.mode else nan,
        "second_mode_delay_s": v.mode.delay_s if v.mode else nan,
        "escape_confirmed_by": v.escape_confirmed_by or "",
        "spells": v.spells,
        "verdict": v.sentence,
    }
