"""
The ``tailkit`` command line: typer wiring only (parse, one library call, print).
"""

from __future__ import annotations

import json
import sys

from pathlib import Path
from typing import Annotated

import typer

from tailkit.cli import _check, _demo, _docs, _races, _render, _replay, _report, _serve, _workflow
from tailkit.cli._common import (
    READ_MEMORY_LIMIT,
    DbOption,
    InputEdges,
    JsonOption,
    MapOption,
    MemoryLimitOption,
    OutputEdges,
    ReadMemoryLimitOption,
    SetOption,
    SetOverOption,
    StatusMapOption,
    UnitOption,
    buckets_of,
    fail,
    scan_options,
)
from tailkit.cli._help import HelpGroup, HelpTyper
from tailkit.cli._progress import IngestProgress
from tailkit.errors import OutOfMemoryError, QueryError, TailkitError
from tailkit.ingest import IngestReport, expand_paths, ingest_paths
from tailkit.store import DEFAULT_DB, Store, summarize


app = HelpTyper(
    name="tailkit",
    cls=HelpGroup,
    help="Measure LLM latency tails and keep workflows inside their deadline.\n\n"
    "Reference: `tailkit docs` (call record, plan, deadline, ledger, formats).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


_FIXES = {
    "bad_status": "map the file's status values with --status-map VALUE=STATUS",
    "missing_model": "name the model with --map model=COLUMN or --set model=VALUE",
    "ok_without_total": "map the latency with --map total_s=COLUMN",
}
"""What usually fixes a file whose every row was rejected for one reason."""


def _nothing_stored(report: IngestReport, db: Path) -> str | None:
    """
    Why a run stored nothing because every row it read was rejected (else ``None``).

    Duplicates do not count as rejected: a re-run that stores nothing new is no failure.
    """
    totals = report.totals()
    if totals["stored"] or totals["duplicates"] or not totals["rejected"]:
        return None
    reason, n = next(iter(report.reasons().items()))
    fix = f"{_FIXES[reason]}, or " if reason in _FIXES else ""
    where = "" if db == DEFAULT_DB else f" --db {db}"
    return (
        f"nothing stored: all {totals['rejected']:,} row(s) read were rejected, most often "
        f"{reason} ({n:,}); {fix}see why with: tailkit rejects{where} --reason {reason}"
    )


@app.command()
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
    try:
        with Store.open(db, memory_limit=memory_limit) as store:
            files, _ = expand_paths(paths)
            total = sum(f.stat().st_size for f in files)
            with IngestProgress(store, total, enabled=not as_json) as progress:
                report = ingest_paths(
                    store, paths, format=format, options=options, strict=strict,
                    progress=progress,
                )  # fmt: skip
            summary = None if quiet else summarize(store, buckets)
    except TailkitError as exc:
        fail(str(exc))
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
    nothing = _nothing_stored(report, db)
    if nothing:
        typer.echo(f"Error: {nothing}", err=True)
    if not report.ok or nothing:
        raise typer.Exit(1)


@app.command()
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
    try:
        with Store.open(db, read_only=True) as store:
            result = summarize(store, buckets)
    except TailkitError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(_render.summary_json(result), indent=2))
        return
    for line in _render.summary_text(result):
        typer.echo(line)


@app.command()
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
    where, params = [], []
    if reason:
        where.append("reason = ?")
        params.append(reason)
    if file:
        where.append("source_file = ?")
        params.append(file)
    filt = f"WHERE {' AND '.join(where)}" if where else ""
    try:
        with Store.open(db, read_only=True) as store:
            rows = store.fetchall(
                "SELECT source_file, source_row, reason, detail, raw FROM rejects "
                f"{filt} ORDER BY ingest_id, source_row LIMIT ?",
                [*params, limit],
            )
    except TailkitError as exc:
        fail(str(exc))
    if as_json:
        keys = ("source_file", "source_row", "reason", "detail", "raw")
        typer.echo(json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2))
        return
    if not rows:
        typer.echo("no rejected rows")
    for source_file, row, why, detail, raw in rows:
        typer.echo(f"{source_file}:{row}: {why}: {detail}")
        if raw:
            typer.echo(f"    {raw[:200]}")


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if text.strip().lower() == "none":
        return ()
    if not names:
        fail(f"{flag} takes comma-separated names, got {text!r}")
    return names


FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="NAME",
        help="With --source: auto, or a format name (ingest --list-formats).",
    ),
]


@app.command()
def stats(
    ctx: typer.Context,
    db: DbOption = DEFAULT_DB,
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            metavar="GLOB",
            help="Read these files, folders or globs in place instead of a store (repeatable); "
            "not with --db.",
        ),
    ] = None,
    format: FormatOption = "auto",
    map_: MapOption = None,
    set_: SetOption = None,
    set_over: SetOverOption = None,
    status_map: StatusMapOption = None,
    unit: UnitOption = None,
    by: Annotated[
        str,
        typer.Option(
            metavar="COLUMNS", help="Group by these call-record columns, comma-separated."
        ),
    ] = "provider,model",
    bucket: Annotated[
        str,
        typer.Option(
            metavar="BUCKETS", help="Split groups by token buckets: input, output, both, or none."
        ),
    ] = "input,output",
    where: Annotated[
        str | None, typer.Option(metavar="SQL", help="SQL filter on call-record columns.")
    ] = None,
    min_group: Annotated[
        int, typer.Option("--min-group", metavar="N", help="Leave out groups with fewer calls.")
    ] = 1,
    min_calls: Annotated[int | None, typer.Option("--min-calls", hidden=True)] = None,
    input_edges: InputEdges = None,
    output_edges: OutputEdges = None,
    as_json: JsonOption = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the table as CSV.")] = False,
    parquet: Annotated[
        Path | None,
        typer.Option("--parquet", metavar="FILE", help="Write the table to this Parquet file."),
    ] = None,
    approx: Annotated[
        bool,
        typer.Option(
            "--approx", help="Approximate quantiles (DuckDB's), each with its measured error."
        ),
    ] = False,
    approx_above: Annotated[
        int | None,
        typer.Option(
            "--approx-above",
            metavar="N",
            min=0,
            help="Approximate quantiles when the selected calls are more than N.",
        ),
    ] = None,
    memory_limit: ReadMemoryLimitOption = READ_MEMORY_LIMIT,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="NAME",
            help="duckdb: this machine; dask: a Dask cluster, one task per --source file.",
        ),
    ] = "duckdb",
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="With --engine dask: local (start workers here, the default) or tcp://HOST:8786.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", metavar="N", min=1, help="With --scheduler local: worker processes [2]."
        ),
    ] = None,
    sketch: Annotated[
        bool,
        typer.Option(
            "--sketch",
            help="Quantiles from mergeable sketches (within 0.5%), as --engine dask computes them.",
        ),
    ] = False,
) -> None:
    """
    Show where the latency tail is, per group and token bucket, with intervals and fits.

    One row per group: calls, cut and failed shares, p50/p90/p95/p99 with 95% intervals,
    p99/p50, the lognormal fit and its verdict, the transient-tail share, TTFT and generation
    quantiles, the phase that holds the tail and the cutoff signal it suggests. Then, per
    route, whether a fresh attempt would escape the tail: transient, work (the calls' size),
    mixed, or can't tell (saying what is missing), with the evidence: calls slower than their
    size explains, the share of spread size explains, slow spells in time, and how often
    hedges or retries of slow calls finished fast. --json carries it all under "verdicts".

    --source reads log files where they are (Parquet out of core) instead of a store, with
    --format/--map/--set/--unit as for ingest; rows ingest would reject are left out and
    counted on stderr. --approx (or --approx-above N calls) computes quantiles approximately.

    --engine dask spreads the --source files over a Dask cluster (pip install
    'tailkit[distributed]'): each file is summarized by a worker (counts, DDSketch bins within
    0.5 %, seeded samples) and the summaries merge; --sketch computes the same summaries here.
    Column quantile_rel_error bounds each row's p50-p99 against the exact values.

    Example:

        tailkit stats --by provider,model --bucket output --where "step = 'draft'"

        tailkit stats --source 'logs/*.parquet' --set provider=openai --memory-limit 2GB

        tailkit stats --source 'lake/day=*/*.parquet' --engine dask --scheduler tcp://10.0.0.5:8786
    """
    from rich.console import Console

    from tailkit.cli import _stats_view
    from tailkit.cli._stats_engine import check_engine, summary_tables
    from tailkit.cli._stats_source import (
        check_source_options,
        rejects_line,
        selected_calls,
        stats_store,
    )
    from tailkit.tails import TableQuery, tail_report

    check_source_options(ctx, source)
    summaries = engine == "dask" or sketch
    check_engine(
        engine=engine, scheduler=scheduler, workers=workers, source=source,
        approx=summaries and (approx or approx_above is not None),
    )  # fmt: skip
    reading = {"format": format, "map_": map_, "set_": set_, "set_over": set_over,
               "status_map": status_map, "unit": unit}  # fmt: skip

    if min_calls is not None:
        fail(
            f"stats has no --min-calls (calibrate's floor for a step's route); to leave out "
            f"groups with fewer calls use --min-group {min_calls}"
        )
    buckets = buckets_of(input_edges, output_edges)
    bucket_names = ("input", "output") if bucket.strip() == "both" else _names(bucket, "--bucket")
    try:
        query = TableQuery(by=_names(by, "--by"), bucket=bucket_names, where=where, buckets=buckets)
        run = None
        if summaries:
            report, run = summary_tables(
                engine=engine, db=db, source=source, scheduler=scheduler, workers=workers,
                query=query, reading=reading, memory_limit=memory_limit, min_group=min_group,
                progress=not (as_json or as_csv or parquet),
            )  # fmt: skip
            if line := rejects_line(run.partition.read):
                typer.echo(line, err=True)
        else:
            with stats_store(
                db=db, source=source, memory_limit=memory_limit, reading=reading,
                progress=not (as_json or as_csv or parquet),
            ) as (store, read):  # fmt: skip
                if read is not None and (line := rejects_line(read)):
                    typer.echo(line, err=True)
                if approx_above is not None and not approx:
                    approx = selected_calls(store, where, read) > approx_above
                report = tail_report(store, query, min_group=min_group, approx=approx)
    except QueryError as exc:
        bad_filter = where and not isinstance(exc, OutOfMemoryError)
        # the exact table of files read in place holds all of them in one DuckDB; the
        # summaries read one file at a time (at 100 M rows in 50 files: 1 GB and 4 GB caps
        # were not enough for the first, the 1 GB default was for the second)
        per_file = isinstance(exc, OutOfMemoryError) and source and not summaries
        hint = "; or read the files one at a time with --sketch" if per_file else ""
        fail(f"--where {where!r} is not a valid filter: {exc}" if bad_filter else f"{exc}{hint}")
    except TailkitError as exc:
        fail(str(exc))
    if parquet is not None:
        report.table.write_parquet(parquet)
        typer.echo(f"wrote {len(report.table)} rows to {parquet}")
    elif as_json:
        described = run.describe() if run else {"name": "duckdb", "workers": 1, "exact": True}
        typer.echo(_stats_view.to_json(report, engine=described))
    elif as_csv:
        typer.echo(report.table.write_csv(), nl=False)
    else:
        # A terminal gets its own width; a pipe or file gets a wide, unwrapped table.
        console = Console() if sys.stdout.isatty() else Console(width=200)
        _stats_view.render_table(report, list(query.keys), console)


app.command()(_workflow.calibrate)
app.command(name="simulate")(_workflow.simulate)
app.command(name="demo")(_demo.demo)
app.command(name="serve")(_serve.serve)
app.command(name="report")(_report.report)
app.command(name="races")(_races.races)
app.command(name="replay")(_replay.replay)
app.command(name="check")(_check.check)
app.command(name="docs")(_docs.docs)


def main() -> None:
    """
    Run the app (for ``python -m tailkit.cli``).
    """
    app(prog_name="tailkit")
    sys.exit(0)
