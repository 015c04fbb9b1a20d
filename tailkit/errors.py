"""
The one error tree of tailkit.

Every error a user can cause derives from `TailkitError`; the CLI prints its message as
``Error: …`` and exits 1. Messages say what was wrong, show the value, and name the fix.

An error about one parameter carries it: ``field`` (the parameter's name as the library spells
it, e.g. ``budget``), ``value`` (what was given) and ``fix``. The library never names a command-line
flag; a message refers to its parameter as ``{field}`` and to any other as ``{parameter}``, which
`TailkitError.render` fills in with the parameters' names (``str(error)``) or, from the CLI, with
the flags that set them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


__all__ = [
    "MISSING",
    "AllAttemptsFailed",
    "ConfigError",
    "FilterError",
    "IngestError",
    "InputFileError",
    "MappingError",
    "MissingExtraError",
    "QueryError",
    "StepTimeout",
    "StoreError",
    "StoreFileError",
    "StoreVersionError",
    "StrictModeError",
    "TailkitError",
    "UnitError",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""The ``value`` of an error that has no value to show."""


class TailkitError(Exception):
    """
    Base of every error tailkit raises on purpose.

    Args:
        message: What was wrong. ``{field}`` in it stands for the parameter's name, so that the
            CLI can show its flag instead.
        field: The parameter the error is about, as the library names it (``None``: not one).
        value: The value given for it.
        fix: What to do instead; appended to the message when given.

    Attributes:
        field, value, fix: As given.
    """

    field: str | None = None
    value: Any = MISSING
    fix: str | None = None

    def __init__(
        self,
        message: str = "",
        *,
        field: str | None = None,
        value: Any = MISSING,
        fix: str | None = None,
    ) -> None:
        self.template, self.field, self.value, self.fix = message, field, value, fix
        super().__init__(self.render())

    def render(self, name: Callable[[str], str] | None = None) -> str:
        """
        The message, its ``{field}`` and ``{parameter}`` tokens spelt by ``name``.
        """
        template: str | None = getattr(self, "template", None)
        if template is None:  # a subclass that set args itself
            return super().__str__()
        from tailkit.text import name_parameters  # rendering needs it; importing tailkit does not

        field = self.field or ""
        spelt = name(field) if name and field else field
        # {field} may be a key path (routes[0].ttft_s), so it is filled in as itself; every other
        # {parameter} token is spelt as in tailkit.text.Advice, so one message can name several.
        text = spelt.join(name_parameters(part, name) for part in template.split("{field}"))
        fix = name_parameters(self.fix, name) if self.fix else ""
        if fix and fix not in text:
            text = f"{text.rstrip()} {fix}".strip()
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[TailkitError], args: tuple[Any, ...], state: dict[str, Any]) -> TailkitError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class MissingExtraError(TailkitError):
    """
    An optional dependency group is not installed.
    """


class ConfigError(TailkitError):
    """
    A plan or option value is invalid.
    """


class FilterError(ConfigError):
    """
    A ``where`` filter is not SQL, or reaches beyond the call columns.

    A subquery, a table function or a setting is refused before any query runs.
    """


class StoreError(TailkitError):
    """
    The DuckDB store cannot be opened or written.
    """


class StoreFileError(StoreError):
    """
    The store file cannot be read or written: not a regular file, locked, damaged, a full disk.
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
