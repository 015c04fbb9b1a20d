"""
The SQL side of the tail table: one aggregate pass, and the latency samples the fits need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailkit.errors import ConfigError
from tailkit.record import CALL_COLUMNS, Buckets
from tailkit.store import Store, bucket_columns_sql


QUANTILES = (0.5, 0.9, 0.95, 0.99)
_BUCKETS = {"input": "input_bucket", "output": "output_bucket"}
_GROUPABLE = tuple(c.name for c in CALL_COLUMNS if c.kind in ("text", "int", "bool"))
_FAILED = "('error', 'rate_limited', 'invalid', 'cancelled')"


@dataclass(frozen=True, slots=True)
class TableQuery:
    """
    What to group by and which calls to include.

    Args:
        by: Call-record columns to group by, e.g. ``("provider", "model")``.
        bucket: Token buckets to split groups by: any of ``"input"``, ``"output"``.
        where: An SQL filter on call-record columns, e.g. ``"step = 'extract'"``.
        buckets: Bucket edges (DESIGN.md §1 defaults when ``None``).
    """

    by: tuple[str, ...] = ("provider", "model")
    bucket: tuple[str, ...] = ("input", "output")
    where: str | None = None
    buckets: Buckets | None = None

    def __post_init__(self) -> None:
        for name in self.by:
            if name not in _GROUPABLE:
                msg = (
                    f"--by {name!r} is not a call-record column to group by; "
                    f"use {', '.join(_GROUPABLE)}"
                )
                raise ConfigError(msg)
        for name in self.bucket:
            if name not in _BUCKETS:
                msg = f"--bucket {name!r} must be input, output, or none"
                raise ConfigError(msg)
        if not self.by and not self.bucket:
            msg = "group by at least one column or bucket (--by provider,model)"
            raise ConfigError(msg)

    @property
    def keys(self) -> tuple[str, ...]:
        """
        The grouping columns, buckets last.
        """
        return (*self.by, *(_BUCKETS[b] for b in self.bucket))

    def source_sql(self) -> str:
        """
        Calls with their buckets, filtered.
        """
        filt = f" WHERE ({self.where})" if self.where else ""
        cols = ", ".join(c.name for c in CALL_COLUMNS)
        return (
            f"(SELECT {cols}, {bucket_columns_sql(self.buckets or Buckets())} "
            f"FROM calls{filt}) AS c"
        )


def _keys_sql(keys: Sequence[str]) -> str:
    return ", ".join(f'"{k}"' for k in keys)


def _order_sql(query: TableQuery) -> str:
    # Buckets sort by their token ranges (labels would sort "2400+" before "256-600").
    order = [f'"{k}"' for k in query.by]
    order += [f"min({b}_tokens) NULLS LAST" for b in query.bucket]
    return ", ".join(order)


def aggregates_sql(query: TableQuery) -> str:
    """
    One pass over the calls: counts, quantiles, log moments, TTFT and generation quantiles.

    Latency statistics use finished calls (``status = 'ok'``); a cut call counts in ``n`` and
    ``n_censored``, a failed one in ``n`` and ``n_failed``.
    """
    keys = _keys_sql(query.keys)
    ok = "status = 'ok' AND total_s > 0"
    qs = ", ".join(str(q) for q in QUANTILES)
    return (
        f"SELECT {keys}, count(*) AS n, count(*) FILTER ({ok}) AS n_ok, "
        f"count(censored_at_s) AS n_censored, count(*) FILTER (status IN {_FAILED}) AS n_failed, "
        f"quantile_cont(total_s, [{qs}]) FILTER ({ok}) AS total_q, "
        f"avg(ln(total_s)) FILTER ({ok}) AS mean_log, "
        f"var_pop(ln(total_s)) FILTER ({ok}) AS var_log, "
        f"count(ttft_s) FILTER ({ok}) AS n_ttft, "
        f"quantile_cont(ttft_s, [0.5, 0.99]) FILTER ({ok}) AS ttft_q, "
        f"quantile_cont(total_s - ttft_s, [0.5, 0.99]) FILTER ({ok}) AS gen_q "
        f"FROM {query.source_sql()} GROUP BY ALL ORDER BY {_order_sql(query)}"
    )


def samples_sql(query: TableQuery) -> str:
    """
    Per row of the latency sample: group keys, total (or NULL when cut), cut age, TTFT, start.
    """
    keys = _keys_sql(query.keys)
    return (
        f"SELECT {keys}, CASE WHEN status = 'ok' THEN total_s END AS total_s, "
        "censored_at_s, CASE WHEN status = 'ok' THEN ttft_s END AS ttft_s, "
        "epoch(started_at) AS started_s, output_tokens "
        f"FROM {query.source_sql()} "
        "WHERE (status = 'ok' AND total_s > 0) OR censored_at_s > 0"
    )


def run(store: Store, sql: str) -> object:
    """
    A query's result as an Arrow table.
    """
    return store.relation(sql).to_arrow_table()
