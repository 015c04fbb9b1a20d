"""
Low-level: the steps under ingest and reading in place, for the engines; they may change.

The files a list of paths, folders and globs names (`expand_paths`), and reading them as a view
into a store of one's own (`read_in_place`, per file a `SourceFile`). Code that ingests or
reads files needs none of them.
"""

from tailkit.ingest._in_place import SourceFile, read_in_place
from tailkit.ingest._paths import expand_paths


__all__ = ["SourceFile", "expand_paths", "read_in_place"]
