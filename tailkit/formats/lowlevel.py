"""
Low-level: what ingest builds a file's scan from; for ingest and new formats, it may change.

The registry's parts (`GENERIC` formats, the `DETECTORS` asked first), a file's detection
(`Detected`, `read_head`, `SUFFIXES`, `suffix_of`), the adapter protocol and its result
(`FileFormat`, `Scan`, `check_options`), SQL helpers (`literal`, `sql_path`, `REJECT_STATUS`,
and `scrub_values`, `scrub_values_json` for secrets inside stored text) and the longest line the
readers take (`MAX_LINE`). Code that ingests files needs none of them.
"""

from tailkit.formats._detect import (
    SUFFIXES,
    Detected,
    Detector,
    read_head,
    read_head_whole,
    suffix_of,
)
from tailkit.formats._lines import MAX_LINE
from tailkit.formats._mapping import FileFormat, Scan, check_options
from tailkit.formats._paths import sql_path
from tailkit.formats._registry import DETECTORS, GENERIC
from tailkit.formats._secrets import scrub_values, scrub_values_json
from tailkit.formats._sql import REJECT_STATUS, literal


__all__ = [
    "DETECTORS",
    "GENERIC",
    "MAX_LINE",
    "REJECT_STATUS",
    "SUFFIXES",
    "Detected",
    "Detector",
    "FileFormat",
    "Scan",
    "check_options",
    "literal",
    "read_head",
    "read_head_whole",
    "scrub_values",
    "scrub_values_json",
    "sql_path",
    "suffix_of",
]
