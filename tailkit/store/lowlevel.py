"""
Low-level: the store's SQL building blocks, for the analysis packages; they may change.

The calls with their token buckets (`calls_with_buckets_sql`, `bucket_columns_sql`), what a
finished call is (`OK_CALL`), repeat attempts and paired calls (`repeat_attempts_sql`,
`paired_calls_sql` and their ranks), seeded per-group samples (`group_sample_sql`,
`sample_hash_sql`, `keep_threshold`), band quantiles and reading a result in batches. Code
written against `tailkit.store` (open a store, summarize it, list its rejects) needs none of
them.
"""

from tailkit.store._band import band_quantile_sql
from tailkit.store._repeats import (
    ATTEMPT_KEY,
    ESCAPE_RANK,
    MIN_REFERENCE,
    SLOW_RANK,
    paired_calls_sql,
    repeat_attempts_sql,
)
from tailkit.store._sample import (
    group_sample_sql,
    keep_threshold,
    record_batches,
    sample_hash_sql,
)
from tailkit.store._store import IngestRecord, bucket_columns_sql, calls_with_buckets_sql
from tailkit.store._summary import OK_CALL
from tailkit.store._where import WHERE_COLUMNS, checked_where


__all__ = [
    "ATTEMPT_KEY",
    "ESCAPE_RANK",
    "MIN_REFERENCE",
    "OK_CALL",
    "SLOW_RANK",
    "WHERE_COLUMNS",
    "IngestRecord",
    "band_quantile_sql",
    "bucket_columns_sql",
    "calls_with_buckets_sql",
    "checked_where",
    "group_sample_sql",
    "keep_threshold",
    "paired_calls_sql",
    "record_batches",
    "repeat_attempts_sql",
    "sample_hash_sql",
]
