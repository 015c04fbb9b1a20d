"""
The report shows names from the data literally: no math typesetting in figures, escaped in HTML.
"""

from __future__ import annotations

import json

from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path

import numpy as np

from tailkit.config import parse_plan
from tailkit.ingest import ingest_paths
from tailkit.ledger import AttemptRecord, JsonlSink, Ledger
from tailkit.report import write_report
from tailkit.report._common import finish, new_figure
from tailkit.store import Store


# matplotlib typesets text between two `$` as math, and fails on an unknown command like \bad
MATH = r"$\bad{x}$"
MARKUP = "<b>&'$5' $6"  # HTML markup and two `$`, without a `/` (a label shows what follows it)
STEP = r"$\frac{a}{b}$ & <i>"
_T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def _calls(path: Path) -> Path:
    """
    600 streamed calls per model over four input buckets and two output buckets.
    """
    rng = np.random.default_rng(16)
    rows = []
    for model in (MATH, MARKUP):
        for i in range(600):
            tokens = int(rng.choice([500, 3000, 12000, 40000]))
            total = float(rng.lognormal(0.0, 0.6)) * (1 + tokens / 10_000)
            rows.append({
                "call_id": f"{model}-{i}", "provider": "openai", "model": model,
                "total_s": total, "ttft_s": total / 5, "input_tokens": tokens,
                "output_tokens": int(rng.choice([100, 800])),
                "started_at": (_T0 + timedelta(seconds=i)).isoformat(),
            })  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _ledger(path: Path) -> Path:
    """
    Executor traces of 12 runs of the plan's two steps, every fourth first step hedged.
    """
    with Ledger(JsonlSink(path)) as ledger:
        for run in range(12):
            start = _T0 + timedelta(minutes=run)
            for j, (step, model) in enumerate(((MATH, MATH), (STEP, MARKUP))):
                key = f"r{run}-{j}"
                hedged = j == 0 and run % 4 == 0
                ledger.write(AttemptRecord(
                    call_id=f"{key}-0", step=step, attempt=0, role="primary", provider="openai",
                    model=model, run_id=f"r{run}", idempotency_key=key,
                    started_at=start + timedelta(seconds=10 * j),
                    status="cancelled" if hedged else "ok", total_s=None if hedged else 2.0,
                    censored_at_s=3.0 if hedged else None, winner=not hedged,
                ))  # fmt: skip
                if hedged:
                    ledger.write(AttemptRecord(
                        call_id=f"{key}-1", step=step, attempt=1, role="hedge",
                        provider="openai", model=model, run_id=f"r{run}", idempotency_key=key,
                        started_at=start + timedelta(seconds=2), status="ok", total_s=1.0,
                        winner=True,
                    ))  # fmt: skip
    return path


PLAN = f"""\
tailkit_plan: 1
workflow: names
deadline_s: 60
routes:
  {json.dumps(MATH)}: {{provider: openai, model: {json.dumps(MATH)}}}
  {json.dumps(MARKUP)}: {{provider: openai, model: {json.dumps(MARKUP)}}}
steps:
  {json.dumps(MATH)}:
    route: {json.dumps(MATH)}
    expected_tokens: {{input: 3000, output: 100}}
  {json.dumps(STEP)}:
    depends_on: [{json.dumps(MATH)}]
    route: {json.dumps(MARKUP)}
    expected_tokens: {{input: 3000, output: 100}}
"""


def test_names_with_math_and_markup_are_shown_literally(tmp_path: Path) -> None:
    """
    Models and steps named like math and HTML render every section, escaped in the page.
    """
    plan = parse_plan(PLAN)
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [_calls(tmp_path / "calls.jsonl")]).ok
        assert ingest_paths(store, [_ledger(tmp_path / "ledger.jsonl")], format="trace").ok
        index = write_report(store, tmp_path / "out", plan=plan)

    page = index.read_text(encoding="utf-8")
    pngs = sorted(p.name for p in (tmp_path / "out").glob("fig_*.png"))
    assert {"fig_latency_ccdf.png", "fig_workflow_dag.png", "fig_trace_hedges.png"} <= set(pngs)
    assert escape(MATH) in page
    assert escape(MARKUP) in page
    assert MARKUP not in page
    assert "<i>" not in page


def test_a_figure_draws_dollar_names_as_text_and_keeps_math_ticks() -> None:
    """
    Titles, legends, text and given tick labels lose math; the log axis keeps its 10^k ticks.
    """
    from matplotlib.text import Text

    fig = new_figure(4.0, 3.0)
    ax = fig.add_subplot()
    ax.plot([1.0, 100.0], [1.0, 2.0], label=MATH)
    ax.set_xscale("log")
    ax.set_yticks([1.0, 2.0], [MATH, "$y$"])
    ax.set_title(MATH)
    ax.text(10.0, 1.5, MARKUP)
    ax.legend()

    finish(fig, name="n", title=MATH, caption="c")

    shown = {t.get_text(): t.get_parse_math() for t in fig.findobj(Text) if t.get_text()}
    assert shown[MATH] is False  # the title, legend entry and suptitle
    assert shown[MARKUP] is False
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == [MATH.replace("$", r"\$"), r"\$y\$"]
    assert any(t.get_text().startswith("$\\mathdefault{10^") for t in ax.get_xticklabels())
