"""
Ingest call logs: detect the format, read inside DuckDB, validate, bucket, store.
"""

from tailkit.formats import ScanOptions as ScanOptions
from tailkit.ingest._in_place import InPlace as InPlace
from tailkit.ingest._in_place import SourceFile as SourceFile
from tailkit.ingest._in_place import open_in_place as open_in_place
from tailkit.ingest._in_place import read_in_place as read_in_place
from tailkit.ingest._ingest import FileResult as FileResult
from tailkit.ingest._ingest import IngestReport as IngestReport
from tailkit.ingest._ingest import Progress as Progress
from tailkit.ingest._ingest import ingest_paths as ingest_paths
from tailkit.ingest._paths import expand_paths as expand_paths


__all__ = [
    "FileResult",
    "InPlace",
    "IngestReport",
    "Progress",
    "ScanOptions",
    "SourceFile",
    "expand_paths",
    "ingest_paths",
    "open_in_place",
    "read_in_place",
]
