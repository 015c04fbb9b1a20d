"""
One quantile definition: the optimizer's cutoff grid, the tail table and the fits agree.
"""

from __future__ import annotations

import json
import math

from pathlib import Path

import numpy as np
import pytest

from hypothesis import given
from hypothesis import strategies as st

import tailkit

from tailkit.calibration.lowlevel import StepOptions, candidates
from tailkit.config import parse_plan
from tailkit.fit import QUANTILE_METHODS, empirical_quantiles, quantile
from tailkit.fit.lowlevel import sorted_quantiles
from tailkit.ingest import ingest_paths
from tailkit.simulation import load_samples
from tailkit.store import Store


PLAN = """
tailkit_plan: 1
workflow: one
deadline_s: 60
hedge_budget: 0.1
routes:
  a/m: {provider: a, model: m}
steps:
  ask:
    route: a/m
"""


def test_the_cutoff_grid_p95_is_the_p95_tailkit_stats_prints(tmp_path: Path) -> None:
    """The calibrate grid's p95 cutoff of a route is the p95 of `tailkit.stats` for its calls."""
    rng = np.random.default_rng(7)
    log = tmp_path / "calls.jsonl"
    # 203 calls: 0.95 * 203 is not a whole rank, so type 7 and sorted[int(q n)] differ
    with log.open("w", encoding="utf-8") as out:
        for i, total in enumerate(rng.lognormal(1.0, 0.6, 203)):
            row = {
                "call_id": f"c{i}", "provider": "a", "model": "m", "input_tokens": 1000,
                "output_tokens": 200, "status": "ok", "total_s": round(float(total), 4),
            }  # fmt: skip
            out.write(json.dumps(row) + "\n")
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [log]).ok
        table = tailkit.stats(store, by=("provider", "model"), bucket=())
        sample = load_samples(store, parse_plan(PLAN), min_calls=2)[("ask", "a/m")]
    printed = float(table["p95_s"][0])
    grid = [c for c in candidates(sample, StepOptions()) if c.quantile == 0.95]
    assert grid, "the grid has a p95 candidate"
    assert all(c.cutoff_s == pytest.approx(printed, rel=1e-12) for c in grid)
    assert sample.quantile(0.95) == pytest.approx(printed, rel=1e-12)


@given(
    st.lists(st.floats(0.001, 1e4), min_size=1, max_size=300),
    st.floats(0.01, 0.99),
)
def test_quantile_is_the_point_estimate_of_the_fits(values: list[float], q: float) -> None:
    """`quantile` (linear) equals empirical_quantiles and sorted_quantiles on any sample."""
    x = np.sort(np.asarray(values))
    fitted = empirical_quantiles(x, qs=[q])[0].value
    value, _, _ = sorted_quantiles(
        x, np.zeros(1, np.int64), np.array([x.size]), np.array([q]), 0.05
    )
    assert quantile(x, q) == fitted == float(value[0, 0])
    assert quantile(x, q, presorted=True) == fitted


@given(
    st.lists(st.floats(0.001, 1e4), min_size=1, max_size=300),
    st.floats(0.0, 1.0),
    st.sampled_from(QUANTILE_METHODS),
)
def test_presorted_quantiles_are_numpys(values: list[float], q: float, method: str) -> None:
    """Every named method reads a sorted sample as numpy computes it, bit for bit."""
    x = np.sort(np.asarray(values))
    expected = float(np.quantile(x, q, method=method))  # type: ignore[call-overload]
    assert quantile(x, q, method=method, presorted=True) == expected
    assert math.isfinite(expected)
