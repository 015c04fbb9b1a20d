"""
Ingest call logs: detect the format, read inside DuckDB, validate, bucket, store.
"""

from tailkit.formats import ScanOptions as ScanOptions
from tailkit.ingest._ingest import FileResult as FileResult
from tailkit.ingest._ingest import IngestReport as IngestReport
from tailkit.ingest._ingest import Progress as Progress
from tailkit.ingest._ingest import ingest_paths as ingest_paths
from tailkit.ingest._paths import expand_paths as expand_paths


__all__ = ["FileResult", "IngestReport", "Progress", "ScanOptions", "expand_paths", "ingest_paths"]
