"""
`stats_from`: the tail table of a store or of files read in place, by the engine asked for.

``tailkit stats`` is this one call. It reads calls from a store or from files where they are
(``source``), and computes the table exactly (DuckDB over every call) or from mergeable
summaries (``sketch``: here, file after file; ``engine="dask"``: on a Dask cluster). Files read
exactly are all viewed by one in-memory DuckDB, which spills beyond its memory limit into a
temporary folder of its own rather than into a ``.tmp`` of the working folder.
"""

from __future__ import annotations

import contextlib
import tempfile

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailkit.engines._files import EngineRun, Partition, Reading, peak_rss_bytes, summarize_local
from tailkit.errors import ConfigError, IngestError, OutOfMemoryError, QueryError
from tailkit.ingest import InPlace, Progress, ScanOptions
from tailkit.ingest.lowlevel import expand_paths, read_in_place
from tailkit.store import DEFAULT_DB, Store
from tailkit.tails import TableQuery, TailReport, tail_report
from tailkit.tails.lowlevel import summary_report
from tailkit.tails.lowlevel import tail_summary as summarize


ENGINES = ("duckdb", "dask")
"""Where the table is computed: this process (``duckdb``), or a Dask cluster (``dask``)."""


@dataclass(frozen=True, slots=True)
class SourceStats:
    """
    The tail table of `stats_from`, and what read and computed it.

    Args:
        report: The tail table and the per-route verdicts (``report.table`` is what
            `tailkit.stats` returns).
        read: Per file read in place, the rows left out and why (``None``: a store was read).
        run: The engine's run, when the table came from summaries (``None``: exact).
    """

    report: TailReport
    read: InPlace | None = None
    run: EngineRun | None = None

    def engine(self) -> dict[str, object]:
        """
        What computed the table: name, workers, and for summaries their sizes and peak memory.
        """
        if self.run is None:
            return {"name": "duckdb", "workers": 1, "exact": True}
        return self.run.describe()


def stats_from(
    *,
    db: str | Path = DEFAULT_DB,
    source: Sequence[str | Path] | None = None,
    query: TableQuery | None = None,
    min_group: int = 1,
    fits: bool = True,
    approx: bool = False,
    approx_above: int | None = None,
    sketch: bool = False,
    engine: str = "duckdb",
    scheduler: str | None = None,
    workers: int | None = None,
    format: str = "auto",
    options: ScanOptions | None = None,
    memory_limit: str | None = None,
    progress: Progress | None = None,
    on_file: Callable[[int, int], None] | None = None,
) -> SourceStats:
    """
    The tail table of a store, or of files read in place, exactly or from summaries.

    Args:
        db: The store to read (opened read-only) when there is no ``source``.
        source: Files, folders or glob patterns to read in place instead of a store, with
            ``format`` and ``options`` as ingest reads them; rows ingest would reject are left
            out and counted in the result's ``read``.
        query: Grouping, buckets and filter (`TableQuery`'s defaults when ``None``).
        min_group: Leave out groups with fewer calls.
        fits: The family ranking and the transient-tail mixture of every row (`FIT_COLUMNS`:
            null without).
        approx: Approximate quantiles (DuckDB's t-digest) on the exact path.
        approx_above: Approximate quantiles when more than this many calls are selected
            (``None``: as ``approx`` says).
        sketch: Quantiles from mergeable summaries computed here, file after file.
        engine: ``duckdb`` (this process) or ``dask`` (summaries on a Dask cluster, one task
            per ``source`` file).
        scheduler: With ``engine="dask"``: ``local`` (start workers here, the default) or the
            address of a running scheduler.
        workers: With a local Dask scheduler: worker processes (``None``: 2).
        format: ``auto`` (detect per file) or a format name, for ``source``.
        options: How to map, set and convert the ``source`` files' columns.
        memory_limit: DuckDB's memory limit (``None``: DuckDB's default).
        progress: Receives the bytes read in place and each file's start and finish.
        on_file: Called with (file tasks done, file tasks) as summaries are computed.

    Raises:
        ConfigError: The engine options do not go together (the message names the parameter).
        IngestError: A file cannot be read.
        QueryError: ``query.where`` is not a valid filter, or DuckDB ran out of memory.
        StoreError: The store cannot be opened.
    """
    query = query or TableQuery()
    summaries = engine == "dask" or sketch
    _check_engine(
        engine=engine, scheduler=scheduler, workers=workers, source=source,
        approx=approx if summaries else False,
        approx_above=approx_above if summaries else None,
    )  # fmt: skip
    reading = Reading(format=format, options=options, memory_limit=memory_limit)
    try:
        if summaries:
            return _from_summaries(
                engine=engine, db=db, source=source, scheduler=scheduler, workers=workers,
                query=query, reading=reading, min_group=min_group, fits=fits, on_file=on_file,
            )  # fmt: skip
        with _exact_store(db, source, reading, progress) as (store, read):
            if approx_above is not None and not approx:
                approx = _selected_calls(store, query.where, read) > approx_above
            report = tail_report(store, query, min_group=min_group, approx=approx, fits=fits)
        return SourceStats(report, read)
    except OutOfMemoryError as exc:
        if source and not summaries:
            # the exact table of files read in place holds all of them in one DuckDB; the
            # summaries read one file at a time (at 100 M rows in 50 files: 1 GB and 4 GB caps
            # were not enough for the first, the 1 GB default was for the second)
            memory = exc.render(lambda _: "the memory limit")
            msg = f"{memory}; or read the files one at a time with {{field}}"
            raise OutOfMemoryError(msg, field="sketch", value=False) from None
        raise
    except QueryError as exc:
        if query.where:
            msg = f"{{field}} {query.where!r} is not a valid filter: {exc}"
            raise QueryError(msg, field="where", value=query.where) from None
        raise


def _check_engine(
    *,
    engine: str,
    scheduler: str | None,
    workers: int | None,
    source: Sequence[str | Path] | None,
    approx: bool,
    approx_above: int | None,
) -> None:
    """
    Refuse an unknown engine, and the Dask options without the dask engine and files.
    """
    if engine not in ENGINES:
        msg = "{field} must be duckdb or dask, got " + repr(engine)
        raise ConfigError(msg, field="engine", value=engine)
    if approx or approx_above is not None:
        field = "approx" if approx else "approx_above"
        msg = (
            "{field} takes DuckDB's t-digest on the exact path; from summaries ({sketch}, "
            "{engine} dask) the quantiles come from their sketches: drop it"
        )
        raise ConfigError(msg, field=field, value=approx if approx else approx_above)
    if engine == "dask" and not source:
        msg = (
            "{field} dask reads files in place, one task per file: give the files as source "
            "(a store is one DuckDB file, read by one process)"
        )
        raise ConfigError(msg, field="engine", value=engine)
    if engine != "dask":
        for field, value in (("scheduler", scheduler), ("workers", workers)):
            if value is not None:
                msg = "{field} is for {engine} dask"
                raise ConfigError(msg, field=field, value=value)
    if scheduler not in (None, "local") and workers is not None:
        msg = "{field} starts local workers: with a scheduler's address, its workers are used"
        raise ConfigError(msg, field="workers", value=workers)


@contextlib.contextmanager
def _exact_store(
    db: str | Path,
    source: Sequence[str | Path] | None,
    reading: Reading,
    progress: Progress | None,
) -> Iterator[tuple[Store, InPlace | None]]:
    """
    The store the exact table reads: ``db`` read-only, or an in-memory view over ``source``.
    """
    if not source:
        with Store.open(db, read_only=True, memory_limit=reading.memory_limit) as store:
            yield store, None
        return
    with (
        tempfile.TemporaryDirectory(prefix="tailkit-spill-") as spill,
        Store.open(":memory:", memory_limit=reading.memory_limit) as store,
    ):
        # beyond the memory limit DuckDB spills here, not into a `.tmp` of the working folder
        store.execute(f"SET temp_directory = '{spill}'")
        read = read_in_place(
            store, source, format=reading.format, options=reading.options, progress=progress
        )
        yield store, read


def _selected_calls(store: Store, where: str | None, read: InPlace | None) -> int:
    """
    How many calls the table reads (for ``approx_above``); known without a pass for files.
    """
    if read is not None and not where:
        return read.rows_in - read.rejected
    # ``where`` came through `TableQuery`, which checked it; embedded as it was checked
    row = store.fetchone(f"SELECT count(*) FROM calls WHERE ({where or 'TRUE'})")
    return int(row[0]) if row else 0


def _from_summaries(
    *,
    engine: str,
    db: str | Path,
    source: Sequence[str | Path] | None,
    scheduler: str | None,
    workers: int | None,
    query: TableQuery,
    reading: Reading,
    min_group: int,
    fits: bool,
    on_file: Callable[[int, int], None] | None,
) -> SourceStats:
    """
    The tail table from summaries: of a store (one partition), or of files, one per file.
    """
    if not source:
        with Store.open(db, read_only=True, memory_limit=reading.memory_limit) as store:
            summary = summarize(store, query, min_group=min_group)
        run = EngineRun(Partition(summary, InPlace([])), "duckdb", 1, [peak_rss_bytes()])
        report = summary_report(summary, query, min_group=min_group, fits=fits)
        return SourceStats(report, None, run)
    files, missing = expand_paths(source)
    if missing:
        raise IngestError("; ".join(str(e) for e in missing))
    tasks = 2 * len(files)
    done: Any = None if on_file is None else (lambda n: on_file(n, tasks))
    if engine == "dask":
        from tailkit.engines._dask import summarize_dask

        run = summarize_dask(
            files, query, reading, scheduler=scheduler or "local", workers=workers or 2,
            min_group=min_group, on_file=done,
        )  # fmt: skip
    else:
        run = summarize_local(files, query, reading, min_group=min_group, on_file=done)
    report = summary_report(run.partition.summary, query, min_group=min_group, fits=fits)
    return SourceStats(report, run.partition.read, run)
