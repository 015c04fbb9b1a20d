"""
Problems found in a plan file, each with its line, field path and value, reported in file order.
"""

from __future__ import annotations

import difflib
import math

from collections.abc import Iterable
from typing import Final


Path = tuple[str | int, ...]
"""A field's place in the document: mapping keys and list indexes from the top."""

UNSET: Final = object()
"""Marks a problem that has no value to show (a missing or unknown key)."""


def format_float(value: float) -> str:
    """
    Write a float as YAML reads it back: exactly (``repr``), with ``.inf`` and ``.nan``.

    PyYAML follows YAML 1.1, where ``1e-05`` is a string: a float needs a dot before its exponent.

    Args:
        value: Any float.

    Returns:
        A plain YAML scalar that PyYAML resolves to the same float.
    """
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text:
        text = text.replace("e", ".0e", 1)
    return text


def show(value: object) -> str:
    """
    Show a value from a plan in a problem message, as YAML would spell scalars.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping" if value else "{}"
    if isinstance(value, list):
        if value and len(value) <= 4 and not any(isinstance(v, dict | list) for v in value):
            return "[" + ", ".join(show(v) for v in value) + "]"  # short: e.g. an interval
        return "a list" if value else "[]"
    return str(value)


def dotted(path: Path) -> str:
    """
    Spell a field path the way messages show it: ``steps.extract.depends_on[1]``.
    """
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        name = part if part.strip() else repr(part)  # an empty or blank name must show
        text += f".{name}" if text else name
    return text


def did_you_mean(word: str, options: Iterable[str], *, label: str) -> str:
    """
    Suggest the closest known word, or list them all when none is close.

    Args:
        word: What the file said.
        options: The words it may say.
        label: What to call the list, e.g. ``"known keys"``.

    Returns:
        ``"did you mean cutoff_s?"`` or ``"known keys: a, b, c"``.
    """
    options = list(options)
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return f"did you mean {close[0]}?"
    return f"{label}: {', '.join(options)}" if options else f"no {label} yet"


class Report:
    """
    Collects the problems of one plan document.

    Args:
        source: Name of the document in messages (a path, or ``"<plan>"``).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[Path, tuple[int, int]] = {}
        """Path -> (line of its key, line of its value), 1-based; filled by the YAML reader."""
        self._problems: list[tuple[int, str]] = []

    def line(self, path: Path, *, key: bool = False) -> int:
        """
        The line of a field's value (or key); for a field not in the file, its parent's key.
        """
        if path in self.lines:
            return self.lines[path][0 if key else 1]
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, (1, 1))[0]

    def add(
        self,
        path: Path,
        problem: str,
        *,
        value: object = UNSET,
        key: bool = False,
        line: int | None = None,
    ) -> None:
        """
        Record a problem.

        Args:
            path: The field it is about.
            problem: What is wrong and how to fix it.
            value: The value to show, if any.
            key: Point at the field's key rather than its value.
            line: Point at this line instead (for keys that are not a path).
        """
        at = self.line(path, key=key) if line is None else line
        shown = "" if value is UNSET else f" = {show(value)}"
        self._problems.append(
            (at, f"{self.source}:{at}: {dotted(path) or '(top)'}{shown}: {problem}")
        )

    def bad(self) -> bool:
        """
        True once any problem was recorded.
        """
        return bool(self._problems)

    def message(self) -> str:
        """
        All problems, one per line, in file order (then in the order found).
        """
        ordered = sorted(self._problems, key=lambda p: p[0])
        lines = [text for _, text in ordered]
        if len(lines) > 1:
            lines.insert(0, f"{self.source}: {len(lines)} problems in the plan:")
        return "\n".join(lines)
