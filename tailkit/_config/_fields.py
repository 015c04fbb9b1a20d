"""
Typed reads of one mapping of a plan document: each bad field is reported once, with its value.

A converter takes the raw YAML value and returns the typed one, or raises `Invalid` with what the
value must be. `Fields` remembers which keys failed so that rules across fields stay quiet about
values that were already reported.
"""

from __future__ import annotations

import math

from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import TYPE_CHECKING, TypeVar

from tailkit._config._report import UNSET, Path, Report, did_you_mean


if TYPE_CHECKING:
    from _typeshed import DataclassInstance


T = TypeVar("T")


class Invalid(Exception):  # noqa: N818 - internal signal, never leaves this package
    """
    A converter's refusal: what the value must be, and a hint such as a close spelling.
    """

    def __init__(self, must: str, hint: str = "") -> None:
        super().__init__(must)
        self.must = must
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.must}; {self.hint}" if self.hint else self.must


class Fields:
    """
    The fields of one mapping in the document, with its unknown keys already reported.

    Args:
        report: Where problems go.
        raw: The mapping as read from YAML (anything else is reported, and reads as empty).
        path: Where the mapping is.
        known: Its keys, in their documented order.
        what: What the mapping should hold, for the message when it is not a mapping.
    """

    def __init__(
        self, report: Report, raw: object, path: Path, known: Iterable[str], what: str
    ) -> None:
        self.report = report
        self.path = path
        self.valid = isinstance(raw, dict)
        self.raw: dict[str, object] = raw if isinstance(raw, dict) else {}
        self.failed: set[str] = set()
        if not self.valid:
            report.add(path, f"must be a mapping of {what}", value=raw)
        known = tuple(known)
        for key in self.raw:
            if key not in known:
                hint = did_you_mean(key, known, label="known keys")
                report.add((*path, key), f"unknown key ({hint})", key=True)

    def get(self, key: str, convert: Callable[[object], T], default: T) -> T:
        """
        The converted value of an optional key; its default when absent or bad.
        """
        if key not in self.raw:
            return default
        try:
            return convert(self.raw[key])
        except Invalid as exc:
            self.problem(key, str(exc))
            return default

    def need(self, key: str, convert: Callable[[object], T], default: T, fix: str) -> T:
        """
        The converted value of a required key; ``default`` after reporting it missing or bad.
        """
        if key not in self.raw:
            self.failed.add(key)
            if self.valid:
                self.report.add((*self.path, key), f"missing: {fix}")
            return default
        return self.get(key, convert, default)

    def problem(self, key: str, text: str) -> None:
        """
        Report a problem with a key's value (shown when the key is present).
        """
        self.failed.add(key)
        self.report.add((*self.path, key), text, value=self.raw.get(key, UNSET))

    def ok(self, *keys: str) -> bool:
        """
        True when the mapping and these keys read without a problem.
        """
        return self.valid and not self.failed.intersection(keys)


def _real(value: object) -> float | None:
    # bool is an int in Python, but `true` is not a number of seconds.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def seconds(value: object) -> float:
    """
    A finite number of seconds > 0 (an int is taken as a float).
    """
    number = _real(value)
    if number is None or not (0 < number < math.inf):
        msg = "must be a positive number of seconds"
        raise Invalid(msg)
    return number


def duration(value: object) -> float:
    """
    A number of seconds >= 0, ``.inf`` allowed (a predicted time that may never come).
    """
    number = _real(value)
    if number is None or not number >= 0:
        msg = "must be a number of seconds >= 0 (.inf allowed)"
        raise Invalid(msg)
    return number


def share(value: object) -> float:
    """
    A share in [0, 1].
    """
    number = _real(value)
    if number is None or not 0 <= number <= 1:
        msg = "must be a share between 0 and 1"
        raise Invalid(msg)
    return number


def ratio(value: object) -> float:
    """
    A finite number >= 0.
    """
    number = _real(value)
    if number is None or not 0 <= number < math.inf:
        msg = "must be a number >= 0"
        raise Invalid(msg)
    return number


def count(value: object) -> int:
    """
    A whole number >= 0.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = "must be a whole number >= 0"
        raise Invalid(msg)
    return value


def flag(value: object) -> bool:
    """
    A YAML boolean.
    """
    if not isinstance(value, bool):
        msg = "must be true or false"
        raise Invalid(msg)
    return value


def text(value: object) -> str:
    """
    A string with something in it.
    """
    if not isinstance(value, str) or not value.strip():
        msg = "must be a non-empty string"
        raise Invalid(msg)
    return value


def one_of(options: Iterable[str], label: str) -> Callable[[object], str]:
    """
    A converter to one of ``options``; its message lists them (``label``) or the closest one.
    """
    options = tuple(options)

    def convert(value: object) -> str:
        if isinstance(value, str) and value in options:
            return value
        listed = f"one of the {label}: {', '.join(options)}" if options else f"a {label[:-1]}"
        close = did_you_mean(value, options, label=label) if isinstance(value, str) else ""
        msg = f"must be {listed}"
        raise Invalid(msg, close if close.startswith("did") else "")

    return convert


def optional(convert: Callable[[object], T]) -> Callable[[object], T | None]:
    """
    A converter that also takes YAML ``null`` (as ``None``); its message says so.
    """

    def read(value: object) -> T | None:
        if value is None:
            return None
        try:
            return convert(value)
        except Invalid as exc:
            msg = f"{exc.must}, or null"
            raise Invalid(msg, exc.hint) from None

    return read


def record(
    f: Fields, key: str, read: Callable[[Fields], T], kind: type[DataclassInstance]
) -> T | None:
    """
    Read the mapping under ``key`` with ``read``: ``None`` when absent or null.

    Its unknown keys are reported against ``kind``'s fields; a problem inside marks ``key``
    as failed in ``f``.
    """
    value = f.raw.get(key)
    if value is None:
        return None
    known = [field.name for field in fields(kind)]
    sub = Fields(f.report, value, (*f.path, key), known, ", ".join(known))
    if not sub.valid:
        f.failed.add(key)
        return None
    result = read(sub)
    if sub.failed:
        f.failed.add(key)
    return result
