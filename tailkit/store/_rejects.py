"""
The rows ingest rejected, read back: what ``tailkit rejects`` lists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from tailkit.store._store import Store


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """
    One rejected input row: where it came from, why it was refused, and its raw text.

    Args:
        source_file: The file it was read from.
        source_row: Its row (line) number in that file (``None``: the format has no rows).
        reason: The short reason, e.g. ``total_s_negative``.
        detail: The reason in a sentence, with the value and the fix.
        raw: The row as read (``None``: not kept).
    """

    source_file: str
    source_row: int | None
    reason: str
    detail: str
    raw: str | None

    def as_dict(self) -> dict[str, Any]:
        """
        The row as plain data (``tailkit rejects --json``).
        """
        return asdict(self)


def rejected_rows(
    store: Store, *, reason: str | None = None, file: str | None = None, limit: int = 20
) -> list[RejectedRow]:
    """
    Rejected rows in the order they were ingested, file by file and row by row.

    Args:
        store: An open store.
        reason: Only rows rejected for this reason (``None``: any).
        file: Only rows from this source file, as ingest recorded its path (``None``: any).
        limit: At most this many rows.

    Raises:
        QueryError: DuckDB refused the query.
    """
    where, params = [], []
    if reason:
        where.append("reason = ?")
        params.append(reason)
    if file:
        where.append("source_file = ?")
        params.append(file)
    condition = f"WHERE {' AND '.join(where)}" if where else ""
    rows = store.fetchall(
        "SELECT source_file, source_row, reason, detail, raw FROM rejects "
        f"{condition} ORDER BY ingest_id, source_row LIMIT ?",
        [*params, limit],
    )
    return [RejectedRow(*row) for row in rows]
