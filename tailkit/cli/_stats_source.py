"""
Where ``tailkit stats`` reads calls from: the store, or files read in place (``--source``).
"""

from __future__ import annotations

import contextlib
import tempfile

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tailkit.cli._common import fail, scan_options
from tailkit.cli._progress import IngestProgress
from tailkit.ingest import InPlace, ScanOptions, expand_paths, read_in_place
from tailkit.store import Store


_SCAN_FLAGS = {
    "format": "--format",
    "map_": "--map",
    "set_": "--set",
    "set_over": "--set-over",
    "status_map": "--status-map",
    "unit": "--unit",
}
"""Options that say how to read files: they mean something with --source only."""


def check_source_options(ctx: typer.Context, source: list[str] | None) -> None:
    """
    Refuse ``--source`` with ``--db``, and the reading options without ``--source``.
    """
    given = {name for name in ("db", *_SCAN_FLAGS) if _on_command_line(ctx, name)}
    if source and "db" in given:
        fail(
            "--source and --db are exclusive: --source reads the files in place, --db a store; "
            "give one"
        )
    if not source:
        for name, flag in _SCAN_FLAGS.items():
            if name in given:
                fail(
                    f"{flag} says how to read files: use it with --source "
                    "(a store's calls are already read)"
                )


def _on_command_line(ctx: typer.Context, name: str) -> bool:
    # By name: typer may carry its own copy of click's ParameterSource enum.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


@contextlib.contextmanager
def stats_store(
    *,
    db: Path,
    source: list[str] | None,
    memory_limit: str | None,
    reading: dict[str, Any],
    progress: bool,
) -> Iterator[tuple[Store, InPlace | None]]:
    """
    The store ``stats`` reads: ``db`` read-only, or an in-memory view over ``source``.

    Args:
        db: The store file (when there is no ``source``).
        source: Files, folders or globs to read in place.
        memory_limit: DuckDB's memory limit.
        reading: ``format`` and the scan options' values (``map_``, ``set_``, …).
        progress: Draw a bar on a terminal (stderr) while long files are first read.

    Raises:
        TailkitError: The store or a file cannot be read.
    """
    if not source:
        with Store.open(db, read_only=True, memory_limit=memory_limit) as store:
            yield store, None
        return
    options = reading_options(reading)
    files, _ = expand_paths(source)
    total = sum(f.stat().st_size for f in files)
    with (
        tempfile.TemporaryDirectory(prefix="tailkit-spill-") as spill,
        Store.open(":memory:", memory_limit=memory_limit) as store,
    ):
        # beyond the memory limit DuckDB spills here, not into a `.tmp` of the working folder
        store.execute(f"SET temp_directory = '{spill}'")
        with IngestProgress(store, total, enabled=progress, verb="read") as bar:
            read = read_in_place(
                store, source, format=reading["format"], options=options, progress=bar
            )
        yield store, read


def reading_options(reading: dict[str, Any]) -> ScanOptions:
    """
    The scan options of ``reading`` (every value but ``format``), checked.
    """
    return scan_options(**{k: v for k, v in reading.items() if k != "format"})


def rejects_line(files: InPlace) -> str | None:
    """
    ``N rows rejected, most often REASON; tailkit ingest shows them`` (``None``: none).
    """
    if not files.rejected:
        return None
    reason, n = next(iter(files.reasons().items()))
    return (
        f"{files.rejected:,} of {files.rows_in:,} rows rejected, most often {reason} ({n:,}), "
        "and left out of the table; tailkit ingest shows them"
    )


def selected_calls(store: Store, where: str | None, read: InPlace | None) -> int:
    """
    How many calls ``stats`` reads (for ``--approx-above``); known without a pass for files.

    Raises:
        QueryError: ``where`` is not a valid filter.
    """
    if read is not None and not where:
        return read.rows_in - read.rejected
    row = store.fetchone(f"SELECT count(*) FROM calls WHERE {where or 'TRUE'}")
    return int(row[0]) if row else 0
