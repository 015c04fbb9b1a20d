"""
Tests of benchmarks/distributed.py: the partitioned log, the agreement check, a smoke run.

No timing: the benchmark's figures are measured by running it, not here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys

from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "distributed.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_distributed", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_distributed"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()


def _call_ids(paths: list[Path]) -> list[list[str]]:
    return [pq.read_table(p, columns=["call_id"])["call_id"].to_pylist() for p in paths]


def _flat(lists: list[list[str]]) -> list[str]:
    return [x for part in lists for x in part]


def test_generate_parts_hold_consecutive_rows(tmp_path: Path) -> None:
    """Generated parts split the seeded log into consecutive, near-equal runs of rows."""
    paths = bench.generate(10_001, 7, 3, tmp_path)
    assert [p.name for p in paths] == [f"part-0000{i}.parquet" for i in range(3)]
    ids = _call_ids(paths)
    assert [len(x) for x in ids] == [3333, 3334, 3334]
    whole = pa.concat_tables(bench.scale.chunks(10_001, 7))
    assert _flat(ids) == whole["call_id"].to_pylist()
    assert pq.ParquetFile(paths[0]).metadata.row_group(0).column(0).compression == "ZSTD"
    assert bench.scale.SCHEMA == pq.read_schema(paths[1])


def test_split_file_matches_source_and_replaces_old_parts(tmp_path: Path) -> None:
    """--from splits a log into parts of its rows in order; earlier parts are removed."""
    log = bench.scale.write_log(tmp_path / "log", 9_000, 3, jsonl=False, chunk=4_000)["parquet"]
    out = tmp_path / "parts"
    bench.generate(100, 1, 5, out)
    paths = bench.split_file(log, 4, out)
    assert bench.existing_parts(out) == paths
    assert _flat(_call_ids(paths)) == pq.read_table(log)["call_id"].to_pylist()
    assert bench.parts_rows(paths) == 9_000


def test_write_parts_refuses_a_wrong_row_count(tmp_path: Path) -> None:
    """Fewer rows than announced is an error, not a silently short log."""
    table = pa.table({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="holds 3 rows, 4 expected"):
        bench.write_parts(iter([table]), table.schema, 4, 2, tmp_path)


def _args(**kw: Any) -> Any:
    import argparse

    base = {"rows": 1_000, "partitions": 3, "seed": 7, "source": None, "reuse": True}
    return argparse.Namespace(**(base | kw))


def test_reuse_measures_the_parts_already_there(tmp_path: Path) -> None:
    """--reuse takes the rows from the parts' footers and writes nothing."""
    paths = bench.generate(900, 7, 3, tmp_path)
    before = [p.stat().st_mtime_ns for p in paths]
    notes: list[str] = []
    assert bench.prepare(_args(), tmp_path, notes) == (900, "reused", False)
    assert [p.stat().st_mtime_ns for p in paths] == before
    assert "reused" in notes[0]


def test_reuse_with_another_partition_count_writes_the_parts(tmp_path: Path) -> None:
    """--reuse with a different --partitions writes the log again, and says so."""
    bench.generate(900, 7, 3, tmp_path)
    notes: list[str] = []
    rows, _, wrote = bench.prepare(_args(partitions=2), tmp_path, notes)
    assert (rows, wrote) == (1_000, True)
    assert len(bench.existing_parts(tmp_path)) == 2
    assert "not 2; wrote them" in notes[0]


def _row(provider: str, n: int, p50: Any, p99: Any, bound: Any = 0.005) -> dict[str, Any]:
    return {"provider": provider, "model": "m", "input_bucket": "0-1k", "output_bucket": None,
            "n": n, "quantile_rel_error": bound, "p50_s": p50, "p99_s": p99}  # fmt: skip


def test_agreement_counts_mismatches_skips_and_bounds() -> None:
    """Mismatched n, missing groups, inf/null exact values and out-of-bound rows are counted."""
    exact = [_row("a", 10, 1.0, 2.0), _row("b", 5, None, "inf"), _row("c", 7, 4.0, 8.0),
             _row("d", 3, 1.0, 1.0)]  # fmt: skip
    other = [_row("a", 10, 1.004, 2.03), _row("b", 5, 1.0, 3.0), _row("c", 8, 4.0, "inf"),
             _row("e", 1, 1.0, 1.0)]  # fmt: skip
    a = bench.agreement(exact, other)
    assert a["keys"] == ["provider", "model", "input_bucket", "output_bucket"]
    assert a["n_mismatch"] == 3  # c's n, d only in exact, e only in other
    assert a["skipped_p50"] == 1
    assert a["skipped_p99"] == 1
    assert math.isinf(a["max_rel_p50"])  # d has no p50 in the other table
    assert math.isinf(a["max_rel_p99"])
    assert (a["outside_p50"], a["outside_p99"]) == (1, 3)  # d's p50; a's, c's and d's p99
    assert a["pass"] is False


def test_agreement_passes_within_one_percent() -> None:
    """Equal n and quantiles within 1 % pass, even beyond a row's own bound."""
    a = bench.agreement([_row("a", 10, 1.0, 2.0)], [_row("a", 10, 1.009, 2.0, bound=0.005)])
    assert a["pass"] is True
    assert a["max_rel_p50"] == pytest.approx(0.009)
    assert a["outside_p50"] == 1
    assert bench.agreement([_row("a", 10, 1.0, 2.0)], [_row("a", 10, 1.011, 2.0)])["pass"] is False


def test_help_lists_every_option() -> None:
    """--help explains the options and the variants measured."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, check=True)  # fmt: skip
    words = ("--rows", "--partitions", "--from", "--workdir", "--reuse", "--keep", "--workers",
             "--repeat", "--json", "--check", "--engine dask", "--sketch")  # fmt: skip
    for word in words:
        assert word in proc.stdout


def test_bad_workers_is_a_usage_error() -> None:
    """--workers 0 is refused with a message naming the option, not a traceback."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--workers", "0"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "--workers wants positive counts" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tailkit") is None, reason="needs the tailkit CLI")
def test_smoke_run_prints_json(tmp_path: Path) -> None:
    """A tiny run measures every variant and prints one JSON document with agreement."""
    pytest.importorskip("distributed")
    cmd = [sys.executable, str(SCRIPT), "--rows", "40000", "--partitions", "4", "--workers", "1",
           "--workdir", str(tmp_path), "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["rows"] == 40_000
    assert [r["variant"] for r in doc["results"]] == ["exact", "sketch", "dask 1"]
    dask = doc["results"][2]
    assert dask["engine"] == "dask"
    assert dask["partitions"] == 4
    assert len(dask["worker_rss_mb"]) == 1
    assert dask["agreement"]["n_mismatch"] == 0
    assert dask["agreement"]["groups"] > 100
    assert not list(tmp_path.glob("part-*.parquet"))  # deleted without --keep
