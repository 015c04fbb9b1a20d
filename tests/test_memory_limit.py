"""
``--memory-limit`` and ``Store.open(memory_limit=)``: DuckDB's memory limit, from each command.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any

import duckdb
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import StoreError
from tailkit.store import Store

from .conftest import ROOT


runner = CliRunner()


def _duckdb_says(limit: str) -> str:
    """
    The memory limit a bare DuckDB connection reports after ``SET memory_limit``.
    """
    with duckdb.connect() as con:
        con.execute(f"SET memory_limit = '{limit}'")
        row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert row is not None
    return str(row[0])


def test_store_open_sets_duckdb_memory_limit(tmp_path: Path) -> None:
    """Store.open(memory_limit=) is what DuckDB reports; without it DuckDB keeps its default."""
    with Store.open(tmp_path / "a.duckdb", memory_limit="300MB") as store:
        assert store.fetchone("SELECT current_setting('memory_limit')") == (_duckdb_says("300MB"),)
    with Store.open(tmp_path / "a.duckdb", read_only=True) as store, duckdb.connect() as bare:
        default = bare.execute("SELECT current_setting('memory_limit')").fetchone()
        assert store.fetchone("SELECT current_setting('memory_limit')") == default


def test_bad_memory_limit_names_the_value_and_the_fix(tmp_path: Path) -> None:
    """A value DuckDB cannot read is a StoreError naming it; no file is left open."""
    with pytest.raises(StoreError, match=r"memory limit 'lots' is not a size.*e\.g\. "):
        Store.open(tmp_path / "b.duckdb", memory_limit="lots")
    with Store.open(tmp_path / "b.duckdb") as store:  # not locked by the failed open
        assert store.counts()["calls"] == 0


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """
    The memory limit DuckDB reports on every store a command opens.
    """
    seen: list[str] = []
    real = Store.open.__func__  # type: ignore[attr-defined]

    def spy(cls: type[Store], *args: Any, **kwargs: Any) -> Store:
        store: Store = real(cls, *args, **kwargs)
        row = store.fetchone("SELECT current_setting('memory_limit')")
        seen.append(str(row[0]) if row else "")
        return store

    monkeypatch.setattr(Store, "open", classmethod(spy))
    return seen


def test_ingest_and_stats_pass_memory_limit(tmp_path: Path, limits: list[str]) -> None:
    """ingest, stats and stats --source run DuckDB under --memory-limit."""
    log = ROOT / "data_samples" / "production" / "calls.parquet"
    db = str(tmp_path / "s.duckdb")
    commands = (
        ["ingest", str(log), "--db", db, "-q", "--memory-limit", "400MB"],
        ["stats", "--db", db, "--json", "--memory-limit", "500MB"],
        ["stats", "--source", str(log), "--json", "--memory-limit", "600MB"],
    )
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["table"]
    assert limits == [_duckdb_says(v) for v in ("400MB", "500MB", "600MB")]


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "x.jsonl"],
        ["stats"],
        ["stats", "--source", "x.jsonl"],
        ["calibrate", str(ROOT / "data_samples" / "workflow.yaml"), "--out", "plan.yaml"],
        ["simulate", str(ROOT / "data_samples" / "workflow.yaml")],
    ],
)
def test_every_command_refuses_a_bad_memory_limit(tmp_path: Path, args: list[str]) -> None:
    """ingest, stats, calibrate and simulate hand --memory-limit to DuckDB, which refuses it."""
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    log = tmp_path / "x.jsonl"
    log.write_text('{"model": "m", "total_s": 1.0}\n')
    args = [str(log) if a == "x.jsonl" else a for a in args]
    args = [str(tmp_path / a) if a == "plan.yaml" else a for a in args]
    db_args = [] if "--source" in args else ["--db", str(db)]
    result = runner.invoke(app, [*args, *db_args, "--memory-limit", "lots"])
    assert result.exit_code == 1, result.output
    assert "memory limit 'lots' is not a size DuckDB understands" in result.stderr
    assert "Traceback" not in result.output


def test_out_of_memory_names_the_option_and_the_limit(tmp_path: Path) -> None:
    """
    A query beyond DuckDB's memory limit is an error naming --memory-limit, not DuckDB's text.
    """
    from tailkit.errors import OutOfMemoryError

    with Store.open(tmp_path / "s.duckdb", memory_limit="32MB") as store:
        store.execute("SET preserve_insertion_order = false")
        with pytest.raises(OutOfMemoryError) as caught:
            store.fetchall(
                "SELECT list(i) FROM (SELECT i, i % 7 AS g FROM range(30000000) t(i)) GROUP BY g"
            )

    assert "DuckDB ran out of memory (memory limit " in str(caught.value)
    assert "raise memory_limit (e.g. 4GB) or free memory" in str(caught.value)


def test_the_store_answers_after_running_out_of_memory(tmp_path: Path) -> None:
    """
    After a query ran out of memory, the next one runs: stats falls back to a lighter query.

    Naming the memory limit once read DuckDB's setting without draining the result, and DuckDB
    2 then refused every later query on the connection ("unfinished result from execute()"),
    which hid the out-of-memory error behind another and broke the fallback.
    """
    from tailkit.errors import OutOfMemoryError

    with Store.open(tmp_path / "s.duckdb", memory_limit="32MB") as store:
        store.execute("SET preserve_insertion_order = false")
        heavy = "SELECT list(i) FROM (SELECT i, i % 7 AS g FROM range(30000000) t(i)) GROUP BY g"
        for run in (store.arrow, store.fetchall):
            with pytest.raises(OutOfMemoryError):
                run(heavy)
            assert store.arrow("SELECT 42 AS a").to_pylist() == [{"a": 42}]
            assert store.fetchall("SELECT 43") == [(43,)]
