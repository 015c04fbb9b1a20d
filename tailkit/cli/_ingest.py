"""
``tailkit ingest``, ``tailkit summary`` and ``tailkit rejects``: loading logs and what they left.
"""

from __future__ import annotations

import json

from typing import Annotated

import typer

from tailkit.cli import _render
from tailkit.cli._common import (
    DbOption,
    InputEdges,
    JsonOption,
    MapOption,
    MemoryLimitOption,
    OutputEdges,
    SetOption,
    SetOverOption,
    StatusMapOption,
    UnitOption,
    buckets_of,
    echo,
    fail,
    flag_of,
    library_errors,
    scan_options,
)
from tailkit.cli._progress import IngestProgress
from tailkit.ingest import ingest_paths
from tailkit.store import DEFAULT_DB, Store, rejected_rows, summarize_store


def ingest(
    paths: Annotated[
        list[str] | None, typer.Argument(metavar="PATHS", help="Files, folders or glob patterns.")
    ] = None,
    db: DbOption = DEFAULT_DB,
    format: Annotated[
        str,
        typer.Option(
            "--format", metavar="NAME", help="auto, or a format name (see --list-formats)."
        ),
    ] = "auto",
    list_formats: Annotated[
        bool, typer.Option("--list-formats", help="List the formats it reads, then exit.")
    ] = False,
    map_: MapOption = None,
    set_: SetOption = None,
    set_over: SetOverOption = None,
    status_map: StatusMapOption = None,
    unit: UnitOption = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Store nothing from a file with any bad row.")
    ] = False,
    path_template: Annotated[
        str | None,
        typer.Option(
            "--path-template",
            metavar="TEMPLATE",
            help="Read columns from each file's path, e.g. '{model}/*.jsonl' (one folder per "
            "model) or '{provider}_*.json'; matched against the end of the path.",
        ),
    ] = None,
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print the totals line only, no store summary.")
    ] = False,
    as_json: JsonOption = False,
    memory_limit: MemoryLimitOption = None,
) -> None:
    """
    Load call logs into the store and print what was stored.

    Every input row is stored, rejected (see `tailkit rejects`), or skipped as a duplicate;
    the three counts always add up. Formats are detected per file (--format auto). A row
    without a provider takes the one its model name implies (gpt-4o: openai), else unknown.
    Exit code 1 when a file fails, or when rows were read and every one was rejected.

    Example:

        tailkit ingest data_samples/ --db calls.duckdb

        tailkit ingest latency.csv --map total_s=latency_ms --unit ms --set provider=openai

        tailkit ingest calls.csv --map status=success --status-map 429=rate_limited

        tailkit ingest bench/ --path-template '{model}/*.jsonl'
    """
    if list_formats:
        for line in _render.formats_text(as_json=as_json):
            typer.echo(line)
        return
    if not paths:
        fail("give the files, folders or globs to ingest (or --list-formats)")
    options = scan_options(
        map_=map_, set_=set_, set_over=set_over, status_map=status_map, unit=unit
    )
    buckets = buckets_of(input_edges, output_edges)
    with library_errors("ingest"), Store.open(db, memory_limit=memory_limit) as store:
        with IngestProgress(enabled=not as_json) as progress:
            report = ingest_paths(
                store, paths, format=format, options=options, strict=strict, progress=progress,
                path_template=path_template,
            )  # fmt: skip
        summary = None if quiet else summarize_store(store, buckets)
    if as_json:
        typer.echo(_render.ingest_json(report, summary))
    elif quiet:
        for line in _render.totals_text(report):
            typer.echo(line)
    else:
        assert summary is not None  # noqa: S101 - computed unless --quiet
        for line in [*_render.ingest_text(report), *_render.summary_text(summary)]:
            typer.echo(line)
    for error in report.errors:
        typer.echo(_render.error_line(error), err=True)
    advice = report.advice()
    if advice is not None:
        where = "" if db == DEFAULT_DB else f" --db {db}"
        echo(
            f"Error: {advice.render(flag_of)}{', or' if advice.fix else ';'} see why with: "
            f"tailkit rejects{where} --reason {advice.reason}",
            err=True,
        )
    if not report.ok or advice is not None:
        raise typer.Exit(1)


def summary(
    db: DbOption = DEFAULT_DB,
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    as_json: JsonOption = False,
) -> None:
    """
    Show what the store holds: calls per route with p50/p99, and calls per token bucket.

    Example:

        tailkit summary --db calls.duckdb --output-edges 0,256,1k
    """
    buckets = buckets_of(input_edges, output_edges)
    with library_errors("summary"), Store.open(db, read_only=True) as store:
        result = summarize_store(store, buckets)
    if as_json:
        typer.echo(json.dumps(_render.summary_json(result), indent=2))
        return
    for line in _render.summary_text(result):
        typer.echo(line)


def rejects(
    db: DbOption = DEFAULT_DB,
    reason: Annotated[str | None, typer.Option(metavar="REASON", help="Only this reason.")] = None,
    file: Annotated[
        str | None, typer.Option(metavar="FILE", help="Only rows from this source file.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Show at most this many rows.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """
    List rejected input rows with their file, row number, reason and raw text.

    Example:

        tailkit rejects --reason total_s_negative --limit 5
    """
    with library_errors("rejects"), Store.open(db, read_only=True) as store:
        rows = rejected_rows(store, reason=reason, file=file, limit=limit)
    if as_json:
        typer.echo(json.dumps([row.as_dict() for row in rows], indent=2))
        return
    if not rows:
        typer.echo("no rejected rows")
    for row in rows:
        echo(f"{row.source_file}:{row.source_row}: {row.reason}: {row.detail}")
        if row.raw:
            echo(f"    {row.raw[:_RAW_SHOWN]}{'…' if len(row.raw) > _RAW_SHOWN else ''}")


_RAW_SHOWN = 200
"""Characters of a rejected row's raw text that `rejects` shows (--json has it all)."""
