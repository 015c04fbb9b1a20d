"""
One module per log format, each turning a file into SQL for DuckDB's native readers.

The SQL yields call-record columns (docs/call-record.md). Formats never run SQL themselves;
`tailkit.ingest` does. `FORMATS` names the formats (``format=`` of `tailkit.ingest`), and
`ScanOptions` says how to map, set and convert a file's columns. What ingest builds its scans
from is in `tailkit.formats.lowlevel`.
"""

from tailkit.formats._mapping import ScanOptions as ScanOptions
from tailkit.formats._registry import FORMATS as FORMATS
from tailkit.formats._registry import describe as describe
from tailkit.formats._registry import detect_format as detect_format


__all__ = ["FORMATS", "ScanOptions", "describe", "detect_format"]
