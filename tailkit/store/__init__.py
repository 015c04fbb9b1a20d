"""
The DuckDB store: schema, inserts, dedupe, rejects and queries.

`Store` opens (creating or migrating) a store file; `summarize_store` says what it holds and
`rejected_rows` lists the rows ingest refused. The SQL building blocks the analysis packages
share are in `tailkit.store.lowlevel`.
"""

from tailkit.store._rejects import RejectedRow as RejectedRow
from tailkit.store._rejects import rejected_rows as rejected_rows
from tailkit.store._schema import SCHEMA_VERSION as SCHEMA_VERSION
from tailkit.store._store import DEFAULT_DB as DEFAULT_DB
from tailkit.store._store import Store as Store
from tailkit.store._summary import RouteSummary as RouteSummary
from tailkit.store._summary import StoreSummary as StoreSummary
from tailkit.store._summary import summarize_store as summarize_store


__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "RejectedRow",
    "RouteSummary",
    "Store",
    "StoreSummary",
    "rejected_rows",
    "summarize_store",
]
