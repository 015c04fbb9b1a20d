"""
The call record: one row per attempt, the contract between every part of tailkit.

This module is a leaf (standard library only) so that formats, the store and the executor can
share one definition of the columns, their types and the token buckets.
"""

from __future__ import annotations

import bisect
import itertools
import math

from dataclasses import dataclass, field
from typing import Literal


__all__ = [
    "CALL_COLUMNS",
    "DEFAULT_INPUT_EDGES",
    "DEFAULT_OUTPUT_EDGES",
    "DURATION_COLUMNS",
    "ROLES",
    "SOURCE_COLUMNS",
    "STATUSES",
    "Buckets",
    "Column",
    "bucket_label",
]

Kind = Literal["text", "int", "duration", "timestamp", "bool", "json"]


@dataclass(frozen=True, slots=True)
class Column:
    """
    One column of the call record.

    Args:
        name: Column name, units in the name (``total_s``, ``input_tokens``).
        sql_type: DuckDB type of the stored column.
        kind: How an adapter parses a source value into it.
        mappable: Whether `ScanOptions` (``mapping`` / ``sets``) may fill it from a source file.
    """

    name: str
    sql_type: str
    kind: Kind
    mappable: bool = True


CALL_COLUMNS: tuple[Column, ...] = (
    Column("call_id", "VARCHAR", "text"),
    Column("run_id", "VARCHAR", "text"),
    Column("step", "VARCHAR", "text"),
    Column("attempt", "INTEGER", "int"),
    Column("role", "VARCHAR", "text"),
    Column("provider", "VARCHAR", "text"),
    Column("model", "VARCHAR", "text"),
    Column("started_at", "TIMESTAMPTZ", "timestamp"),
    Column("ttft_s", "DOUBLE", "duration"),
    Column("total_s", "DOUBLE", "duration"),
    Column("input_tokens", "BIGINT", "int"),
    Column("output_tokens", "BIGINT", "int"),
    Column("status", "VARCHAR", "text"),
    Column("error_type", "VARCHAR", "text"),
    Column("http_status", "INTEGER", "int"),
    Column("censored_at_s", "DOUBLE", "duration"),
    Column("abandoned", "BOOLEAN", "bool"),
    Column("source", "VARCHAR", "text", mappable=False),
    Column("source_file", "VARCHAR", "text", mappable=False),
    Column("source_row", "BIGINT", "int", mappable=False),
    Column("ingest_id", "BIGINT", "int", mappable=False),
    Column("attrs", "JSON", "json", mappable=False),
    # Last, as a migration adds it: the store's column order is this order.
    Column("job_key", "VARCHAR", "text"),
)
"""The stored columns of table ``calls``, in order (docs/call-record.md)."""

SOURCE_COLUMNS: tuple[Column, ...] = tuple(c for c in CALL_COLUMNS if c.mappable)
"""The columns a source file can provide (everything but provenance and attrs)."""

DURATION_COLUMNS: tuple[str, ...] = tuple(c.name for c in CALL_COLUMNS if c.kind == "duration")

STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "cancelled", "invalid", "rate_limited")
ROLES: tuple[str, ...] = ("primary", "hedge", "retry", "downgrade", "upgrade")

DEFAULT_INPUT_EDGES: tuple[int, ...] = (0, 1_000, 4_000, 16_000, 64_000)
DEFAULT_OUTPUT_EDGES: tuple[int, ...] = (0, 64, 256, 600, 1_200, 2_400)


def _short(tokens: int) -> str:
    if tokens >= 1_000 and tokens % 1_000 == 0:
        return f"{tokens // 1_000}k"
    return str(tokens)


def bucket_label(edges: tuple[int, ...], tokens: int | None) -> str:
    """
    Name the bucket that a token count falls in.

    Buckets are half-open, ``[edge_i, edge_i+1)``; the last one is open-ended. A count below the
    first edge or missing (``None``) falls in the ``"?"`` bucket, so every call has exactly one.

    Args:
        edges: Strictly increasing, non-negative bucket edges.
        tokens: The token count, or ``None`` when the source did not report it.

    Returns:
        A label such as ``"4k-16k"``, ``"64k+"`` or ``"?"``.
    """
    if tokens is None or tokens < edges[0]:
        return "?"
    i = bisect.bisect_right(edges, tokens) - 1
    if i == len(edges) - 1:
        return f"{_short(edges[i])}+"
    return f"{_short(edges[i])}-{_short(edges[i + 1])}"


def _check_edges(name: str, edges: tuple[int, ...]) -> None:
    if not edges:
        msg = f"{name} must list at least one edge, got none"
        raise ValueError(msg)
    for value in edges:
        if not isinstance(value, int) or value < 0 or not math.isfinite(value):
            msg = f"{name} must be non-negative integers, got {value!r}"
            raise ValueError(msg)
    if any(b <= a for a, b in itertools.pairwise(edges)):
        msg = f"{name} must be strictly increasing, got {', '.join(map(str, edges))}"
        raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Buckets:
    """
    Input and output token bucket edges (docs/call-record.md); an option, not a constant.

    Args:
        input_edges: Edges for ``input_tokens``.
        output_edges: Edges for ``output_tokens``; 600 is where "long" calls begin.

    Raises:
        ValueError: If edges are empty, negative or not strictly increasing.
    """

    input_edges: tuple[int, ...] = field(default=DEFAULT_INPUT_EDGES)
    output_edges: tuple[int, ...] = field(default=DEFAULT_OUTPUT_EDGES)

    def __post_init__(self) -> None:
        _check_edges("input edges", self.input_edges)
        _check_edges("output edges", self.output_edges)

    def input_label(self, tokens: int | None) -> str:
        """
        Return the input bucket label of a token count (``None``: unknown).
        """
        return bucket_label(self.input_edges, tokens)

    def output_label(self, tokens: int | None) -> str:
        """
        Return the output bucket label of a token count (``None``: unknown).
        """
        return bucket_label(self.output_edges, tokens)

    def label(self, input_tokens: int | None, output_tokens: int | None) -> str:
        """
        Return the combined label, e.g. ``"in 4k-16k / out 600-1200"``.
        """
        return f"in {self.input_label(input_tokens)} / out {self.output_label(output_tokens)}"

    @classmethod
    def parse_edges(cls, text: str) -> tuple[int, ...]:
        """
        Parse ``"0,1k,4k,16k"`` into integers (``k`` = 1,000, ``m`` = 1,000,000).

        Raises:
            ValueError: If an edge is not a whole number.
        """
        out: list[int] = []
        for raw in text.split(","):
            item = raw.strip().lower()
            scale = 1
            if item.endswith("k"):
                scale, item = 1_000, item[:-1]
            elif item.endswith("m"):
                scale, item = 1_000_000, item[:-1]
            try:
                value = float(item) * scale
            except ValueError:
                msg = f"bucket edge {raw.strip()!r} is not a number; write e.g. 0,1k,4k,16k"
                raise ValueError(msg) from None
            if value != int(value):
                msg = f"bucket edge {raw.strip()!r} is not a whole number of tokens"
                raise ValueError(msg)
            out.append(int(value))
        return tuple(out)
