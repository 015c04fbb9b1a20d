"""
The one error tree of tailkit.

Every error a user can cause derives from `TailkitError`; the CLI prints its message as
``Error: …`` and exits 1. Messages say what was wrong, show the value, and name the fix.
"""

from __future__ import annotations


__all__ = [
    "ConfigError",
    "IngestError",
    "InputFileError",
    "MappingError",
    "MissingExtraError",
    "QueryError",
    "StoreError",
    "StoreVersionError",
    "StrictModeError",
    "TailkitError",
    "UnitError",
]


class TailkitError(Exception):
    """
    Base of every error tailkit raises on purpose.
    """


class MissingExtraError(TailkitError):
    """
    An optional dependency group is not installed.
    """


class ConfigError(TailkitError):
    """
    A plan or option value is invalid.
    """


class StoreError(TailkitError):
    """
    The DuckDB store cannot be opened or written.
    """


class QueryError(StoreError):
    """
    DuckDB refused a statement (a reader could not parse a file, or bad SQL).
    """


class StoreVersionError(StoreError):
    """
    The store was written by a newer tailkit, or cannot be migrated.
    """


class IngestError(TailkitError):
    """
    A file could not be ingested; nothing from it was stored.
    """


class InputFileError(IngestError):
    """
    A path is missing, empty, binary, or not in a readable format.
    """


class MappingError(IngestError):
    """
    ``--map`` / ``--set`` name an unknown column, or a required column has no source.
    """


class UnitError(IngestError):
    """
    Duration values look like another unit than the one assumed.
    """


class StrictModeError(IngestError):
    """
    ``--strict`` was given and a file has bad rows; nothing from it was stored.
    """
