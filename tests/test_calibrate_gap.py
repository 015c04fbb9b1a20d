"""
A tail with a second mode (stalls): the search tries the cutoff just past its onset.

The case that asked for it: a streamed route whose first token stalls six times longer on
2.25 % of its calls, a budget of 2.8 %. The grid's quantiles straddle the onset (p97.5 is the
top of the normal calls, p98 a stalled one past the deadline), and the budget's own quantile
spent a hair more than the budget once its retries were counted, so calibrate planned no
cutoff and the route missed 2.3 % of its deadlines.
"""

from __future__ import annotations

import json
import math

from pathlib import Path

import numpy as np
import pytest

from tailkit.calibration import calibrate
from tailkit.calibration.lowlevel import tail_gap
from tailkit.config import parse_plan
from tailkit.ingest import ingest_paths
from tailkit.simulation import RouteSample
from tailkit.store import Store


STALLED, SLOWER = 0.0225, 6.0

PLAN = """\
tailkit_plan: 1
workflow: one
deadline_s: 10
hedge_budget: 0.028
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  answer: {route: a/m, hedge_route: b/m}
"""


def _ttft(n: int, rng: np.random.Generator) -> np.ndarray:
    """First-token seconds: lognormal around 2 s, the last ``STALLED`` share six times longer."""
    ttft = 2.0 * np.exp(0.15 * rng.standard_normal(n))
    stalled = rng.permutation(n)[: round(STALLED * n)]
    ttft[stalled] *= SLOWER
    return ttft


def test_the_onset_of_a_second_mode_is_found() -> None:
    """The cutoff lies between the last normal call and the first stalled one, at its share."""
    ttft = np.sort(_ttft(4000, np.random.default_rng(1)))
    sample = RouteSample.from_grid(ttft + 0.5, ttft_share=None)
    normal_top, stalled_low = ttft[-round(STALLED * 4000) - 1], ttft[-round(STALLED * 4000)]
    ((q, cutoff),) = tail_gap(sample, "total")
    assert normal_top + 0.5 < cutoff < stalled_low + 0.5
    assert q == pytest.approx(1.0 - STALLED, abs=1e-3)


def test_a_smooth_tail_has_no_gap() -> None:
    """One lognormal mode, however heavy: nothing beside the grid."""
    rng = np.random.default_rng(2)
    for sigma in (0.15, 0.5, 1.0):
        sample = RouteSample.from_grid(np.exp(sigma * rng.standard_normal(4000)))
        assert tail_gap(sample, "total") == []


def _log(path: Path, *, calls: int = 400, seed: int = 3) -> Path:
    """Streamed calls on a and b: TTFT as `_ttft`, then half a second of tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for provider in ("a", "b"):
        for i, ttft in enumerate(_ttft(calls, rng)):
            rows.append({
                "call_id": f"{provider}{i}", "provider": provider, "model": "m", "status": "ok",
                "ttft_s": round(float(ttft), 4), "total_s": round(float(ttft) + 0.5, 4),
                "stream": True,
            })  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_calibrate_cuts_the_stalls_within_a_budget_just_above_them(tmp_path: Path) -> None:
    """A cutoff past the normal calls, before the stalled ones: fewer misses, inside the budget."""
    with Store.open(tmp_path / "s.duckdb") as store:
        assert ingest_paths(store, [_log(tmp_path / "calls.jsonl")]).ok
        found = calibrate(store, parse_plan(PLAN), runs=20_000, check_runs=20_000, seed=1)
    step = found.plan.steps["answer"]
    assert step.on_cutoff in ("retry", "hedge")
    cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
    assert cutoff is not None
    assert 2.0 * math.exp(0.15 * 2.0) < cutoff < 2.0 * SLOWER * math.exp(-0.15 * 3.0) + 0.5
    predicted = found.plan.predicted
    assert predicted is not None
    # (a repeat is assumed to share 0.75 of its first attempt's slowness: no tokens, no pairs)
    assert predicted.miss_rate < STALLED / 2
    assert predicted.extra_attempts <= 0.028
