"""
Calibrate's route samples and tail kinds read a bounded sample of a route, never all its calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailkit.config import Plan, Route, Step, Tokens
from tailkit.ingest import ingest_paths
from tailkit.simulation import load_samples, route_sample
from tailkit.simulation.lowlevel import route_tail_kinds
from tailkit.store import Store


ROUTE = Route("a", "m")
STEP = Step(name="ask", route="a/m", expected_tokens=Tokens(2000, 300))
PLAN = Plan(workflow="w", deadline_s=60.0, routes={"a/m": ROUTE}, steps={"ask": STEP})


def _log(path: Path, *, n: int = 6000, seed: int = 1, reverse: bool = False) -> Path:
    """One route, all in the step's bucket: 3 % cut at 30 s, 2 % errors, 1 % invalid."""
    rng = np.random.default_rng(seed)
    ttft = np.round(np.exp(0.4 * rng.standard_normal(n)), 4)
    total = np.round(ttft + 4.0 * np.exp(0.3 * rng.standard_normal(n)), 4)
    status = rng.choice(["ok", "timeout", "error", "invalid"], size=n, p=[0.94, 0.03, 0.02, 0.01])
    cut = status == "timeout"
    rows: dict[str, Any] = {
        "call_id": [f"c{i}" for i in range(n)],
        "provider": ["a"] * n,
        "model": ["m"] * n,
        "started_at": pa.array(1_790_812_800_000_000 + np.arange(n) * 7_000_000,
                               type=pa.timestamp("us", tz="UTC")),
        "ttft_s": pa.array(np.where(status == "ok", ttft, np.nan), from_pandas=True),
        "total_s": pa.array(np.where(cut, np.nan, np.where(status == "error", 1.5, total)),
                            from_pandas=True),
        "input_tokens": [2000] * n,
        "output_tokens": pa.array(np.where(cut, np.nan, 300.0), from_pandas=True).cast(pa.int64()),
        "status": status.tolist(),
        "censored_at_s": pa.array(np.where(cut, 30.0, np.nan), from_pandas=True),
    }  # fmt: skip
    table = pa.table(rows)
    if reverse:
        table = table.take(pa.array(np.arange(n)[::-1]))
    pq.write_table(table, path)
    return path


def _store(folder: Path, **kwargs: Any) -> Path:
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [_log(folder / "calls.parquet", **kwargs)]).ok
    return db


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one-route log in a store."""
    return _store(tmp_path_factory.mktemp("bounded"))


class _Counting:
    """
    A store whose reads record how many rows each returned.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rows: list[int] = []

    def arrow(self, sql: str) -> pa.Table:
        table = self.store.arrow(sql)
        self.rows.append(table.num_rows)
        return table

    def fetchall(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        rows = self.store.fetchall(sql, params)
        self.rows.append(len(rows))
        return rows

    def fetchone(self, sql: str, params: Any = None) -> tuple[Any, ...] | None:
        self.rows.append(1)
        return self.store.fetchone(sql, params)


def test_sample_holds_at_most_its_size_with_exact_counts(db: Path) -> None:
    """500 of a bucket's 5,600 finished calls, their share of cut calls; exact counts and rates."""
    with Store.open(db, read_only=True) as store:
        full = route_sample(store, ROUTE, STEP)
        small = route_sample(store, ROUTE, STEP, sample_size=500)
        bucket = store.fetchone(
            "SELECT count(*) FILTER (status = 'ok'), count(*) FILTER (status = 'timeout'), "
            "count(*) FILTER (status = 'error'), count(*) FILTER (status = 'invalid'), "
            "count(*), median(total_s) FILTER (status = 'ok') FROM calls"
        )
    assert full is not None
    assert small is not None
    assert bucket is not None
    ok, cut, errors, invalid, n, median = bucket
    assert full.total_s.size == full.calls == ok + cut  # every call when it fits
    assert small.total_s.size <= 500 + round(cut * 500 / ok)
    assert 500 < ok
    assert (
        (small.calls, small.censored) == (full.calls, full.censored) == (ok + cut, cut / (ok + cut))
    )
    assert small.error_rate == full.error_rate == errors / n
    assert small.invalid_rate == full.invalid_rate == invalid / (invalid + ok)
    assert small.quantile(0.5) == pytest.approx(median, rel=0.05)
    # the cut calls keep their share of the sample
    assert small.measured is not None
    assert np.isnan(small.measured[0]).mean() == pytest.approx(cut / (ok + cut), abs=0.005)


def test_no_store_read_returns_more_rows_than_the_sample(db: Path) -> None:
    """Loading a route's sample and its tail kind never lists every call of the route."""
    with Store.open(db, read_only=True) as store:
        counting = _Counting(store)
        samples = load_samples(counting, PLAN, sample_size=500)  # type: ignore[arg-type]
        kinds = route_tail_kinds(counting, PLAN, ["a/m"], sample_size=500)  # type: ignore[arg-type]
    assert samples[("ask", "a/m")].calls > 5000
    assert kinds["a/m"].kind in ("transient", "work", "mixed", "unknown")
    assert max(counting.rows) <= 500


def test_sample_is_the_same_whatever_the_ingest_order(db: Path, tmp_path: Path) -> None:
    """The same calls ingested in reverse order give the same sample and the same verdict."""
    reversed_db = _store(tmp_path, reverse=True)
    got = []
    for path in (db, reversed_db):
        with Store.open(path, read_only=True) as store:
            sample = route_sample(store, ROUTE, STEP, sample_size=500, seed=4)
            kind = route_tail_kinds(store, PLAN, ["a/m"], sample_size=700)["a/m"]
        assert sample is not None
        got.append((sample, kind))
    (first, kind_a), (second, kind_b) = got
    np.testing.assert_array_equal(first.total_s, second.total_s)
    np.testing.assert_array_equal(first.ttft_s, second.ttft_s)
    np.testing.assert_array_equal(first.error_s, second.error_s)
    assert (kind_a.kind, kind_a.sentence) == (kind_b.kind, kind_b.sentence)


def test_another_seed_draws_another_sample(db: Path) -> None:
    """The sample is seeded: another seed picks other calls, the same seed the same ones."""
    with Store.open(db, read_only=True) as store:
        a, b, c = (route_sample(store, ROUTE, STEP, sample_size=500, seed=s) for s in (1, 1, 2))
    assert a is not None
    assert b is not None
    assert c is not None
    np.testing.assert_array_equal(a.total_s, b.total_s)
    assert not np.array_equal(a.total_s, c.total_s)


def test_rare_cut_calls_round_to_none_in_a_small_output_bucket(tmp_path: Path) -> None:
    """Cut calls too rare for a share of the bucket's sample add none (not all of them)."""
    rng = np.random.default_rng(5)
    n = 5200
    out = np.where(np.arange(n) < 5000, 100, 400)  # the step's bucket (256-600) has 200
    status = np.where(np.arange(n) % 1000 == 999, "timeout", "ok")  # 5 cut calls
    cut = status == "timeout"
    total = np.exp(1.0 + 0.3 * rng.standard_normal(n))
    path = tmp_path / "calls.parquet"
    pq.write_table(
        pa.table(
            {
                "call_id": [f"c{i}" for i in range(n)],
                "provider": ["a"] * n,
                "model": ["m"] * n,
                "total_s": pa.array(np.where(cut, np.nan, total), from_pandas=True),
                "input_tokens": [2000] * n,
                "output_tokens": pa.array(np.where(cut, np.nan, out), from_pandas=True).cast(
                    pa.int64()
                ),
                "status": status.tolist(),
                "censored_at_s": pa.array(np.where(cut, 30.0, np.nan), from_pandas=True),
            }
        ),
        path,
    )
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [path]).ok
        sample = route_sample(store, ROUTE, STEP)
    assert sample is not None
    # round(5 cut x 200 in the bucket / 5195 finished) = 0, where all 5 used to be added
    assert (sample.calls, sample.censored, sample.measured) == (200, 0.0, None)
    assert sample.quantile(0.999) < 30.0


def test_sample_size_below_two_is_refused(db: Path) -> None:
    """A sample needs two finished calls: a smaller size is a configuration error."""
    from tailkit.errors import ConfigError

    with Store.open(db, read_only=True) as store, pytest.raises(ConfigError, match="sample_size"):
        route_sample(store, ROUTE, STEP, sample_size=1)


def test_steps_loaded_together_get_what_each_gets_alone(db: Path) -> None:
    """One batch for a bucketed step and an any-bucket step on one route: each as alone."""
    anywhere = Step(name="any", route="a/m", expected_tokens=Tokens(None, None))
    plan = Plan(
        workflow="w", deadline_s=60.0, routes={"a/m": ROUTE}, steps={"ask": STEP, "any": anywhere}
    )
    with Store.open(db, read_only=True) as store:
        together = load_samples(store, plan, sample_size=500, seed=3)
        alone = {
            s.name: route_sample(store, ROUTE, s, sample_size=500, seed=3) for s in (STEP, anywhere)
        }
    for name in ("ask", "any"):
        one, both = alone[name], together[(name, "a/m")]
        assert one is not None
        assert (both.calls, both.censored, both.error_rate) == (
            one.calls,
            one.censored,
            one.error_rate,
        )
        assert both.measured is not None
        assert one.measured is not None
        np.testing.assert_array_equal(both.measured[1], one.measured[1])  # the same cut ages
