"""
A short overview of what a store holds, for ``tailkit ingest`` and ``tailkit summary``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tailkit.record import Buckets
from tailkit.store._store import calls_with_buckets_sql


if TYPE_CHECKING:
    from tailkit.store._store import Store


OK_CALL = "status = 'ok' AND total_s > 0"
"""SQL true for a call that finished: the ``ok`` count of the summary and of the tail table."""


@dataclass(frozen=True, slots=True)
class RouteSummary:
    """
    Calls of one provider/model: counts by outcome and the ok calls' latency.
    """

    provider: str
    model: str
    calls: int
    ok: int
    failed: int
    censored: int
    with_ttft: int
    p50_s: float | None
    p99_s: float | None


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """
    Table sizes, calls per route, and calls per input x output token bucket.
    """

    calls: int
    rejects: int
    ingests: int
    routes: list[RouteSummary]
    input_labels: list[str]
    output_labels: list[str]
    bucket_counts: dict[tuple[str, str], int]


def summarize_store(store: Store, buckets: Buckets | None = None) -> StoreSummary:
    """
    Summarize a store: what is in it, per route and per token bucket.

    Args:
        store: An open store.
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
    """
    buckets = buckets or Buckets()
    counts = store.counts()
    # A call is ok as `tailkit stats` counts it (n_ok): finished, with a positive latency;
    # every other call is failed (timeouts and cut calls included, as the cut column says).
    # Both quantiles from one list aggregate: each route's latencies are gathered once, not
    # twice (half the time and memory of two quantile_cont aggregates).
    rows = store.fetchall(
        f"SELECT provider, model, count(*), count(*) FILTER ({OK_CALL}), "
        f"count(*) FILTER (NOT coalesce({OK_CALL}, false)), count(censored_at_s), "
        f"count(ttft_s), quantile_cont(total_s, [0.5, 0.99]) FILTER ({OK_CALL}) "
        "FROM calls GROUP BY ALL ORDER BY 3 DESC, 1, 2"
    )
    routes = [RouteSummary(*row[:-1], *(row[-1] or (None, None))) for row in rows]
    # through fetchall, so that a damaged block is one error naming the file, not a traceback
    cells = store.fetchall(
        "SELECT input_bucket, output_bucket, count(*) "
        f"FROM ({calls_with_buckets_sql(buckets)}) GROUP BY ALL"
    )
    input_labels = [buckets.input_label(e) for e in buckets.input_edges]
    output_labels = [buckets.output_label(e) for e in buckets.output_edges]
    found = {(str(a), str(b)): int(n) for a, b, n in cells}
    if any(a == "?" for a, _ in found):
        input_labels.append("?")
    if any(b == "?" for _, b in found):
        output_labels.append("?")
    return StoreSummary(
        calls=counts["calls"],
        rejects=counts["rejects"],
        ingests=counts["ingests"],
        routes=routes,
        input_labels=input_labels,
        output_labels=output_labels,
        bucket_counts=found,
    )
