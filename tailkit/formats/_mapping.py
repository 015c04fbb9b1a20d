"""
What a scan is, and how source columns are assigned to call-record columns.
"""

from __future__ import annotations

import difflib

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailkit.errors import MappingError
from tailkit.formats._sql import INTEGER_TYPES, NUMERIC_TYPES, RawColumn, literal
from tailkit.record import SOURCE_COLUMNS


MAPPABLE = tuple(c.name for c in SOURCE_COLUMNS)
_KIND = {c.name: c.kind for c in SOURCE_COLUMNS}


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """
    How to read a file's columns into the call record.

    Args:
        mapping: Call-record column → source column (``--map total_s=latency``).
        sets: Call-record column → one value for every row (``--set provider=openai``).
        unit: Unit of the duration columns: ``"s"``, ``"ms"``, or ``None`` (seconds, checked).
    """

    mapping: Mapping[str, str] = field(default_factory=dict)
    sets: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None

    @property
    def duration_scale(self) -> float:
        """
        Divide durations by this to get seconds.
        """
        return 1000.0 if self.unit == "ms" else 1.0


@dataclass(frozen=True, slots=True)
class Scan:
    """
    The SQL that reads one file, ready for the store to run.

    Args:
        format: The format name.
        select_sql: One pass over the file in file order, from `normalize_sql`: call-record
            columns, bad rows marked with `REJECT_STATUS`.
        fallback_sql: The same through a more forgiving reader (text columns, line by line),
            for when the fast, typed reader refuses the file; ``None`` when there is none.
        reader_rejects_sql: Rows the reader itself refused, as
            ``(record, reason, detail, raw)``; their records are missing from ``select_sql``.
        raw_lines_sql: ``(record, line)`` for every record, to show a rejected row exactly as
            it was written; ``None`` when rows are not lines.
        setup: Statements to run before ``select_sql``.
        has_call_id: Whether the source provides ``call_id``.
        notes: Phrases for the user about how columns were mapped.
        units_known: The format fixes its units (it converts them itself), so the
            "looks like milliseconds" check does not apply.
    """

    format: str
    select_sql: str
    fallback_sql: str | None = None
    reader_rejects_sql: str | None = None
    raw_lines_sql: str | None = None
    setup: tuple[str, ...] = ()
    has_call_id: bool = False
    notes: tuple[str, ...] = ()
    units_known: bool = False


class FileFormat(Protocol):
    """
    What every format adapter provides.
    """

    name: str

    def sniff_sql(self, path: str) -> str | None:
        """
        SQL whose rows describe the file's columns, or ``None`` for a fixed layout.
        """

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        The SQL that reads the file, given the sniffed rows.
        """


def _suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_options(options: ScanOptions) -> None:
    """
    Refuse ``--map`` / ``--set`` / ``--unit`` values that name no call-record column.

    Raises:
        MappingError: With the bad name and the valid ones.
    """
    for flag, names in (("--map", options.mapping), ("--set", options.sets)):
        for target in names:
            if target not in MAPPABLE:
                msg = (
                    f"{flag} {target}=…: {target!r} is not a call-record column"
                    f"{_suggest(target, MAPPABLE)}; valid: {', '.join(MAPPABLE)}"
                )
                raise MappingError(msg)
    if options.unit not in (None, "s", "ms"):
        msg = f"--unit must be s or ms, got {options.unit!r}"
        raise MappingError(msg)


def assign_columns(path: str, names: Sequence[str], options: ScanOptions) -> dict[str, str]:
    """
    Which source column fills each call-record column (``--set`` ones excluded).

    ``--map`` wins; otherwise a source column with the call-record name (any case) is used.

    Raises:
        MappingError: A mapped column does not exist, or model, provider or total_s has no
            source.
    """
    check_options(options)
    by_lower = {name.lower(): name for name in names}
    assigned: dict[str, str] = {}
    for target, source in options.mapping.items():
        if source not in names:
            msg = (
                f"{path}: --map {target}={source}: no column {source!r}"
                f"{_suggest(source, list(names))}; columns: {', '.join(names)}"
            )
            raise MappingError(msg)
        assigned[target] = source
    taken = set(assigned.values())
    for target in MAPPABLE:
        same = by_lower.get(target)
        if target not in assigned and target not in options.sets and same and same not in taken:
            assigned[target] = same
            taken.add(same)
    for required in ("model", "provider", "total_s"):
        if required not in assigned and required not in options.sets:
            also = "" if required == "total_s" else f" or give one value with --set {required}=NAME"
            msg = (
                f"{path}: no column for {required!r} (columns: {', '.join(names) or 'none'}); "
                f"map one with --map {required}=COLUMN{also}"
            )
            raise MappingError(msg)
    return assigned


def read_type(target: str | None, sniffed: str) -> str:
    """
    The type to read a source column as, given the type sniffed from a sample.

    Call-record columns are read with the narrowest type that cannot refuse a good value
    (text as VARCHAR, durations as DOUBLE); a value that still does not fit makes the fast
    reader refuse the file, and the forgiving reader takes over. Other columns stay JSON.
    """
    base = sniffed.upper().split("(")[0]
    if target is None:
        return "JSON"
    kind = _KIND[target]
    numeric = base in NUMERIC_TYPES
    if kind == "duration" and numeric:
        return "DOUBLE"
    if kind == "int" and numeric:
        return "BIGINT" if base in INTEGER_TYPES else "DOUBLE"
    if kind == "timestamp" and base.startswith("TIMESTAMP"):
        return sniffed.upper()
    if kind == "timestamp" and numeric:
        return "DOUBLE"
    if kind == "bool" and base == "BOOLEAN":
        return "BOOLEAN"
    return "VARCHAR"


def resolve_columns(
    path: str,
    columns: Sequence[tuple[str, str]],
    options: ScanOptions,
    ref: Callable[[str], str],
) -> tuple[dict[str, RawColumn], list[tuple[str, str]], list[str]]:
    """
    The source of every call-record column, the leftovers for ``attrs``, and notes.

    Args:
        path: The file, for messages.
        columns: ``(name, sql_type)`` of the source columns as they will be read, in order.
        options: ``--map`` / ``--set`` / ``--unit``.
        ref: Turns a source column name into SQL over the scan.

    Raises:
        MappingError: See `assign_columns`.
    """
    types = dict(columns)
    assigned = assign_columns(path, list(types), options)
    raw = {
        target: RawColumn(ref(source), types[source], f"column {source!r}")
        for target, source in assigned.items()
    }
    for target, value in options.sets.items():
        raw[target] = RawColumn(literal(value), "VARCHAR", f"--set {target}")
    notes = [f"{t} ← {s}" for t, s in assigned.items() if t in options.mapping]
    used = set(assigned.values())
    extras = [(name, ref(name)) for name in types if name not in used]
    return raw, extras, notes
