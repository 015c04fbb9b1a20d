"""
Which routes the report draws when there are more than it draws, and how it names them.

Routes with as many calls once went in alphabetical order, so a plan's own routes could be
left out; and long model ids were cut at their end, so that a 70b read as a 7b.
"""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np

from tailkit.config import parse_plan
from tailkit.ingest import ingest_paths
from tailkit.report import write_report
from tailkit.report._common import label, labels, short
from tailkit.report._routes import load_tail_data
from tailkit.store import Store


BY = ("provider", "model")
PLAN = """
tailkit_plan: 1
workflow: w
deadline_s: 60
routes:
  zeta/m-11: {provider: zeta, model: m-11}
  zeta/m-10: {provider: zeta, model: m-10}
steps:
  first:
    route: zeta/m-11
    hedge_route: zeta/m-10
"""


def _tied(path: Path, *, finished: dict[int, int] | None = None) -> Path:
    """
    Twelve routes of 30 calls each (``zeta/m-10`` and ``zeta/m-11`` last by name).

    ``finished``: for a route number, how many of its 30 calls finished (the rest failed).
    """
    rng = np.random.default_rng(5)
    rows = []
    for m in range(12):
        provider = "zeta" if m >= 10 else "alpha"
        ok = (finished or {}).get(m, 30)
        for i, t in enumerate(rng.lognormal(0.0, 0.3, 30)):
            rows.append(
                {"provider": provider, "model": f"m-{m:02d}" if m < 10 else f"m-{m}",
                 "total_s": float(t), "status": "ok" if i < ok else "error"}
            )  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_plans_routes_are_drawn_first_among_equals(store: Store, tmp_path: Path) -> None:
    """All tied: the plan's two routes (last by name) are among the 8 drawn, and it says so."""
    assert ingest_paths(store, [_tied(tmp_path / "calls.jsonl")]).ok
    plan = parse_plan(PLAN)

    data = load_tail_data(store, by=BY, where=None, max_routes=8, plan=plan)

    drawn = [r.label for r in data.routes]
    assert drawn[:2] == ["zeta/m-10", "zeta/m-11"]
    assert drawn[2:] == [f"alpha/m-{m:02d}" for m in range(6)]
    assert len(data.left_out) == 4
    assert data.ties == (
        "12 routes tie at 30 calls for the last 8 of 8 places, 4 of them left out: drawn the "
        "plan's routes first, then by the most finished calls, then by name"
    )


def test_without_a_plan_ties_go_to_more_finished_calls_then_name(
    store: Store, tmp_path: Path
) -> None:
    """No plan: more finished calls first, then the name; the same order on every run."""
    log = _tied(tmp_path / "calls.jsonl", finished={11: 29, 3: 25})
    assert ingest_paths(store, [log]).ok

    data = load_tail_data(store, by=BY, where=None, max_routes=8)
    again = load_tail_data(store, by=BY, where=None, max_routes=8)

    drawn = [r.label for r in data.routes]
    assert drawn == [r.label for r in again.routes]
    assert drawn == [f"alpha/m-{m:02d}" for m in (0, 1, 2, 4, 5, 6, 7, 8)]
    assert [r.label for r in data.left_out] == [
        "alpha/m-09",
        "zeta/m-10",
        "zeta/m-11",
        "alpha/m-03",
    ]
    assert "by the most finished calls, then by name" in data.ties
    assert "plan" not in data.ties


def test_no_tie_at_the_last_place_says_nothing(store: Store, tmp_path: Path) -> None:
    """Every route drawn, or a clear cut in calls: no note about ties."""
    assert ingest_paths(store, [_tied(tmp_path / "calls.jsonl")]).ok
    assert load_tail_data(store, by=BY, where=None, max_routes=12).ties == ""


def test_the_page_says_how_ties_were_broken(store: Store, tmp_path: Path) -> None:
    """The headline and the latency section tell how the tie was broken and how many went."""
    assert ingest_paths(store, [_tied(tmp_path / "calls.jsonl")]).ok
    index = write_report(store, tmp_path / "report", plan=parse_plan(PLAN), min_calls=1)
    html = index.read_text(encoding="utf-8")
    words = (
        "12 routes tie at 30 calls for the last 8 of 8 places, 4 of them left out: drawn the "
        "plan&#x27;s routes first"
    )
    assert f"240 calls in 8 of 12 routes by provider, model; {words}" in html
    assert f'<p class="note">{words}' in html


def test_long_model_ids_are_cut_in_the_middle_never_at_the_end() -> None:
    """A long id keeps its end (where 70b and 7b differ); two ids never read the same."""
    big = "some-organisation/a-very-long-fine-tuned-variant-of-llama-2-70b-chat"
    small = "some-organisation/a-very-long-fine-tuned-variant-of-llama-2-7b-chat"
    assert short(big).endswith("llama-2-70b-chat")
    assert short(small).endswith("llama-2-7b-chat")
    assert "…" in short(big)
    assert short(big) != short(small)
    for cut in (short(big), short(small)):
        assert not cut.endswith("…")
    assert short("meta-llama/Llama-2-70b-chat-hf") == "Llama-2-70b-chat-hf"  # whole


def test_only_a_version_hash_is_dropped() -> None:
    """``model:sha`` loses its hash; a fine-tuned ``ft:base:org::id`` keeps every part."""
    sha = "02e509c789964a7ea8736978a43525956ef40397be9033abf9fd2badfe68c9e3"
    assert short(f"meta/llama-2-70b-chat:{sha}") == "llama-2-70b-chat"
    assert short("ft:gpt-4o-mini:acme::abc123") == "ft:gpt-4o-mini:acme::abc123"


def test_labels_that_would_read_alike_are_written_whole() -> None:
    """Two keys whose short labels agree are told apart; control characters are spelt."""
    keys = [("together", "org-a/llama-2-70b-chat"), ("together", "org-b/llama-2-70b-chat")]
    names = labels(keys)
    assert names[keys[0]] != names[keys[1]]
    assert names[keys[0]] == "together/org-a/llama-2-70b-chat"
    assert label(("openai", "gpt\x1b[31m")) == "openai/gpt\\x1b[31m"
