"""
The SQL side of the tail table: one pass that counts the calls of each group and lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailkit.errors import ConfigError
from tailkit.record import CALL_COLUMNS, Buckets
from tailkit.store import OK_CALL, calls_with_buckets_sql, repeat_attempts_sql


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
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
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
        return f"({calls_with_buckets_sql(self.buckets, where=self.where)}) AS c"


def _keys_sql(keys: Sequence[str]) -> str:
    return ", ".join(f'"{k}"' for k in keys)


ORDER_PREFIX = "_order_"  # columns of `groups_sql` that only sort the groups


def order_columns(query: TableQuery) -> list[str]:
    """
    The columns that sort the groups: the ``by`` columns, then each bucket by its token range.
    """
    # Buckets sort by their smallest token count (labels would sort "2400+" before "256-600").
    return [*query.by, *(f"{ORDER_PREFIX}{b}" for b in query.bucket)]


def groups_sql(query: TableQuery) -> str:
    """
    One pass over the calls: per group, its counts and every call the statistics need.

    A cut call counts in ``n`` and ``n_censored``, a failed one in ``n`` and ``n_failed``;
    ``n_ok`` counts finished calls (`OK_CALL`: ``status = 'ok'`` and ``total_s > 0``). Column
    ``calls`` lists the finished and the cut calls as structs of ``total_s`` (NaN unless finished),
    ``cut_s`` (the cut age, NaN unless cut), ``ttft_s``, ``started_s`` (epoch seconds),
    ``output_tokens`` and ``input_tokens``, NaN where unknown -- NaN rather than NULL, so the
    columns reach numpy without a copy. Groups come in no particular order (sorting them here
    would move every list; see `order_columns`), and so do the calls in a list.
    """
    keys = _keys_sql(query.keys)
    ok = OK_CALL  # the summary's definition, so that every command counts the same calls
    nan = "'NaN'::DOUBLE"
    order = ", ".join(f"min({b}_tokens) AS {ORDER_PREFIX}{b}" for b in query.bucket)
    call = (
        f"{{'total_s': CASE WHEN status = 'ok' THEN coalesce(total_s, {nan}) ELSE {nan} END, "
        f"'cut_s': coalesce(censored_at_s, {nan}), "
        f"'ttft_s': CASE WHEN status = 'ok' THEN coalesce(ttft_s, {nan}) ELSE {nan} END, "
        f"'started_s': coalesce(epoch(started_at), {nan}), "
        f"'output_tokens': coalesce(output_tokens::DOUBLE, {nan}), "
        f"'input_tokens': coalesce(input_tokens::DOUBLE, {nan})}}"
    )
    return (
        f"SELECT {keys}, count(*) AS n, count(*) FILTER ({ok}) AS n_ok, "
        f"count(censored_at_s) AS n_censored, count(*) FILTER (status IN {_FAILED}) AS n_failed, "
        f"{order}{', ' if order else ''}"
        # Generation speed after the first token, for calls that streamed 2+ tokens.
        f"quantile_cont((output_tokens - 1) / (total_s - ttft_s), [0.5, 0.1]) FILTER ({ok} "
        "AND output_tokens >= 2 AND total_s > ttft_s) AS tokens_per_s, "
        f"list({call}) FILTER (({ok}) OR censored_at_s > 0) AS calls "
        f"FROM {query.source_sql()} GROUP BY ALL"
    )


def hedges_sql(query: TableQuery) -> str:
    """
    Per route (the ``by`` columns): slow calls retried or hedged, and how many escaped.

    See `repeat_attempts_sql`; columns: the ``by`` columns, ``pairs`` and ``escaped``.
    """
    return repeat_attempts_sql(query.source_sql(), query.by)
