"""
A seeded, fixed-size sample of every group's calls, drawn inside DuckDB.
"""

from __future__ import annotations

import math

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import duckdb


if TYPE_CHECKING:
    import pyarrow as pa

    from tailkit.store._store import Store


# The fields that tell one call from another, hashed for the draw: not where it was read from
# (file, row, ingest), so the same calls ingested in another order, or read in place, give the
# same sample; and not the long text columns (``attrs``, ``error_type``, ...), slow to hash.
IDENTITY_COLUMNS = (
    "call_id", "run_id", "attempt", "started_at", "ttft_s", "total_s",
    "input_tokens", "output_tokens", "censored_at_s",
)  # fmt: skip
_TWO_64 = 18446744073709551616.0
ALL_ROWS = 1e20  # a threshold above every hash: the whole group


def sample_hash_sql(seed: int) -> str:
    """
    SQL for a call's pseudo-random draw, an unsigned 64-bit hash of ``seed`` and its fields.
    """
    fields = ", ".join(_quote(c) for c in IDENTITY_COLUMNS)
    return f"hash({int(seed)}::BIGINT, {fields})"


def keep_threshold(n: int, size: int) -> float:
    """
    The draw below which a row of an ``n``-row group passes the pre-filter for ``size`` rows.

    `ALL_ROWS` when ``n <= size``. Compare as ``draw::DOUBLE < threshold``.
    """
    if n <= size:
        return ALL_ROWS
    return (size + _margin(size)) / n * _TWO_64


_HASH = "_tk_sample_h"
_RANK = "_tk_sample_rank"
_COUNT = "_tk_sample_n"
_GROUP = "_tk_sample_g"


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
    columns: Sequence[str] | None = None,
) -> str:
    """
    SQL for a seeded sample of at most ``size`` calls of each group of ``keys``.

    Every row of ``source_sql`` that passes ``where`` gets a pseudo-random number, a hash of the
    seed and of the call's fields (`IDENTITY_COLUMNS`: not where it was read from, nor long
    text); a group keeps its ``size`` rows with the smallest numbers, every row when it has no
    more. Same seed and same calls give the same
    sample, whatever order the calls were ingested or read in; calls identical in every hashed
    field are interchangeable. The sample is a uniform draw without replacement (the hash
    stands in for a random permutation).

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
        columns: Columns to return besides ``keys`` (every column of ``source_sql`` when
            ``None``); fewer columns make the ranking step lighter.

    Returns:
        A ``SELECT`` with the ``keys`` and ``columns`` (or every column) of ``source_sql``, at
        most ``size`` rows per group, in no particular order.

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
    picked = "*" if columns is None else ", ".join(dict.fromkeys([*quoted, *map(_quote, columns)]))
    rows = f"FROM {source_sql} WHERE ({where})"
    # Rows meet their group's count by a hash of the key (one 64-bit column, NULL-safe); the
    # ranking then partitions by the key itself, so even a collision keeps each group apart.
    group = f"hash({key_list})"
    hashed = f"SELECT {picked}, {group} AS {_GROUP}, {sample_hash_sql(seed)} AS {_HASH} {rows}"
    counts = f"SELECT {group} AS {_GROUP}, count(*) AS {_COUNT} {rows} GROUP BY ALL"
    keep = size + _margin(size)
    kept = (
        f"SELECT s.* FROM ({hashed}) AS s JOIN ({counts}) AS g ON s.{_GROUP} = g.{_GROUP} "
        f"WHERE g.{_COUNT} <= {size} "
        f"OR s.{_HASH}::DOUBLE < {keep}.0 / g.{_COUNT} * {_TWO_64}"
    )
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {key_list} ORDER BY {_HASH}) AS {_RANK} "
        f"FROM ({kept})"
    )
    return f"SELECT * EXCLUDE ({_HASH}, {_RANK}, {_GROUP}) FROM ({ranked}) WHERE {_RANK} <= {size}"


def record_batches(store: Store, sql: str, *, rows: int) -> Iterator[pa.RecordBatch]:
    """
    The result of ``sql`` as Arrow record batches of at most ``rows`` rows, read as they come.

    Raises:
        QueryError: DuckDB refused the query; the message is DuckDB's first line.
    """
    try:
        yield from store.relation(sql).to_arrow_reader(rows)
    except duckdb.Error as exc:
        raise store.error(exc) from exc
