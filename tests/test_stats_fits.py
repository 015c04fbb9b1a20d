"""
What the default tail table computes, and what moved behind ``stats --fits`` (issue 31).

The family ranking and the transient-tail mixture are computed only with ``fits``; every other
column is the same either way, the JSON says where the moved columns are, and the routes are
judged on a thread of their own with the same verdicts.
"""

from __future__ import annotations

import json
import math
import threading

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.fit.lowlevel import goodness_of_fit_many
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tailkit.tails import FIT_COLUMNS, TableQuery, tail_report

from .conftest import LLMPERF


@pytest.fixture(scope="module")
def llmperf_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    A store holding the llmperf leaderboard data.
    """
    db = tmp_path_factory.mktemp("llmperf-fits") / "s.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, [LLMPERF])
    return db


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15)
    return bool(a == b)


def test_without_fits_no_mixture_is_fitted_and_the_rest_is_unchanged(
    llmperf_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    fits=False never calls the mixture fit; its columns are null, every other one as with fits.
    """
    query = TableQuery(by=("provider", "model"))
    with Store.open(llmperf_db, read_only=True) as store:
        full = tail_report(store, query, fits=True)
        import tailkit.tails._table as table_module

        def refuse(*_: Any, **__: Any) -> Any:
            msg = "the mixture was fitted without fits"
            raise AssertionError(msg)

        monkeypatch.setattr(table_module, "fit_transient_tails", refuse)
        lean = tail_report(store, query, fits=False)

    assert full.fits
    assert not lean.fits
    assert full.table.columns == lean.table.columns
    for column in FIT_COLUMNS:
        assert lean.table[column].null_count() == len(lean.table)
    assert full.table["transient_share"].null_count() < len(full.table)
    rest = [c for c in full.table.columns if c not in FIT_COLUMNS and c != "transient"]
    for a, b in zip(full.table.select(rest).rows(), lean.table.select(rest).rows(), strict=True):
        assert all(_same(x, y) for x, y in zip(a, b, strict=True)), (a, b)
    assert full.verdicts.equals(lean.verdicts)


def test_goodness_of_fit_without_families_keeps_the_test() -> None:
    """
    Without families: the same statistic, p-value and verdict; no ranking, lognormal alone.
    """
    rng = np.random.default_rng(3)
    samples: list[tuple[Any, Any]] = [
        (rng.lognormal(0.0, 0.5, 500), None),
        (rng.gamma(2.0, 1.0, 800), None),
        (np.r_[rng.lognormal(1.0, 0.3, 300), [np.nan] * 30], np.r_[[np.nan] * 300, [9.0] * 30]),
        (np.r_[rng.lognormal(1.0, 0.3, 300), [np.nan] * 5], np.r_[[np.nan] * 300, [9.0] * 5]),
        (rng.lognormal(0.0, 0.5, 5), None),
    ]
    ranked = goodness_of_fit_many(samples)
    lean = goodness_of_fit_many(samples, families=False)

    for a, b in zip(ranked, lean, strict=True):
        assert (a.verdict, a.method, a.n) == (b.verdict, b.method, b.n)
        assert _same(a.statistic, b.statistic)
        assert _same(a.p_value, b.p_value)
        assert b.best_family == ""
        assert [f.family for f in b.families] in ([], ["lognormal"])
    assert any(len(a.families) == 4 for a in ranked)


def test_stats_json_says_where_the_fits_are(llmperf_db: Path) -> None:
    """
    The JSON names the moved columns under "fits"; ``stats --fits`` computes them.
    """
    runner = CliRunner()
    base = ["stats", "--db", str(llmperf_db), "--bucket", "none", "--json"]
    lean = json.loads(runner.invoke(app, base).stdout)
    full = json.loads(runner.invoke(app, [*base, "--fits"]).stdout)

    assert lean["fits"]["computed"] is False
    assert "--fits" in lean["fits"]["note"]
    assert full["fits"]["computed"] is True
    assert lean["fits"]["columns"] == list(FIT_COLUMNS) == full["fits"]["columns"]
    assert all(row["transient_share"] is None for row in lean["table"])
    assert any(row["transient_share"] is not None for row in full["table"])
    assert any(row["best_family"] for row in full["table"])


def test_routes_are_judged_on_another_thread_with_the_same_verdicts(
    llmperf_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The verdicts run on a thread of their own, and agree with verdicts judged inline.
    """
    import tailkit.tails._verdicts as verdicts_module

    real = verdicts_module.tail_kind
    threads: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(verdicts_module, "tail_kind", spy)
    query = TableQuery(by=("provider", "model"))
    with Store.open(llmperf_db, read_only=True) as store:
        background = tail_report(store, query, fits=False).verdicts
        called = list(threads)
        monkeypatch.setattr(verdicts_module.RouteAccumulator, "__init__", _inline(verdicts_module))
        inline = tail_report(store, query, fits=False).verdicts

    assert called
    assert any(name.startswith("tailkit-routes") for name in called)
    assert isinstance(inline, pl.DataFrame)
    assert background.equals(inline)


def _inline(module: Any) -> Any:
    init = module.RouteAccumulator.__init__

    def without_thread(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "background": False})

    return without_thread
