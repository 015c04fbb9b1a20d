"""
`tailkit stats --source`: the table straight from files equals ingest + stats on them.
"""

from __future__ import annotations

import csv
import json
import math
import random

from pathlib import Path
from typing import Any

import duckdb
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import IngestError, UnitError
from tailkit.ingest import open_in_place

from .conftest import CORPUS


runner = CliRunner()

_FIELDS = ("call_id", "provider", "model", "started_at", "ttft_s", "total_s", "input_tokens",
           "output_tokens", "status")  # fmt: skip


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    """
    Seeded calls over two routes, lognormal latencies, a few failures.
    """
    rng = random.Random(seed)  # noqa: S311 - seeded test data
    rows = []
    for i in range(n):
        provider, model = rng.choice([("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4")])
        total = round(rng.lognormvariate(0.5, 0.6), 4)
        rows.append(
            {"call_id": f"{seed}-{i}", "provider": provider, "model": model,
             "started_at": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
             "ttft_s": round(total * 0.2, 4), "total_s": total,
             "input_tokens": rng.randrange(100, 9000), "output_tokens": rng.randrange(10, 900),
             "status": "ok" if rng.random() > 0.03 else "error"}
        )  # fmt: skip
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    source = _write_jsonl(path.with_suffix(".tmp.jsonl"), rows)
    with duckdb.connect() as con:
        con.execute(
            f"COPY (SELECT * REPLACE (started_at::TIMESTAMPTZ AS started_at) FROM "
            f"read_json('{source}')) TO '{path}' (FORMAT parquet)"
        )
    source.unlink()
    return path


def _same(a: Any, b: Any) -> bool:
    """
    Equal, floats to 1e-9 relative.

    Several files reach a fit in another summation order, and calls read in place take their
    TTFT and generation quantiles from bands (the last bit may differ).
    """
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _stats(*args: str) -> Any:
    result = runner.invoke(app, ["stats", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _ingested(tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()) -> Any:
    db = tmp_path / "store.duckdb"
    done = runner.invoke(app, ["ingest", *map(str, files), "--db", str(db), "-q", *extra])
    assert done.exit_code == 0, done.output
    return _stats("--db", str(db))


@pytest.mark.parametrize("writer", [_write_parquet, _write_jsonl, _write_csv])
def test_source_equals_ingest_then_stats(tmp_path: Path, writer: Any) -> None:
    """The table from a Parquet, JSONL or CSV file read in place is the ingested store's table."""
    suffix = {_write_parquet: ".parquet", _write_jsonl: ".jsonl", _write_csv: ".csv"}[writer]
    path = writer(tmp_path / f"calls{suffix}", _rows(3000, seed=1))
    in_place = _stats("--source", str(path))
    assert _same(in_place, _ingested(tmp_path, path))
    assert in_place["table"]


def test_source_globs_and_repeats_read_every_file(tmp_path: Path) -> None:
    """A glob and a repeated --source read all the files they name, of mixed formats, once."""
    (tmp_path / "logs").mkdir()
    a = _write_parquet(tmp_path / "logs" / "a.parquet", _rows(1500, seed=2))
    b = _write_parquet(tmp_path / "logs" / "b.parquet", _rows(1500, seed=3))
    c = _write_jsonl(tmp_path / "c.jsonl", _rows(1000, seed=4))
    glob = str(tmp_path / "logs" / "*.parquet")
    in_place = _stats("--source", glob, "--source", str(c), "--source", str(a))
    assert _same(in_place, _ingested(tmp_path, a, b, c))
    assert not _same(in_place, _stats("--source", str(c)))
    assert sum(row["n"] for row in in_place["table"]) == 4000


def test_source_takes_map_set_and_unit(tmp_path: Path) -> None:
    """--map, --set and --unit read a file in place as they make ingest read it."""
    rows = [
        {"latency_ms": r["total_s"] * 1000, "model": r["model"], "in": r["input_tokens"],
         "out": r["output_tokens"]}
        for r in _rows(2000, seed=5)
    ]  # fmt: skip
    path = _write_jsonl(tmp_path / "ms.jsonl", rows)
    options = ("--map", "total_s=latency_ms", "--map", "input_tokens=in", "--map",
               "output_tokens=out", "--unit", "ms", "--set", "provider=acme")  # fmt: skip
    in_place = _stats("--source", str(path), *options)
    assert _same(in_place, _ingested(tmp_path, path, extra=options))
    assert {row["provider"] for row in in_place["table"]} == {"acme"}


def test_rejected_rows_are_left_out_and_summarized(tmp_path: Path) -> None:
    """Rows ingest would reject are left out of the table and counted on stderr by reason."""
    rows = _rows(2000, seed=6)
    for row in rows[:7]:
        row["total_s"] = -1.0
    for row in rows[7:9]:
        row["model"] = ""
    path = _write_csv(tmp_path / "bad.csv", rows)
    result = runner.invoke(app, ["stats", "--source", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "9 of 2,000 rows rejected, most often total_s_negative (7), and left out of the "
        "table; tailkit ingest shows them\n"
    )
    assert _same(json.loads(result.stdout), _ingested(tmp_path, path))


def test_malformed_csv_lines_count_as_rejected() -> None:
    """A CSV line the reader cannot split is counted as rejected, as ingest rejects it."""
    store, read = open_in_place([CORPUS / "bad_rows.csv"])
    with store:
        assert read.reasons() == {"malformed_row": 2, "total_s_not_a_number": 1}
        assert (read.rows_in, read.rejected) == (5, 3)
        assert store.fetchall("SELECT count(*) FROM calls") == [(2,)]


def test_milliseconds_without_unit_are_refused(tmp_path: Path) -> None:
    """A file whose durations look like milliseconds is refused in place as by ingest."""
    rows = [{**r, "total_s": r["total_s"] * 1000, "ttft_s": None} for r in _rows(300, seed=8)]
    path = _write_jsonl(tmp_path / "ms.jsonl", rows)
    with pytest.raises(UnitError, match="look like milliseconds"):
        open_in_place([path])
    result = runner.invoke(app, ["stats", "--source", str(path)])
    assert result.exit_code == 1
    assert "pass --unit ms" in result.stderr


def test_fast_reader_refusal_falls_back(tmp_path: Path) -> None:
    """A value the typed reader refuses late in a file makes a reject, not a failed read."""
    rows: list[dict[str, Any]] = list(_rows(12000, seed=9))
    rows[-1]["input_tokens"] = "many"
    path = _write_jsonl(tmp_path / "late.jsonl", rows)
    store, read = open_in_place([path])
    with store:
        assert read.reasons() == {"input_tokens_not_a_number": 1}
        assert store.fetchall("SELECT count(*) FROM calls") == [(11999,)]


def test_source_errors(tmp_path: Path) -> None:
    """Bad globs, missing files and --source with --db are refused with the fix, exit 1."""
    path = _write_jsonl(tmp_path / "ok.jsonl", _rows(100, seed=10))
    cases = {
        ("--source", str(tmp_path / "*.parquet")): "*.parquet: pattern matches no files",
        ("--source", str(tmp_path / "gone.jsonl")): "gone.jsonl: no such file or folder",
        ("--source", str(path), "--db", "x.duckdb"): "--source and --db are exclusive",
        ("--map", "total_s=x"): "--map says how to read files: use it with --source",
        ("--source", str(path), "--format", "nope"): "--format must be auto or one of",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["stats", *args])
        assert result.exit_code == 1, args
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output
    with pytest.raises(IngestError, match="no such file"):
        open_in_place([tmp_path / "gone.jsonl"])


def test_approx_options_reach_tail_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--approx passes approx=True; --approx-above N passes it when more than N calls are read."""
    import tailkit.engines._stats as stats_module  # where stats_from calls tail_report

    real = stats_module.tail_report
    seen: list[bool] = []

    def spy(
        store: Any, query: Any, *, min_group: int = 1, approx: bool = False, fits: bool = True
    ) -> Any:
        seen.append(approx)
        return real(store, query, min_group=min_group, fits=fits)

    monkeypatch.setattr(stats_module, "tail_report", spy)
    path = str(_write_jsonl(tmp_path / "a.jsonl", _rows(500, seed=11)))
    for extra in ((), ("--approx",), ("--approx-above", "499"), ("--approx-above", "500")):
        _stats("--source", path, *extra)
    db = tmp_path / "s.duckdb"
    runner.invoke(app, ["ingest", path, "--db", str(db), "-q"])
    _stats("--db", str(db), "--approx-above", "10", "--where", "provider = 'openai'")
    assert seen == [False, True, True, False, True]
