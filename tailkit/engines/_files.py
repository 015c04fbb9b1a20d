"""
One mergeable summary per file read in place, merged: the building blocks of both engines.

A file is a partition, read through ingest's readers (``format`` and the scan options, as
for ingest) in two passes: `aggregate_file` gives its `tailkit.tails.Summary` without
samples, and once all are merged (`merge_partitions`), `draw_file` its share of the samples
(`tailkit.tails.draw`). `summarize_local` does both in this process, file after file;
`summarize_dask` (`_dask.py`, the ``distributed`` extra) spreads the files over a
Dask cluster's workers and merges in a tree. Both give the same summary of the same files.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import tempfile

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from tailkit.ingest import InPlace, ScanOptions, open_in_place
from tailkit.store import Store
from tailkit.tails import TableQuery
from tailkit.tails.lowlevel import Summary, aggregate, draw, merge, merge_samples


@dataclass(frozen=True, slots=True)
class Partition:
    """
    The summary of some files and, per file, the rows their reading left out.
    """

    summary: Summary
    read: InPlace


@dataclass(frozen=True, slots=True)
class Reading:
    """
    How to read each file: as ``stats --source`` and ingest read them.

    Args:
        format: ``auto`` (detect per file) or a format name.
        options: How to map, set and convert the files' columns (`ScanOptions`).
        memory_limit: DuckDB's memory limit per partition read (``None``: DuckDB's default).
        threads: DuckDB threads per partition read (``None``: DuckDB's default, every core).
    """

    format: str = "auto"
    options: ScanOptions | None = None
    memory_limit: str | None = None
    threads: int | None = None


@dataclass(frozen=True, slots=True)
class EngineRun:
    """
    What an engine computed, and with what.

    Args:
        partition: The merged summary and the files' reading results.
        name: ``duckdb`` or ``dask``.
        workers: Processes that summarized files.
        peak_rss_bytes: Each worker's peak resident memory (this process for ``duckdb``).
    """

    partition: Partition
    name: str
    workers: int
    peak_rss_bytes: list[int] = field(default_factory=list)

    def describe(self) -> dict[str, object]:
        """
        What computed the table: name, workers, partitions, summary sizes, peak memory.
        """
        summary = self.partition.summary
        groups = max(summary.groups.height, 1)
        return {
            "name": self.name,
            "workers": self.workers,
            "partitions": summary.partitions,
            "summary_bytes": summary.nbytes(),
            "summary_bytes_per_group": summary.nbytes() // groups,
            "peak_rss_bytes": self.peak_rss_bytes,
        }


@contextlib.contextmanager
def _opened(path: str, reading: Reading) -> Iterator[tuple[Store, InPlace]]:
    """
    An in-memory store whose ``calls`` view reads one file; spills go to a temporary folder.
    """
    store, read = open_in_place(
        [path], format=reading.format, options=reading.options, memory_limit=reading.memory_limit
    )
    with store, tempfile.TemporaryDirectory(prefix="tailkit-spill-") as spill:
        store.execute(f"SET temp_directory = '{spill}'")
        if reading.threads:
            store.execute(f"SET threads = {int(reading.threads)}")
        yield store, read


def aggregate_file(path: str, query: TableQuery, reading: Reading) -> Partition:
    """
    The first pass over one file: its summary without samples (`tailkit.tails.aggregate`).

    The file's good rows are read once into memory (spilling beyond the limit), not once per
    query of the pass.

    Raises:
        IngestError: The file cannot be read (the message names it and the fix).
        QueryError: DuckDB refused a query (a ``where`` that is not valid SQL).
    """
    with _opened(path, reading) as (store, read):
        store.execute("CREATE TABLE _calls AS SELECT * FROM calls")
        store.execute("DROP VIEW calls")
        store.execute("ALTER TABLE _calls RENAME TO calls")
        return Partition(aggregate(store, query), read)


def draw_file(
    path: str, query: TableQuery, reading: Reading, counts: Summary, min_group: int
) -> pl.DataFrame:
    """
    The second pass over one file: its share of the samples (`tailkit.tails.draw`).
    """
    with _opened(path, reading) as (store, _):
        return draw(store, query, counts, min_group=min_group)


def merge_partitions(parts: Sequence[Partition]) -> Partition:
    """
    One partition of all of ``parts`` (`tailkit.tails.merge`); the files' results in order.
    """
    return Partition(
        merge([p.summary for p in parts]), InPlace([f for p in parts for f in p.read.files])
    )


def counts_only(summary: Summary) -> Summary:
    """
    What the second pass needs of the first: the groups' counts and the samples' sizes.
    """
    return replace(summary, bins=summary.bins.clear(), pairs=summary.pairs.clear())


def summarize_local(
    files: Sequence[str | Path],
    query: TableQuery,
    reading: Reading,
    *,
    min_group: int = 1,
    on_file: Callable[[int], None] | None = None,
) -> EngineRun:
    """
    Every file summarized in this process, one after the other, in two passes.

    Summaries are merged as they come, so memory holds two, not one per file. ``on_file`` is
    called with the count of files done after each (``2 * len(files)`` in all).

    Raises:
        IngestError: A file cannot be read.
        QueryError: DuckDB refused a query.
        ValueError: No files.
    """
    if not files:
        msg = "no files to summarize"
        raise ValueError(msg)
    merged: Partition | None = None
    for done, path in enumerate(files, start=1):
        part = aggregate_file(str(path), query, reading)
        merged = part if merged is None else merge_partitions([merged, part])
        if on_file:
            on_file(done)
    assert merged is not None  # noqa: S101 - there were files
    counts = counts_only(merged.summary)
    drawn = []  # each file's share: together about the samples' size, merged once
    for done, path in enumerate(files, start=len(files) + 1):
        drawn.append(draw_file(str(path), query, reading, counts, min_group))
        if on_file:
            on_file(done)
    summary = replace(merged.summary, samples=merge_samples(drawn, counts))
    return EngineRun(Partition(summary, merged.read), "duckdb", 1, [peak_rss_bytes()])


def peak_rss_bytes() -> int:
    """
    This process's peak resident memory, in bytes.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS counts bytes
