"""
``stats --engine dask`` and ``--sketch``: the tail table from mergeable summaries of files.
"""

from __future__ import annotations

import sys

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tailkit.cli._common import fail
from tailkit.cli._stats_source import reading_options
from tailkit.engines import EngineRun, Partition, Reading, peak_rss_bytes, summarize_local
from tailkit.ingest import InPlace, expand_paths
from tailkit.store import Store
from tailkit.tails import TableQuery, TailReport
from tailkit.tails.lowlevel import summary_report
from tailkit.tails.lowlevel import tail_summary as summarize


ENGINES = ("duckdb", "dask")


def check_engine(
    *,
    engine: str,
    scheduler: str | None,
    workers: int | None,
    source: list[str] | None,
    approx: bool = False,
) -> None:
    """
    Refuse an unknown engine, and the Dask options without ``--engine dask`` and ``--source``.

    ``approx``: --approx was given with summaries (--sketch or dask), which have their own.
    """
    if engine not in ENGINES:
        fail(f"--engine must be duckdb or dask, got {engine!r}")
    if approx:
        fail(
            "--approx and --approx-above take DuckDB's t-digest on the exact path; with --sketch "
            "or --engine dask the quantiles come from the summaries' sketches: drop them"
        )
    if engine == "dask" and not source:
        fail(
            "--engine dask reads files in place, one task per file: give them with --source "
            "(a store is one DuckDB file, read by one process)"
        )
    if engine != "dask":
        for flag, value in (("--scheduler", scheduler), ("--workers", workers)):
            if value is not None:
                fail(f"{flag} is for --engine dask")
    if scheduler not in (None, "local") and workers is not None:
        fail("--workers starts local workers: with a scheduler's address, its workers are used")


def summary_tables(
    *,
    engine: str,
    db: Path,
    source: list[str] | None,
    scheduler: str | None,
    workers: int | None,
    query: TableQuery,
    reading: dict[str, Any],
    memory_limit: str | None,
    min_group: int,
    progress: bool,
) -> tuple[TailReport, EngineRun]:
    """
    The tail table from summaries: of a store (one partition), or of files, one per file.

    Raises:
        TailkitError: A file or the store cannot be read, or the scheduler cannot be reached.
    """
    if not source:
        with Store.open(db, read_only=True, memory_limit=memory_limit) as store:
            summary = summarize(store, query, min_group=min_group)
        run = EngineRun(Partition(summary, InPlace([])), "duckdb", 1, [peak_rss_bytes()])
        return summary_report(summary, query, min_group=min_group), run
    files, missing = expand_paths(source)
    if missing:
        fail("; ".join(str(e) for e in missing))
    how = Reading(
        format=reading["format"],
        options=reading_options(reading),
        memory_limit=memory_limit,
    )
    with _bar(2 * len(files), enabled=progress) as on_file:
        if engine == "dask":
            from tailkit.engines._dask import summarize_dask

            run = summarize_dask(
                files, query, how, scheduler=scheduler or "local", workers=workers or 2,
                min_group=min_group, on_file=on_file,
            )  # fmt: skip
        else:
            run = summarize_local(files, query, how, min_group=min_group, on_file=on_file)
    return summary_report(run.partition.summary, query, min_group=min_group), run


@contextmanager
def _bar(total: int, *, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """
    A bar over both passes' file tasks on stderr, when it is a terminal.
    """
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    columns = (
        TextColumn("summarizing files (2 passes)"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(),
    )  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("files", total=total)
        yield lambda done: bar.update(task, completed=done)
