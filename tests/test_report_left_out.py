"""
The report says which routes it leaves out and why, and its headline covers every route.
"""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np

from tailkit.ingest import ingest_paths
from tailkit.report import write_report
from tailkit.report._routes import load_tail_data
from tailkit.store import Store


def _calls(path: Path) -> Path:
    """Five steady routes of 300 calls, and a sixth of 12 calls with by far the heaviest tail."""
    rng = np.random.default_rng(17)
    rows = []
    for m in range(6):
        n, sigma = (12, 1.6) if m == 5 else (300, 0.3)
        rows += [
            {"provider": "openai", "model": f"model-{m}", "total_s": float(t)}
            for t in rng.lognormal(0.0, sigma, n)
        ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_route_too_small_to_draw_is_named_and_can_still_be_the_heaviest(
    store: Store, tmp_path: Path
) -> None:
    """
    6 routes with a limit of 8: the one with 12 calls is not drawn, but it is said, with why.
    """
    ingest_paths(store, [_calls(tmp_path / "calls.jsonl")])

    data = load_tail_data(store, by=("provider", "model"), where=None, max_routes=8)
    index = write_report(store, tmp_path / "report", max_routes=8)

    assert 5 == len(data.routes)
    assert ["openai/model-5"] == [r.label for r in data.left_out]
    assert "12 finished calls, fewer than the 20 a curve needs" == data.left_out[0].why
    html = index.read_text(encoding="utf-8")
    assert "1,500 calls in 5 of 6 routes by provider, model; left out: openai/model-5 (12" in html
    assert "openai/model-5 has the heaviest tail" in html


def test_routes_beyond_the_limit_are_named(store: Store, tmp_path: Path) -> None:
    """
    A limit below the number of routes names each route beyond it.
    """
    ingest_paths(store, [_calls(tmp_path / "calls.jsonl")])

    data = load_tail_data(store, by=("provider", "model"), where=None, max_routes=3)

    assert 3 == len(data.routes)
    assert ["beyond the 3 biggest routes"] * 2 == [r.why for r in data.left_out][:2]
    assert 3 == len(data.left_out)


def test_calls_without_token_counts_draw_no_empty_heatmap(store: Store, tmp_path: Path) -> None:
    """
    With no token counts every call is in the `?` bucket: no grid of empty cells, a note.
    """
    from tailkit.report._figures_tail import heatmap_figure

    ingest_paths(store, [_calls(tmp_path / "calls.jsonl")])
    data = load_tail_data(store, by=("provider", "model"), where=None, max_routes=8)

    assert heatmap_figure(data, ("provider", "model")) is None
    index = write_report(store, tmp_path / "report")
    assert "calls without token counts have no bucket" in index.read_text(encoding="utf-8")
