"""
A seeded, fixed-size sample of every group's calls, drawn inside DuckDB.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

from tailkit.record import CALL_COLUMNS


# The fields that say what a call was. Where it came from (file, row, ingest) is left out of the
# hash, so the same calls ingested in another order, or read in place, give the same sample.
_PROVENANCE = frozenset({"source", "source_file", "source_row", "ingest_id"})
IDENTITY_COLUMNS = tuple(c.name for c in CALL_COLUMNS if c.name not in _PROVENANCE)

_HASH = "_tk_sample_h"
_RANK = "_tk_sample_rank"
_COUNT = "_tk_sample_n"
_TWO_64 = 18446744073709551616.0


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _margin(size: int) -> int:
    # Bernoulli pre-filter: keep each row with probability (size + margin) / n. The kept count
    # is Binomial with mean size + margin and sd below sqrt(size + margin); 6 sd of slack puts
    # the chance of keeping fewer than ``size`` rows of a larger group below 1e-9.
    return 6 * math.isqrt(size) + 20


def group_sample_sql(
    source_sql: str,
    keys: Sequence[str],
    *,
    size: int,
    seed: int,
    where: str = "TRUE",
) -> str:
    """
    SQL for a seeded sample of at most ``size`` calls of each group of ``keys``.

    Every row of ``source_sql`` that passes ``where`` gets a pseudo-random number, a hash of the
    seed and of the call's fields (not of where it was read from: ``source``, ``source_file``,
    ``source_row``, ``ingest_id``); a group keeps its ``size`` rows with the smallest numbers,
    every row when it has no more. Same seed and same calls give the same sample, whatever
    order the calls were ingested or read in; calls identical in every field are
    interchangeable. The sample is a uniform draw without replacement (the hash stands in for
    a random permutation).

    The query streams: one counting pass per group, then a pass that keeps each row with
    probability ``(size + 6 sqrt(size) + 20) / n`` (all of a small group), so that only about
    ``size`` rows per group reach the final ranking. DuckDB spills every step to disk under its
    ``memory_limit``; memory grows with groups x ``size``, not with calls.

    Args:
        source_sql: A relation usable after ``FROM`` (a table name, or ``(SELECT ...) AS c``),
            with the call-record columns and the ``keys`` columns.
        keys: Columns that define a group; NULL is a group of its own.
        size: Largest number of rows per group (at least 1).
        seed: Seed of the draw (any integer that fits 64 bits).
        where: SQL filter applied before sampling.

    Returns:
        A ``SELECT`` with every column of ``source_sql``, at most ``size`` rows per group, in no
        particular order.

    Raises:
        ValueError: ``size`` below 1 or no ``keys``.
    """
    if size < 1:
        msg = f"size must be at least 1 row per group, got {size!r}"
        raise ValueError(msg)
    if not keys:
        msg = "keys must name at least one column to group by"
        raise ValueError(msg)
    quoted = [_quote(k) for k in keys]
    key_list = ", ".join(quoted)
    fields = ", ".join(_quote(c) for c in IDENTITY_COLUMNS)
    rows = f"FROM {source_sql} WHERE ({where})"
    hashed = f"SELECT *, hash({int(seed)}::BIGINT, {fields}) AS {_HASH} {rows}"
    counts = f"SELECT {key_list}, count(*) AS {_COUNT} {rows} GROUP BY ALL"
    on = " AND ".join(f"s.{k} IS NOT DISTINCT FROM g.{k}" for k in quoted)
    keep = size + _margin(size)
    kept = (
        f"SELECT s.* FROM ({hashed}) AS s JOIN ({counts}) AS g ON {on} "
        f"WHERE g.{_COUNT} <= {size} "
        f"OR s.{_HASH}::DOUBLE < {keep}.0 / g.{_COUNT} * {_TWO_64}"
    )
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {key_list} ORDER BY {_HASH}) AS {_RANK} "
        f"FROM ({kept})"
    )
    return f"SELECT * EXCLUDE ({_HASH}, {_RANK}) FROM ({ranked}) WHERE {_RANK} <= {size}"
