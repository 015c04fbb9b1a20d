"""
The one error tree of tailkit.

Every error a user can cause derives from `TailkitError`; the CLI prints its message as
``Error: …`` and exits 1. Messages say what was wrong, show the value, and name the fix.
"""

from __future__ import annotations


__all__ = [
    "AllAttemptsFailed",
    "ConfigError",
    "IngestError",
    "InputFileError",
    "MappingError",
    "MissingExtraError",
    "QueryError",
    "StepTimeout",
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


class OutOfMemoryError(QueryError):
    """
    DuckDB ran out of memory for a statement (its memory limit, or the machine's).
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


class StepTimeout(TailkitError, TimeoutError):  # noqa: N818 - the name the issue gives it
    """
    A step ran out of time: its cutoff (with action ``fail``) or the run deadline.

    Attributes:
        step: The step's name.
        spent_s: Seconds from the step's start to giving up.
        cutoff_s: The cutoff in force when it gave up (``None``: the run deadline).
    """

    def __init__(self, message: str, *, step: str, spent_s: float, cutoff_s: float | None) -> None:
        super().__init__(message)
        self.step, self.spent_s, self.cutoff_s = step, spent_s, cutoff_s


class AllAttemptsFailed(TailkitError):  # noqa: N818 - the name the issue gives it
    """
    Every attempt of a step failed (errors, invalid output); the causes are in ``__cause__``.

    Attributes:
        step: The step's name.
        spent_s: Seconds from the step's start to the last failure.
        exceptions: The attempts' errors, in the order they happened (also raised as the
            ``ExceptionGroup`` in ``__cause__``).
    """

    def __init__(
        self, message: str, *, step: str, spent_s: float, exceptions: tuple[BaseException, ...]
    ) -> None:
        super().__init__(message)
        self.step, self.spent_s, self.exceptions = step, spent_s, exceptions
