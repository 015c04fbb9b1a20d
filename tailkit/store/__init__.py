"""
The DuckDB store: schema, inserts, dedupe, rejects and queries.
"""

from tailkit.store._band import band_quantile_sql as band_quantile_sql
from tailkit.store._rejects import RejectedRow as RejectedRow
from tailkit.store._rejects import rejected_rows as rejected_rows
from tailkit.store._repeats import ATTEMPT_KEY as ATTEMPT_KEY
from tailkit.store._repeats import ESCAPE_RANK as ESCAPE_RANK
from tailkit.store._repeats import SLOW_RANK as SLOW_RANK
from tailkit.store._repeats import paired_calls_sql as paired_calls_sql
from tailkit.store._repeats import repeat_attempts_sql as repeat_attempts_sql
from tailkit.store._sample import group_sample_sql as group_sample_sql
from tailkit.store._schema import SCHEMA_VERSION as SCHEMA_VERSION
from tailkit.store._store import DEFAULT_DB as DEFAULT_DB
from tailkit.store._store import IngestRecord as IngestRecord
from tailkit.store._store import Store as Store
from tailkit.store._store import bucket_columns_sql as bucket_columns_sql
from tailkit.store._store import calls_with_buckets_sql as calls_with_buckets_sql
from tailkit.store._summary import OK_CALL as OK_CALL
from tailkit.store._summary import RouteSummary as RouteSummary
from tailkit.store._summary import StoreSummary as StoreSummary
from tailkit.store._summary import summarize_store as summarize_store


__all__ = [
    "ATTEMPT_KEY",
    "DEFAULT_DB",
    "ESCAPE_RANK",
    "OK_CALL",
    "SCHEMA_VERSION",
    "SLOW_RANK",
    "IngestRecord",
    "RejectedRow",
    "RouteSummary",
    "Store",
    "StoreSummary",
    "band_quantile_sql",
    "bucket_columns_sql",
    "calls_with_buckets_sql",
    "group_sample_sql",
    "paired_calls_sql",
    "rejected_rows",
    "repeat_attempts_sql",
    "summarize_store",
]
