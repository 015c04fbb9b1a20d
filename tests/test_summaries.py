"""
Mergeable summaries: the tail table of partitions, on one machine and on a Dask cluster.

The table from a summary has the store table's columns and verdicts; its counts are exact, its
quantiles within the sketch's stated bound of the exact ones; merging is associative; the
local engine and a Dask cluster (started and stopped here) give the same table.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.engines import Reading, summarize_local
from tailkit.engines.lowlevel import aggregate_file
from tailkit.ingest import open_in_place
from tailkit.store import Store
from tailkit.tails import TableQuery, tail_report
from tailkit.tails.lowlevel import (
    RELATIVE_ACCURACY,
    aggregate,
    merge,
    summary_report,
)
from tailkit.tails.lowlevel import (
    tail_summary as summarize,
)
from tests.conftest import PRODUCTION
from tests.test_stats_exact import _group


PARTS = 8
QUANTILE_COLUMNS = ("p50_s", "p90_s", "p95_s", "p99_s")
# columns computed from the sketch's bins (within its bound) or from floating sums in another
# order (the log moments): everything else must be equal
APPROXIMATE = ("mu", "sigma", "tokens_per_s_p50", "tokens_per_s_p10", "ttft_p50_s",
               "ttft_p99_s", "gen_p50_s", "gen_p99_s", "p99_p50")  # fmt: skip


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory, production_db: Path) -> tuple[Path, Path]:
    """
    The production sample as a store (conftest's, read only) and as `PARTS` Parquet files.

    A run's calls are all in one file.
    """
    folder = tmp_path_factory.mktemp("summaries")
    source = PRODUCTION / "calls.parquet"
    con = duckdb.connect()
    for i in range(PARTS):
        con.execute(
            f"COPY (SELECT * FROM read_parquet('{source}') WHERE hash(run_id) % {PARTS} = {i}) "
            f"TO '{folder / f'part-{i}.parquet'}' (FORMAT parquet)"
        )
    con.close()
    return production_db, folder


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet"))


def _exact(db: Path, query: TableQuery) -> Any:
    with Store.open(db, read_only=True) as store:
        return tail_report(store, query)


def _assert_within_bound(exact: pl.DataFrame, approx: pl.DataFrame) -> float:
    """
    Every p50..p99 within its row's quantile_rel_error of the exact value; the largest error.
    """
    worst = 0.0
    for e, a in zip(exact.iter_rows(named=True), approx.iter_rows(named=True), strict=True):
        bound = a["quantile_rel_error"]
        if bound is None:  # a row without latency statistics (under two finished calls)
            assert e["p50_s"] is None
            continue
        assert bound >= RELATIVE_ACCURACY
        for name in QUANTILE_COLUMNS:
            if e[name] is None or not math.isfinite(e[name]):
                assert e[name] == a[name] or (math.isnan(e[name]) and math.isnan(a[name]))
                continue
            error = abs(a[name] / e[name] - 1.0)
            assert error <= bound * (1 + 1e-9), (name, e[name], a[name], bound)
            worst = max(worst, error)
    return worst


def _assert_same_table(
    left: pl.DataFrame, right: pl.DataFrame, *, exact_right: bool = False
) -> None:
    """
    Equal columns; equal values except the sketch's (within bounds) and the log moments.
    """
    right = right.drop("quantile_rel_error") if "quantile_rel_error" in right.columns else right
    left = left.drop("quantile_rel_error") if "quantile_rel_error" in left.columns else left
    assert left.columns == right.columns
    for name in left.columns:
        if name in APPROXIMATE or (exact_right and name.startswith((*QUANTILE_COLUMNS, "p99_p50"))):
            continue
        assert left[name].equals(right[name]), name
    np.testing.assert_allclose(left["mu"].to_numpy(), right["mu"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(left["sigma"].to_numpy(), right["sigma"].to_numpy(), rtol=1e-9)


def test_a_summary_gives_the_store_table_within_the_sketch_bound(log: tuple[Path, Path]) -> None:
    """
    One partition (the whole store): counts, fits and verdicts equal; quantiles within bound.
    """
    db, _ = log
    query = TableQuery()
    exact = _exact(db, query)
    with Store.open(db, read_only=True) as store:
        report = summary_report(summarize(store, query), query)
    _assert_same_table(report.table, exact.table, exact_right=True)
    assert report.verdicts.equals(exact.verdicts)
    worst = _assert_within_bound(exact.table, report.table)
    assert 0 < worst <= 0.01  # the target: p50 and p99 within 1 %
    for name, exact_name in (
        ("ttft_p99_s", "ttft_p99_s"),
        ("tokens_per_s_p50", "tokens_per_s_p50"),
    ):
        ratio = (report.table[name] / exact.table[exact_name] - 1).abs().max()
        assert isinstance(ratio, float)
        assert ratio <= RELATIVE_ACCURACY * (1 + 1e-9)


def test_files_summarized_one_by_one_give_the_table_of_all(log: tuple[Path, Path]) -> None:
    """
    Eight partitions in two passes: the same counts, bins and samples as the store in one.
    """
    db, folder = log
    query = TableQuery(by=("provider", "model"), bucket=("output",))
    run = summarize_local(_files(folder), query, Reading())
    assert run.partition.summary.partitions == PARTS
    assert run.partition.read.rows_in == 200_000
    with Store.open(db, read_only=True) as store:
        whole = summarize(store, query)
    mine, theirs = run.partition.summary, whole
    assert mine.bins.sort(mine.bins.columns).equals(theirs.bins.sort(theirs.bins.columns))
    columns = ["_gid", "_h", "in_group", "in_route"]
    assert (
        mine.samples.select(columns)
        .sort(columns)
        .equals(theirs.samples.select(columns).sort(columns))
    )
    exact = _exact(db, query)
    report = summary_report(mine, query)
    _assert_same_table(report.table, exact.table, exact_right=True)
    _assert_within_bound(exact.table, report.table)
    # a retry pairs with its first attempt within a file (each run is in one file here), judged
    # against the p75 of all files' first attempts (from their bins, within 0.5 %)
    assert report.verdicts.equals(exact.verdicts)


def test_merging_is_associative_and_order_free(log: tuple[Path, Path]) -> None:
    """
    Any tree of merges of the same partitions gives the same summary.
    """
    _, folder = log
    query = TableQuery(by=("provider",), bucket=("input",))
    a, b, c = (aggregate_file(str(f), query, Reading()).summary for f in _files(folder)[:3])
    one, other = merge([a, b, c]), merge([c, merge([b, a])])
    key = ["_gid"]
    left, right = one.groups.sort(key), other.groups.sort(key)
    moments = ("log_mean", "log_m2")
    assert left.drop(*moments).equals(right.drop(*moments))
    for name in moments:
        np.testing.assert_allclose(left[name].to_numpy(), right[name].to_numpy(), rtol=1e-12)
    assert one.bins.sort(["_gid", "s", "k"]).equals(other.bins.sort(["_gid", "s", "k"]))
    assert one.partitions == other.partitions == 3


def test_cut_calls_stay_within_the_stated_bound(tmp_path: Path) -> None:
    """
    Kaplan-Meier quantiles from bins, with many calls cut inside buckets, keep their bound.
    """
    rng = np.random.default_rng(19)
    parts = [_group(rng, p, n, cut=c) for p, n, c in
             (("plain", 3000, 0.0), ("cut", 2500, 0.08), ("heavy", 2000, 0.3))]  # fmt: skip
    frame = pl.concat([pl.DataFrame(p, strict=False) for p in parts], how="vertical_relaxed")
    frame.write_parquet(tmp_path / "calls.parquet")
    query = TableQuery(by=("provider",), bucket=())
    store, _ = open_in_place([tmp_path / "calls.parquet"])
    with store:
        exact = tail_report(store, query).table
        approx = summary_report(summarize(store, query), query).table
    _assert_within_bound(exact, approx)
    bounds = dict(zip(approx["provider"], approx["quantile_rel_error"], strict=True))
    assert bounds["plain"] == RELATIVE_ACCURACY


def test_aggregate_reads_a_filter_and_reports_a_bad_one(log: tuple[Path, Path]) -> None:
    """
    ``where`` applies to every pass; one naming no call column is refused before any query.
    """
    db, _ = log
    from tailkit.errors import FilterError

    with Store.open(db, read_only=True) as store:
        kept = aggregate(store, TableQuery(where="provider = 'openai'"))
        assert set(kept.groups["provider"].to_list()) == {"openai"}
        with pytest.raises(FilterError, match="no_such_column"):
            aggregate(store, TableQuery(where="no_such_column = 1"))


@pytest.mark.slow
def test_a_dask_cluster_gives_the_local_engines_table(log: tuple[Path, Path]) -> None:
    """
    A LocalCluster started here, reached by its address: the local engine's table.
    """
    from distributed import LocalCluster

    from tailkit.engines.lowlevel import summarize_dask

    db, folder = log
    query = TableQuery()
    local = summary_report(summarize_local(_files(folder), query, Reading()).partition.summary)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        run = summarize_dask(_files(folder), query, Reading(), scheduler=cluster.scheduler_address)
        result = CliRunner().invoke(
            app,
            ["stats", "--source", str(folder / "*.parquet"), "--engine", "dask",
             "--scheduler", cluster.scheduler_address, "--json"],
        )  # fmt: skip
    assert run.workers == 2
    assert len(run.peak_rss_bytes) == 2
    report = summary_report(run.partition.summary, query)
    _assert_same_table(report.table, local.table)
    assert report.verdicts.equals(local.verdicts)
    exact = _exact(db, query).table
    assert report.table["n"].equals(exact["n"])
    _assert_within_bound(exact, report.table)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["engine"]["name"] == "dask"
    assert doc["engine"]["workers"] == 2
    assert doc["engine"]["partitions"] == PARTS
    assert [r["n"] for r in doc["table"]] == exact["n"].to_list()


@pytest.mark.slow
def test_stats_starts_and_stops_its_own_local_cluster(log: tuple[Path, Path]) -> None:
    """
    ``--scheduler local`` (the default) with one worker: the same counts, JSON engine field.
    """
    _, folder = log
    args = ["stats", "--source", str(folder / "*.parquet"), "--by", "provider",
            "--bucket", "none", "--json"]  # fmt: skip
    dask = CliRunner().invoke(app, [*args, "--engine", "dask", "--workers", "1"])
    assert dask.exit_code == 0, dask.output
    here = CliRunner().invoke(app, [*args, "--sketch"])
    assert here.exit_code == 0, here.output
    d, h = json.loads(dask.stdout), json.loads(here.stdout)
    assert d["engine"]["workers"] == 1
    assert h["engine"]["name"] == "duckdb"
    assert [r["n"] for r in d["table"]] == [r["n"] for r in h["table"]]
    assert [r["p99_s"] for r in d["table"]] == [r["p99_s"] for r in h["table"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "dask"], "--engine dask reads files in place"),
        (["--engine", "spark", "--source", "x.parquet"], "--engine must be duckdb or dask"),
        (["--workers", "2", "--source", "x.parquet"], "--workers is for --engine dask"),
        (["--sketch", "--approx", "--source", "x.parquet"], "--approx takes DuckDB's t-digest"),
        (
            ["--engine", "dask", "--scheduler", "tcp://h:1", "--workers", "2", "--source", "x"],
            "--workers starts local workers",
        ),
    ],
)
def test_engine_options_are_checked(args: list[str], message: str) -> None:
    """
    Options that cannot work together are refused before anything is read.
    """
    result = CliRunner().invoke(app, ["stats", *args])
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())


def test_an_unreachable_scheduler_is_a_clear_error(
    log: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    A scheduler nobody listens at: one line naming the address and the fix.
    """
    from tailkit.engines import _dask

    monkeypatch.setattr(_dask, "CONNECT_TIMEOUT_S", 1)
    _, folder = log
    result = CliRunner().invoke(
        app,
        ["stats", "--source", str(_files(folder)[0]), "--engine", "dask",
         "--scheduler", "tcp://127.0.0.1:9"],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in result.output


def test_nothing_but_the_dask_engine_imports_dask() -> None:
    """
    The CLI, the stats and the local engine load without Dask (an optional extra).
    """
    code = (
        "import sys, tailkit.cli, tailkit.tails, tailkit.engines; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_sketch_reads_files_as_ingest_does(tmp_path: Path) -> None:
    """
    --set-over and rejected rows through the summaries: the exact path's counts, rejects on stderr.
    """
    from tests.test_stats_source import _rows, _write_jsonl

    rows = _rows(2000, seed=7)
    for row in rows[:5]:
        row["total_s"] = -1.0
    _write_jsonl(tmp_path / "a.jsonl", rows)
    _write_jsonl(tmp_path / "b.jsonl", _rows(2000, seed=8))
    args = ["stats", "--source", str(tmp_path / "*.jsonl"), "--set-over", "provider=acme",
            "--by", "provider,model", "--bucket", "none", "--json"]  # fmt: skip
    sketch = CliRunner().invoke(app, [*args, "--sketch"])
    exact = CliRunner().invoke(app, args)
    assert sketch.exit_code == 0, sketch.output
    assert sketch.stderr == exact.stderr
    assert sketch.stderr.startswith("5 of 4,000 rows rejected, most often total_s_negative (5)")
    mine, theirs = json.loads(sketch.stdout), json.loads(exact.stdout)
    assert {r["provider"] for r in mine["table"]} == {"acme"}
    assert [r["n"] for r in mine["table"]] == [r["n"] for r in theirs["table"]]
    assert sum(r["n"] for r in mine["table"]) == 3995
    assert mine["engine"] | {"peak_rss_bytes": None, "summary_bytes": None} == {
        "name": "duckdb", "workers": 1, "partitions": 2, "summary_bytes": None,
        "summary_bytes_per_group": mine["engine"]["summary_bytes_per_group"],
        "peak_rss_bytes": None,
    }  # fmt: skip


def test_running_out_of_memory_on_files_points_to_the_summaries() -> None:
    """
    The exact table of files read in place, out of memory: the error names --sketch.
    """
    source = str(PRODUCTION / "calls.parquet")
    result = CliRunner().invoke(app, ["stats", "--source", source, "--memory-limit", "16MB"])
    assert result.exit_code != 0
    assert "DuckDB ran out of memory" in result.output
    assert "read the files one at a time with --sketch" in " ".join(result.output.split())
