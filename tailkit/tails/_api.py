"""
`tailkit.stats()`: the tail table from Python, as the notebooks and reports use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from tailkit.record import Buckets
from tailkit.store import DEFAULT_DB, Store
from tailkit.tails._query import TableQuery
from tailkit.tails._table import tail_table


def stats(
    db: str | Path | Store = DEFAULT_DB,
    *,
    by: Sequence[str] = ("provider", "model"),
    bucket: Sequence[str] = ("input", "output"),
    where: str | None = None,
    min_group: int = 1,
    buckets: Buckets | None = None,
    level: float = 0.95,
    approx: bool = False,
) -> pl.DataFrame:
    """
    The tail table: one row per group, where its latency tail is and how sure we are.

    Args:
        db: A store, or the path of its DuckDB file (opened read-only).
        by: Call-record columns to group by.
        bucket: Token buckets to split groups by: ``"input"``, ``"output"``, both or none.
        where: SQL filter on call-record columns, e.g. ``"step = 'extract'"``.
        min_group: Leave out groups with fewer calls (attempts).
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        level: Confidence level of every interval.
        approx: Approximate quantiles (DuckDB's t-digest) for very large stores, with the rank
            error measured per row in column ``approx_rank_error`` (see `tail_report`).

    Returns:
        A polars DataFrame with the columns of ``tailkit stats`` (see docs/stats.md).

    Raises:
        ConfigError: ``by`` or ``bucket`` name something that cannot be grouped by.
        StoreError: The store cannot be opened, or ``where`` is not valid SQL.
    """
    query = TableQuery(by=tuple(by), bucket=tuple(bucket), where=where, buckets=buckets)
    if isinstance(db, Store):
        return tail_table(db, query, min_group=min_group, level=level, approx=approx)
    with Store.open(db, read_only=True) as store:
        return tail_table(store, query, min_group=min_group, level=level, approx=approx)
