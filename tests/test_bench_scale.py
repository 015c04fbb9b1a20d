"""
Smoke tests of benchmarks/scale.py's log generator: schema, seeded determinism, realistic shares.

No timing: the benchmark's figures are measured by running it, not here.
"""

from __future__ import annotations

import importlib.util
import json
import sys

from pathlib import Path
from types import ModuleType

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tailkit.ingest import ingest_paths
from tailkit.store import Store


ROWS = 10_000


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module
    spec.loader.exec_module(module)
    return module


scale = _load()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 10,000-row log written in three chunks, Parquet and JSON lines."""
    out = tmp_path_factory.mktemp("scale")
    return scale.write_log(out, ROWS, 7, jsonl=True, chunk=4_000)  # type: ignore[no-any-return]


def test_schema_and_order(log: dict[str, Path]) -> None:
    """The Parquet file has the call-record schema, every row, unique ids and time order."""
    table = pq.read_table(log["parquet"])
    assert scale.SCHEMA == table.schema
    assert ROWS == table.num_rows
    assert ROWS == pc.count_distinct(table["call_id"]).as_py()
    starts = table["started_at"].cast("int64").to_numpy()
    assert (starts[1:] >= starts[:-1]).all()
    assert 3 == pq.ParquetFile(log["parquet"]).num_row_groups


def test_seeded_determinism(tmp_path: Path) -> None:
    """The same seed gives the same rows; another seed other rows."""
    a = scale.write_log(tmp_path / "a", 3_000, 11, jsonl=False, chunk=1_000)["parquet"]
    b = scale.write_log(tmp_path / "b", 3_000, 11, jsonl=False, chunk=1_000)["parquet"]
    c = scale.write_log(tmp_path / "c", 3_000, 12, jsonl=False, chunk=1_000)["parquet"]
    assert pq.read_table(a).equals(pq.read_table(b))
    assert not pq.read_table(a).equals(pq.read_table(c))


def test_realistic_shares(log: dict[str, Path]) -> None:
    """8 providers x 6 models, mostly ok calls, some failures, cut calls, retries and hedges."""
    t = pq.read_table(log["parquet"]).to_pylist()
    assert 8 == len({r["provider"] for r in t})
    assert 6 == len({r["model"] for r in t})
    share = {s: sum(r["status"] == s for r in t) / ROWS for s in scale.STATUSES}
    assert 0.95 < share["ok"] < 0.995
    assert 0.002 < share["error"] < 0.03
    assert 0 < share["timeout"] < 0.02  # cut calls: no total, censored at the 90 s cap
    cut = [r for r in t if r["status"] == "timeout"]
    assert all(r["total_s"] is None and r["censored_at_s"] == 90.0 for r in cut)
    ok = [r for r in t if r["status"] == "ok"]
    assert all(r["total_s"] > 0 and r["output_tokens"] >= 1 for r in ok)
    assert all(r["ttft_s"] <= r["total_s"] for r in ok if r["ttft_s"] is not None)
    roles = {role: sum(r["role"] == role for r in t) for role in ("primary", "retry", "hedge")}
    assert roles["retry"] > 0
    assert roles["hedge"] > 0
    assert roles["primary"] > 0.9 * ROWS
    totals = sorted(r["total_s"] for r in ok)
    assert totals[int(0.99 * len(totals))] > 4 * totals[len(totals) // 2]  # a heavy tail


def test_jsonl_matches_parquet(log: dict[str, Path]) -> None:
    """The JSON-lines copy holds the same rows as the Parquet file."""
    lines = log["jsonl"].read_text().splitlines()
    assert ROWS == len(lines)
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    table = pq.read_table(log["parquet"])
    assert table["call_id"][0].as_py() == first["call_id"]
    assert table["call_id"][-1].as_py() == last["call_id"]
    assert table["total_s"][-1].as_py() == last["total_s"]


def test_tailkit_stores_every_row(log: dict[str, Path], tmp_path: Path) -> None:
    """Ingest stores every generated row of both files, none rejected."""
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest_paths(store, [log["parquet"]])
        assert report.ok
        assert ROWS == report.totals()["stored"]
    with Store.open(tmp_path / "j.duckdb") as store:
        report = ingest_paths(store, [log["jsonl"]])
        assert report.ok
        assert ROWS == report.totals()["stored"]
