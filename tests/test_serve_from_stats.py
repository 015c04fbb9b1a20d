"""
``serve --from-stats``: what a replayed route draws, against the stats table it came from.
"""

from __future__ import annotations

import itertools
import math
import random

from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest

from hypothesis import given
from hypothesis import strategies as st

import tailkit

from tailkit.serve import ModelProfile, profile_from_stats
from tailkit.serve._draw import draw
from tailkit.serve._grid import GRID_SIZE, QuantileCurve, grid


DRAWS = 20_000
SEED = 17


def _draws(profile: ModelProfile, n: int = DRAWS) -> tuple[list[float], list[float]]:
    """
    ``n`` requests' intended TTFT and total (profile seconds), from one seeded generator.
    """
    rng = random.Random(SEED)  # noqa: S311 - a seeded draw, not cryptography
    firsts, totals = [], []
    for _ in range(n):
        drawn = draw(rng, profile, time_scale=1.0, max_tokens=None)
        assert drawn.intended_ttft_s is not None
        assert drawn.intended_total_s is not None
        firsts.append(drawn.intended_ttft_s)
        totals.append(drawn.intended_total_s)
    return firsts, totals


def _tolerance(q: float, n: int = DRAWS) -> float:
    """
    How far the share of draws at or below a quantile may be from ``q``.

    Four standard errors of a share of ``n`` draws (a chance of about 6e-5 per check), plus
    one grid step: the table holds the curve at ``GRID_SIZE`` probabilities only.
    """
    return 4 * math.sqrt(q * (1 - q) / n) + 1 / GRID_SIZE


@pytest.fixture(scope="module")
def llmperf_rows(llmperf_db: Path) -> list[dict[str, Any]]:
    """
    ``tailkit stats --by provider,model --bucket none`` rows of the llmperf sample.
    """
    rows: list[dict[str, Any]] = tailkit.stats(
        llmperf_db, by=("provider", "model"), bucket=()
    ).to_dicts()
    return rows


@pytest.mark.slow
def test_every_llmperf_route_replays_its_measured_quantiles(
    llmperf_rows: list[dict[str, Any]],
) -> None:
    """
    Each route's drawn p50/p90/p95/p99 total and p50/p99 TTFT sit at the stats table's.
    """
    config = profile_from_stats(llmperf_rows)
    measured = {f"{r['provider']}/{r['model']}": r for r in llmperf_rows if r["p50_s"]}
    columns = {"p50_s": 0.5, "p90_s": 0.9, "p95_s": 0.95, "p99_s": 0.99}
    columns_ttft = {"ttft_p50_s": 0.5, "ttft_p99_s": 0.99}

    assert 19 == len(measured)
    assert sorted(measured) == sorted(config.models)
    misses = []
    worst = dict.fromkeys(("p50_s", "p90_s"), 0.0)
    for name, profile in config.models.items():
        firsts, totals = _draws(profile)
        for drawn, wanted in ((totals, columns), (firsts, columns_ttft)):
            ordered = sorted(drawn)
            for column, q in wanted.items():
                value = measured[name][column]
                share = sum(x <= value for x in drawn) / len(drawn)
                if abs(share - q) > _tolerance(q):
                    misses.append(f"{name} {column}: {share:.4f} of draws <= {value:.3f} s")
                if column in worst:
                    got = ordered[int(q * len(ordered))]
                    worst[column] = max(worst[column], abs(got / value - 1))
        assert all(f <= t for f, t in zip(firsts, totals, strict=True))
    assert [] == misses
    # the README's figure for p50 and p90, in seconds: within 1 % (measured: 0.3 %)
    assert max(worst.values()) < 0.01, worst


def test_a_route_split_by_token_bucket_is_the_mixture_of_its_rows() -> None:
    """
    Rows of one route (token buckets) are mixed by their calls, not refused.
    """
    rows = [
        {"provider": "p", "model": "m", "output_bucket": "0-64", "n": 300, "n_ok": 300,
         "p50_s": 1.0, "p99_s": 1.2, "sigma": 0.05},
        {"provider": "p", "model": "m", "output_bucket": "64-256", "n": 120, "n_ok": 100,
         "censored_share": 0.0, "p50_s": 10.0, "p99_s": 12.0, "sigma": 0.05},
    ]  # fmt: skip

    config = profile_from_stats(rows)

    assert ["p/m"] == list(config.models)
    _, totals = _draws(config.models["p/m"])
    share_fast = sum(t < 5.0 for t in totals) / len(totals)
    assert abs(share_fast - 0.75) <= _tolerance(0.75)  # 300 calls against 100


def test_a_spiky_tail_is_not_extrapolated_to_thousands_of_seconds() -> None:
    """
    Past a p99 set by a few spikes, the curve is no steeper than its average from the median.
    """
    rows = [{"model": "m", "p50_s": 1.6, "p90_s": 1.8, "p95_s": 2.1, "p99_s": 54.0}]

    table = profile_from_stats(rows).models["m"].outcomes

    assert table is not None
    average = math.log(54.0 / 1.6) / NormalDist().inv_cdf(0.99)
    top = NormalDist().inv_cdf(1 - 0.5 / GRID_SIZE) - NormalDist().inv_cdf(0.99)
    assert max(table.total_s) == pytest.approx(54.0 * math.exp(average * top))
    assert max(table.total_s) < 250


@given(
    median=st.floats(0.01, 100.0),
    sigma=st.floats(0.01, 2.0),
    p=st.floats(0.001, 0.999),
)
def test_a_curve_through_lognormal_quantiles_is_that_lognormal(
    median: float, sigma: float, p: float
) -> None:
    """
    Through quantiles of one lognormal, the curve is that lognormal everywhere (tails too).
    """
    z = NormalDist().inv_cdf
    points = tuple((q, median * math.exp(sigma * z(q))) for q in (0.5, 0.9, 0.95, 0.99))

    curve = QuantileCurve(points, low_sigma=sigma)

    assert curve(p) == pytest.approx(median * math.exp(sigma * z(p)), rel=1e-9)


@given(
    st.lists(st.tuples(st.floats(0.01, 0.99), st.floats(1e-3, 1e3)), min_size=1, max_size=6),
    st.none() | st.floats(0.0, 3.0),
)
def test_a_grid_is_non_decreasing_whatever_the_points(
    points: list[tuple[float, float]], low_sigma: float | None
) -> None:
    """
    Out-of-order, decreasing or repeated quantiles still give a non-decreasing, positive grid.
    """
    values = grid(QuantileCurve(tuple(points), low_sigma=low_sigma), size=200)

    assert all(0 < a <= b for a, b in itertools.pairwise(values))
