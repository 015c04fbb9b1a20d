"""
The executor's ledger (``tailkit.executor``): one JSON line per attempt, read back as calls.

A ledger line holds the call-record columns under their own names, so they go straight through
the JSON-lines reader of `tailkit.formats._generic` (typed fast path, a forgiving line-by-line
path whose bad lines are rejected with their line number). What the record does not have a
column for - ``idempotency_key``, ``deadline_at``, ``winner``, any key a newer ledger adds -
is kept in ``attrs``, and the line's own ``attrs`` object is flattened into it, so that
``attrs->>'winner'`` and ``attrs->>'error'`` sit side by side. Where a key is in both, the
ledger's top-level value wins. The rows' ``source`` is ``tailkit-executor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailkit.formats._generic import JsonLines
from tailkit.formats._mapping import Scan, ScanOptions
from tailkit.formats._sql import REJECT_STATUS, literal


SOURCE = "tailkit-executor"
"""``source`` of every row read from a ledger."""

DETECT_KEYS = ("idempotency_key", "winner")
"""A JSON-lines file whose first object has all of these keys is a ledger."""

# attrs holds {"idempotency_key": …, "deadline_at": …, "winner": …, "attrs": {…}} (from the
# JSON-lines reader's leftovers). Merge the inner object into the outer one: as MAPs, the later
# map wins a shared key. json_merge_patch with {"attrs": null} drops only that key (a patch's
# null deletes; the other keys keep their null values). Rejected rows keep their attrs as they
# are (reason, detail, raw).
_INNER = "json_type(attrs, '$.attrs')"
_WITHOUT_INNER = "json_merge_patch(attrs, '{\"attrs\": null}')"
_FLAT_ATTRS = (
    f"CASE WHEN status = {literal(REJECT_STATUS)} THEN attrs "
    f"WHEN {_INNER} = 'OBJECT' THEN to_json(map_concat("
    f"CAST(attrs->'attrs' AS MAP(VARCHAR, JSON)), CAST({_WITHOUT_INNER} AS MAP(VARCHAR, JSON)))) "
    f"WHEN {_INNER} = 'NULL' THEN {_WITHOUT_INNER} "
    "ELSE attrs END"
)


def _flat(sql: str) -> str:
    return f"SELECT * REPLACE ({_FLAT_ATTRS} AS attrs) FROM ({sql}) AS _tk_trace"


class Trace:
    """
    The executor's ledger (``ledger.jsonl``), written by ``tailkit.executor``'s `JsonlSink`.
    """

    name = "trace"

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the merged JSON structure of the first lines (as for any JSON lines).
        """
        return JsonLines().sniff_sql(path)

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read the ledger as JSON lines, then flatten ``attrs`` and name the source.
        """
        lines = JsonLines().scan(path, sniffed, options)
        fallback = lines.fallback_sql
        # Scan.format is what ingest stores as the rows' source (and in table ingests).
        return Scan(
            format=SOURCE,
            select_sql=_flat(lines.select_sql),
            fallback_sql=None if fallback is None else _flat(fallback),
            reader_rejects_sql=lines.reader_rejects_sql,
            raw_lines_sql=lines.raw_lines_sql,
            setup=lines.setup,
            has_call_id=lines.has_call_id,
            notes=lines.notes,
        )
