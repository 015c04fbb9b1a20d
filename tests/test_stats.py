"""
The tail table on real data: llmperf quantiles match numpy, stalls are flagged, totals add up.
"""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from typer.testing import CliRunner

import tailkit

from tailkit.cli import app
from tailkit.errors import ConfigError
from tailkit.fit import empirical_quantiles
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tailkit.tails import TableQuery, tail_report

from .conftest import LLMPERF


def _numpy_quantiles() -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    for path in sorted((LLMPERF / "individual").glob("*.json")):
        rows = json.loads(path.read_text())
        model = json.loads((LLMPERF / "summary" / path.name).read_text())["model"]
        ok = np.array([r["end_to_end_latency_s"] for r in rows if r["error_code"] is None])
        out[(path.name.split("_")[0], model)] = (np.quantile(ok, 0.5), np.quantile(ok, 0.99))
    return out


def test_llmperf_quantiles_match_numpy(llmperf_db: Path) -> None:
    """
    p50 and p99 per provider and model equal numpy's on the raw files.
    """
    table = tailkit.stats(llmperf_db, by=("provider", "model"), bucket=())
    expected = _numpy_quantiles()

    assert len(expected) == len(table)
    for row in table.iter_rows(named=True):
        p50, p99 = expected[(row["provider"], row["model"])]
        assert p50 == pytest.approx(row["p50_s"], rel=1e-9)
        assert p99 == pytest.approx(row["p99_s"], rel=1e-9)
        assert row["p50_s_lo"] <= row["p50_s"] <= row["p50_s_hi"]
        assert row["p99_p50_lo"] <= row["p99_p50"] <= row["p99_p50_hi"]


def test_together_13b_stall_is_a_transient_ttft_tail(llmperf_db: Path) -> None:
    """
    The ~53 s TTFT stall of together 13b shows as a transient tail held by TTFT.
    """
    table = tailkit.stats(llmperf_db, by=("provider", "model"), bucket=())
    row = table.filter(pl.col("model").str.contains("13b") & (pl.col("provider") == "together"))

    assert 1 == len(row)
    assert row["ttft_p99_s"][0] > 20 * row["ttft_p50_s"][0]
    assert "ttft" == row["tail_phase"][0]
    assert row["transient"][0]


def test_bucket_rows_add_up_to_the_group(production_db: Path) -> None:
    """
    Calls per route summed over its token buckets equal the route's calls without buckets.
    """
    with Store.open(production_db, read_only=True) as store:
        split = tail_report(store, TableQuery(by=("provider",), bucket=("input", "output")))
        whole = tail_report(store, TableQuery(by=("provider",), bucket=()))

    summed = split.table.group_by("provider").agg(pl.col("n").sum()).sort("provider")
    assert whole.table.select("provider", "n").sort("provider").rows() == summed.rows()


def test_intervals_are_order_statistics_or_kaplan_meier_over_every_call(
    production_db: Path,
) -> None:
    """
    Each group's quantiles and intervals are empirical_quantiles' on all its calls, cut or not.
    """
    with Store.open(production_db, read_only=True) as store:
        table = tail_report(store, TableQuery(by=("provider", "model", "step"), bucket=())).table
        calls = store.arrow(
            "SELECT provider, model, step, CASE WHEN status = 'ok' THEN total_s END AS total_s, "
            "censored_at_s FROM calls WHERE (status = 'ok' AND total_s > 0) OR censored_at_s > 0"
        )
    frame = pl.from_arrow(calls)
    assert isinstance(frame, pl.DataFrame)
    kinds = set()
    for row in table.iter_rows(named=True):
        group = frame.filter(
            (pl.col("provider") == row["provider"])
            & (pl.col("model") == row["model"])
            & (pl.col("step") == row["step"])
        )
        cut = group["censored_at_s"].fill_null(np.nan).to_numpy()
        censored = {"censored_at_s": cut} if row["censored_share"] > 0 else {}
        got = empirical_quantiles(
            group["total_s"].fill_null(np.nan).to_numpy(), qs=(0.5, 0.99), **censored
        )
        kinds.add(got[0].method)
        for name, est in zip(("p50_s", "p99_s"), got, strict=True):
            assert est.value == pytest.approx(row[name], rel=1e-12)
            assert (est.interval.low, est.interval.high) == (row[f"{name}_lo"], row[f"{name}_hi"])
    assert {"Kaplan-Meier", "order statistics"} == kinds


def test_bad_grouping_is_refused() -> None:
    """
    Grouping by a column that is not in the call record names the valid ones.
    """
    with pytest.raises(ConfigError, match=r"^by 'modle' is not a call-record column") as err:
        TableQuery(by=("modle",))
    assert ("by", "modle") == (err.value.field, err.value.value)


def test_cli_json_and_csv(llmperf_db: Path, tmp_path: Path) -> None:
    """
    `tailkit stats` prints JSON and CSV with one row per group, and writes Parquet.
    """
    runner = CliRunner()
    base = ["stats", "--db", str(llmperf_db), "--bucket", "none"]
    as_json = json.loads(runner.invoke(app, [*base, "--json"]).stdout)
    as_csv = runner.invoke(app, [*base, "--csv"]).stdout.splitlines()
    out = tmp_path / "t.parquet"
    wrote = runner.invoke(app, [*base, "--parquet", str(out)])

    assert 19 == len(as_json["table"]) == len(as_csv) - 1
    assert as_csv[0].startswith(
        "provider,model,n,n_ok,censored_share,failed_share,tokens_per_s_p50,tokens_per_s_p10,p50_s,"
    )
    assert 0 == wrote.exit_code
    assert 19 == len(pl.read_parquet(out))


def test_cli_table_renders(llmperf_db: Path) -> None:
    """
    The default rich table names every provider and the verdict section.
    """
    result = CliRunner().invoke(app, ["stats", "--db", str(llmperf_db), "--bucket", "none"])

    assert 0 == result.exit_code, result.output
    assert "Where the tail is" in result.stdout
    assert "together" in result.stdout
    assert "Would a fresh attempt escape the tail?" in result.stdout


def test_cli_empty_and_bad_filters(llmperf_db: Path) -> None:
    """
    A filter matching nothing says so; a filter that is not SQL names the flag.
    """
    runner = CliRunner()
    base = ["stats", "--db", str(llmperf_db)]
    empty = runner.invoke(app, [*base, "--where", "model = 'nope'"])
    bad = runner.invoke(app, [*base, "--where", "nonsense ==="])

    assert 0 == empty.exit_code
    assert "No calls to describe" in empty.stdout
    assert 1 == bad.exit_code
    assert bad.stderr.startswith(
        "Error: --where 'nonsense ===' is not a valid filter: Parser Error"
    )


def _parquet(
    path: Path, provider: str, total_s: list[float | None], cut_s: list[float | None]
) -> Path:
    n = len(total_s)
    pl.DataFrame(
        {
            "call_id": [f"{provider}-{i}" for i in range(n)],
            "provider": [provider] * n,
            "model": ["m"] * n,
            "total_s": total_s,
            "censored_at_s": cut_s,
            "status": ["ok" if c is None else "cancelled" for c in cut_s],
            "output_tokens": [100 if c is None else None for c in cut_s],
        }
    ).write_parquet(path)
    return path


def test_a_degenerate_group_gets_a_row_and_a_warning_not_a_failure(tmp_path: Path) -> None:
    """
    Equal latencies plus a cut call, and hopeless censoring, next to a healthy group.
    """
    rng = np.random.default_rng(0)
    files = [
        _parquet(tmp_path / "tie.parquet", "tie", [1.2, 1.2, None], [None, None, 5.0]),
        _parquet(tmp_path / "hopeless.parquet", "hopeless", [1.0, 2.0, 3.0] + [None] * 2000,
                 [None] * 3 + [30.0] * 2000),
        _parquet(tmp_path / "fine.parquet", "fine", list(rng.lognormal(0, 0.5, 500)),
                 [None] * 500),
    ]  # fmt: skip
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, files)

    result = CliRunner().invoke(app, ["stats", "--db", str(db), "--bucket", "none", "--json"])

    assert 0 == result.exit_code, result.output
    rows = {r["provider"]: r for r in json.loads(result.stdout)["table"]}
    assert {"tie", "hopeless", "fine"} == set(rows)
    tie, hopeless = rows["tie"], rows["hopeless"]
    assert (3, 2) == (tie["n"], tie["n_ok"])
    assert tie["p50_s"] == pytest.approx(1.2)
    assert tie["warning"]
    assert hopeless["mu"] is None
    assert hopeless["warning"]
    assert rows["fine"]["mu"] is not None
