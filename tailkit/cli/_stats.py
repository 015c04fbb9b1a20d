"""
``tailkit stats``: the tail table of a store or of files read in place (`stats_from`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailkit.cli._common import (
    READ_MEMORY_LIMIT,
    DbOption,
    InputEdges,
    JsonOption,
    MapOption,
    OutputEdges,
    ReadMemoryLimitOption,
    SetOption,
    SetOverOption,
    StatusMapOption,
    UnitOption,
    buckets_of,
    echo,
    fail,
    library_errors,
    new_console,
    scan_options,
)
from tailkit.cli._progress import FileTasksProgress, IngestProgress
from tailkit.store import DEFAULT_DB


_SCAN_FLAGS = {
    "format": "--format",
    "map_": "--map",
    "set_": "--set",
    "set_over": "--set-over",
    "status_map": "--status-map",
    "unit": "--unit",
}
"""Options that say how to read files: they mean something with --source only."""


def _check_source_options(ctx: typer.Context, source: list[str] | None) -> None:
    """
    Refuse ``--source`` with ``--db``, and the reading options without ``--source``.

    A check of the command line itself: ``--db`` has a default, so only its being typed says
    that both were asked for.
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
    fits: Annotated[
        bool,
        typer.Option(
            "--fits",
            help="Also rank distribution families and fit each row's transient-tail mixture "
            "(columns best_family, transient_*).",
        ),
    ] = False,
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
    p99/p50, the lognormal fit and its verdict, TTFT and generation quantiles, the phase that
    holds the tail and the cutoff signal it suggests; with --fits also the best of four
    distribution families and the transient-tail share of a mixture fit (--json says under
    "fits" whether those columns were computed). Then, per
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
    from tailkit.cli import _stats_view
    from tailkit.engines import stats_from
    from tailkit.tails import TableQuery

    _check_source_options(ctx, source)
    if min_calls is not None:
        fail(
            f"stats has no --min-calls (calibrate's floor for a step's route); to leave out "
            f"groups with fewer calls use --min-group {min_calls}"
        )
    options = scan_options(
        map_=map_, set_=set_, set_over=set_over, status_map=status_map, unit=unit
    )
    buckets = buckets_of(input_edges, output_edges)
    bucket_names = ("input", "output") if bucket.strip() == "both" else _names(bucket, "--bucket")
    drawn = not (as_json or as_csv or parquet)
    with (
        library_errors("stats"),
        IngestProgress(enabled=drawn, verb="read") as read_bar,
        FileTasksProgress(enabled=drawn) as tasks_bar,
    ):
        query = TableQuery(by=_names(by, "--by"), bucket=bucket_names, where=where, buckets=buckets)
        result = stats_from(
            db=db, source=source, query=query, min_group=min_group, fits=fits, approx=approx,
            approx_above=approx_above, sketch=sketch, engine=engine, scheduler=scheduler,
            workers=workers, format=format, options=options, memory_limit=memory_limit,
            progress=read_bar, on_file=tasks_bar,
        )  # fmt: skip
    if result.read is not None and result.read.rejected:
        reason, n = next(iter(result.read.reasons().items()))
        echo(
            f"{result.read.rejected:,} of {result.read.rows_in:,} rows rejected, most often "
            f"{reason} ({n:,}), and left out of the table; tailkit ingest shows them",
            err=True,
        )
    report = result.report
    if parquet is not None:
        report.table.write_parquet(parquet)
        echo(f"wrote {len(report.table)} rows to {parquet}")
    elif as_json:
        typer.echo(_stats_view.to_json(report, engine=result.engine()))
    elif as_csv:
        typer.echo(report.table.write_csv(), nl=False)
    else:
        _stats_view.render_table(report, list(query.keys), new_console())
