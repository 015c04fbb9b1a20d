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
from tailkit.record import SOURCE_COLUMNS, STATUSES


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
        status_map: Source status value → call-record status (``--status-map 429=rate_limited``),
            matched ignoring case and surrounding spaces, before the built-in synonyms.
        overrides: Columns of ``sets`` that may replace a column the file has
            (``--set-over provider=azure``); without it, such a ``--set`` is refused.
    """

    mapping: Mapping[str, str] = field(default_factory=dict)
    sets: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None
    status_map: Mapping[str, str] = field(default_factory=dict)
    overrides: frozenset[str] = frozenset()

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
    Refuse ``--map`` / ``--set`` / ``--unit`` / ``--status-map`` values tailkit cannot use.

    Raises:
        MappingError: A name that is no call-record column, a status that is none of
            `STATUSES`, or an override without its ``--set``; with the valid values.
    """
    for option, names in (("mapping", options.mapping), ("sets", options.sets)):
        for target in names:
            if target not in MAPPABLE:
                msg = (
                    f"{{field}} {target}=…: {target!r} is not a call-record column"
                    f"{_suggest(target, MAPPABLE)}; valid: {', '.join(MAPPABLE)}"
                )
                raise MappingError(msg, field=option, value=target)
    if options.unit not in (None, "s", "ms"):
        msg = f"{{field}} must be s or ms, got {options.unit!r}"
        raise MappingError(msg, field="unit", value=options.unit)
    for target in sorted(options.overrides):
        if target not in options.sets:
            msg = f"{{field}} {target}: give its value, e.g. {{field}} {target}=VALUE"
            raise MappingError(msg, field="overrides", value=target)
    folded: dict[str, str] = {}
    for value, status in options.status_map.items():
        key = value.strip().lower()
        if status not in STATUSES:
            msg = (
                f"{{field}} {value}={status}: {status!r} is not a status"
                f"{_suggest(status, STATUSES)}; valid: {', '.join(STATUSES)}"
            )
            raise MappingError(msg, field="status_map", value=status)
        if not key:
            msg = f"{{field}} ={status}: give the source value to map, e.g. success={status}"
            raise MappingError(msg, field="status_map", value=value)
        if folded.setdefault(key, status) != status:
            msg = (
                f"{{field}} maps {value!r} to both {folded[key]} and {status} "
                "(values match ignoring case and spaces)"
            )
            raise MappingError(msg, field="status_map", value=value)


SET_MODEL = "--set model=VALUE"
"""How a fixed-layout format's user fills a missing model (its ``missing_model`` hint)."""


def refuse_fixed(
    path: str, fmt: str, options: ScanOptions, *, unit: str | None, status: str | None
) -> None:
    """
    Refuse the options a fixed-layout format cannot honour, naming the format and the fix.

    A fixed layout reads its own field names, so ``mapping`` never applies; ``sets`` (with
    ``overrides`` or not, the same there) replaces the format's value of a column. ``unit``
    only confirms the format's own unit; ``status_map`` applies only where the format passes
    a source status vocabulary through.

    Args:
        path: The file, named in the message.
        fmt: The format name, as ``format`` takes it.
        options: The options given.
        unit: The unit of the format's durations (``"s"``, ``"ms"``), or ``None`` when the
            format converts every value by its own unit (no ``options.unit`` applies).
        status: Where the format's status comes from, when ``status_map`` does not apply
            (the status is always one of the call-record statuses); ``None`` when it does.

    Raises:
        MappingError: ``mapping``, a ``unit`` other than the format's, or ``status_map``
            where it does not apply; or an option `check_options` refuses (``field`` names
            the option).
    """
    check_options(options)
    if options.mapping:
        first = next(iter(options.mapping.items()))
        msg = (
            f"{path}: {{field}} does not apply to {{format}} {fmt} (it reads fixed field names, "
            f"there are no columns to map): drop {{field}} {first[0]}={first[1]}; set "
            "COLUMN=VALUE instead to give every row one value"
        )
        raise MappingError(msg, field="mapping", value=dict(options.mapping))
    if options.unit is not None and options.unit != unit:
        read = f"reads its durations in {unit}" if unit else "converts every value by its own unit"
        msg = (
            f"{path}: {{field}} {options.unit} does not apply to {{format}} {fmt} (it {read}): "
            "drop it"
        )
        raise MappingError(msg, field="unit", value=options.unit)
    if options.status_map and status is not None:
        values = " ".join(f"{{field}} {k}={v}" for k, v in options.status_map.items())
        msg = (
            f"{path}: {{field}} does not apply to {{format}} {fmt} (its status comes from "
            f"{status} and is always one of {', '.join(STATUSES)}): drop {values}"
        )
        raise MappingError(msg, field="status_map", value=dict(options.status_map))


def assign_columns(path: str, names: Sequence[str], options: ScanOptions) -> dict[str, str]:
    """
    Which source column fills each call-record column (``--set`` ones excluded).

    ``--map`` wins; otherwise a source column with the call-record name (any case) is used.

    Raises:
        MappingError: A mapped column does not exist, model or total_s has no source, or a
            ``--set`` would replace a column the file has (without ``--set-over``).
    """
    check_options(options)
    by_lower = {name.lower(): name for name in names}
    assigned: dict[str, str] = {}
    for target, source in options.mapping.items():
        if source not in names:
            msg = (
                f"{path}: {{field}} {target}={source}: no column {source!r}"
                f"{_suggest(source, list(names))}; columns: {', '.join(names)}"
            )
            raise MappingError(msg, field="mapping", value=f"{target}={source}")
        assigned[target] = source
    taken = set(assigned.values())
    for target in MAPPABLE:
        same = by_lower.get(target)
        if target not in assigned and target not in options.sets and same and same not in taken:
            assigned[target] = same
            taken.add(same)
    _check_sets(path, by_lower, assigned, options)
    # No provider is fine: normalize_sql infers it from the model name.
    for required in ("model", "total_s"):
        if required not in assigned and required not in options.sets:
            columns = ", ".join(names) or "none"
            if required == "model":  # one model for the whole file is the usual case
                msg = (
                    f"{path}: no column for 'model' (columns: {columns}); map a column to it, "
                    "or give every row one value with {field} model=NAME"
                )
                raise MappingError(msg, field="sets", value=None)
            msg = (
                f"{path}: no column for {required!r} (columns: {columns}); "
                f"map one with {{field}} {required}=COLUMN"
            )
            raise MappingError(msg, field="mapping", value=None)
    return assigned


def _check_sets(
    path: str, by_lower: Mapping[str, str], assigned: Mapping[str, str], options: ScanOptions
) -> None:
    """
    Refuse a ``--set`` that would silently replace the file's own values of a column.
    """
    taken = set(assigned.values())
    for target, value in options.sets.items():
        if target in options.mapping:
            msg = (
                f"{{field}} {target}={value} and a mapping {target}={options.mapping[target]} "
                f"both fill {target!r}; keep one"
            )
            raise MappingError(msg, field="sets", value=f"{target}={value}")
        same = by_lower.get(target)
        if same is not None and same not in taken and target not in options.overrides:
            msg = (
                f"{path}: setting {target}={value} would replace the file's own column {same!r} "
                f"in every row; use {{field}} {target}={value} to replace it, or drop the "
                "setting to keep the file's values"
            )
            raise MappingError(msg, field="overrides", value=f"{target}={value}")


def with_status_map(raw: Mapping[str, RawColumn], options: ScanOptions) -> dict[str, RawColumn]:
    """
    ``raw`` with ``--status-map`` applied to the status source (unchanged without one).

    A mapped value becomes its status; any other value goes through unchanged, to the
    built-in synonyms and, failing them, a ``bad_status`` reject that shows it.
    """
    out = dict(raw)
    source = out.get("status")
    mapped = None if source is None else mapped_status(source.expr, options)
    if source is None or mapped is None:
        return out
    out["status"] = RawColumn(
        f"coalesce({mapped}, CAST({source.expr} AS VARCHAR))", "VARCHAR", source.label
    )
    return out


def mapped_status(text: str, options: ScanOptions) -> str | None:
    """
    SQL for the status ``--status-map`` gives the source value ``text``; NULL when unmapped.

    Values match ignoring case and surrounding spaces. ``None`` without ``--status-map``.
    """
    if not options.status_map:
        return None
    whens = " ".join(
        f"WHEN {literal(value.strip().lower())} THEN {literal(status)}"
        for value, status in options.status_map.items()
    )
    return f"CASE lower(trim(CAST({text} AS VARCHAR))) {whens} END"


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
        raw[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
    raw = with_status_map(raw, options)
    notes = [f"{t} ← {s}" for t, s in assigned.items() if t in options.mapping]
    used = set(assigned.values())
    extras = [(name, ref(name)) for name in types if name not in used]
    return raw, extras, notes
