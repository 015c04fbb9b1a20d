"""
Ingest call logs: detect the format, read inside DuckDB, validate, bucket, store.

`ingest_paths` stores files' calls and reports, per file, what was stored, rejected or skipped
(`IngestReport`; its `advice` says why a run stored nothing). `open_in_place` reads files where
they are instead, as a view. The steps under both are in `tailkit.ingest.lowlevel`.
"""

from tailkit.formats import ScanOptions as ScanOptions
from tailkit.ingest._in_place import InPlace as InPlace
from tailkit.ingest._in_place import open_in_place as open_in_place
from tailkit.ingest._ingest import FileResult as FileResult
from tailkit.ingest._ingest import IngestReport as IngestReport
from tailkit.ingest._ingest import NothingStored as NothingStored
from tailkit.ingest._ingest import Progress as Progress
from tailkit.ingest._ingest import ingest_paths as ingest_paths


__all__ = [
    "FileResult",
    "InPlace",
    "IngestReport",
    "NothingStored",
    "Progress",
    "ScanOptions",
    "ingest_paths",
    "open_in_place",
]
