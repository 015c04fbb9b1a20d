"""
Repeat attempts of slow calls from parts of a log, judged against the whole log's p75.

`repeat_attempts_sql` pairs each slow first attempt with its fresh attempt and counts those
that finished below the p75 of first attempts on the fresh attempt's route and step. A part
of a log (a file) knows its pairs but not the whole log's p75, so it ships both halves of the
question: its pairs counted by the fresh attempt's route, step and latency (`pairs_sql`), and
the DDSketch bins of its finished first attempts per route and step (`firsts_sql`). Merged,
the bins give each p75 within the sketch's accuracy (`references`), and `judge` counts the
pairs and the escapes as the store's query does on the whole log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tailkit.store.lowlevel import ESCAPE_RANK, MIN_REFERENCE, OK_CALL, repeat_attempts_sql
from tailkit.tails._order import Type7
from tailkit.tails._query import TableQuery
from tailkit.tails._sketch import key_sql, key_values


_ROUTE = ("provider", "model", "step")
_FRESH = ("_provider", "_model", "_step")
_NO_STEP = "\x1f"  # stands for a NULL step in joins (a step is a name, never this)


def firsts_sql(query: TableQuery) -> str:
    """
    Bins (``k``, ``n``) of finished first attempts per provider, model and step.
    """
    return (
        f"SELECT provider, model, step, {key_sql('total_s')} AS k, count(*) AS n "
        f"FROM {query.source_sql()} WHERE attempt = 0 AND {OK_CALL} GROUP BY ALL"
    )


def pairs_sql(query: TableQuery) -> str:
    """
    Slow first attempts and their fresh attempts, counted per ``by`` and fresh latency.
    """
    return repeat_attempts_sql(query.source_sql(), query.by, pairs_only=True)


def merge_counts(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """
    Frames of counts (column ``n``) added per value of every other column.
    """
    frames = [f for f in frames if f.width]
    if not frames:
        return pl.DataFrame()
    rows = pl.concat(frames, how="vertical_relaxed")
    keys = [c for c in rows.columns if c != "n"]
    return rows.group_by(keys, maintain_order=True).agg(pl.col("n").sum())


def references(firsts: pl.DataFrame) -> pl.DataFrame:
    """
    Each provider, model and step's p75 of first attempts (``_p75``), from merged bins.

    Type 7 over the bins' values, so within `RELATIVE_ACCURACY` of the exact p75; only
    where there are `MIN_REFERENCE` first attempts, as `repeat_attempts_sql` requires.
    """
    rows: list[tuple[Any, ...]] = []
    if firsts.height:
        bins = firsts.group_by(*_ROUTE, "k").agg(pl.col("n").sum()).sort("k")
        for route, part in bins.group_by(*_ROUTE, maintain_order=True):
            counts = part["n"].to_numpy().astype(np.int64)
            n = int(counts.sum())
            if n < MIN_REFERENCE:
                continue
            p75 = Type7(n, (ESCAPE_RANK,))  # the type-7 quantile the sorted pass computes
            p75.add(key_values(part["k"].to_numpy().astype(np.int64)), counts)
            rows.append((*route, p75.values()[0]))
    schema = {"provider": pl.String, "model": pl.String, "step": pl.String, "_p75": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def judge(
    pairs: pl.DataFrame, firsts: pl.DataFrame, by: Sequence[str]
) -> dict[tuple[Any, ...], tuple[int, int]]:
    """
    Per route (the ``by`` columns), ``(pairs, escaped)`` as `repeat_attempts_sql` counts them.

    A pair counts where its fresh route and step have a reference; it escaped when its
    fresh attempt finished below that p75.
    """
    refs = references(firsts).rename(dict(zip(_ROUTE, _FRESH, strict=True)))
    if not pairs.height or not refs.height:
        return {(): (0, 0)} if not by else {}
    step = pl.col("_step").cast(pl.String).fill_null(_NO_STEP)
    joined = pairs.with_columns(step.alias("_step")).join(
        refs.with_columns(step.alias("_step")), on=list(_FRESH), how="inner"
    )
    escaped = pl.when(pl.col("_total") < pl.col("_p75")).then(pl.col("n")).otherwise(0)
    sums = pl.col("n").sum().alias("pairs"), escaped.sum().alias("escaped")
    if not by:
        row = joined.select(*sums).row(0)
        return {(): (int(row[0] or 0), int(row[1] or 0))}
    counted = joined.group_by(list(by), maintain_order=True).agg(*sums)
    return {tuple(r[:-2]): (int(r[-2]), int(r[-1])) for r in counted.iter_rows()}
