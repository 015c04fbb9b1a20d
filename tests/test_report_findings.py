"""
The report's findings (JSON, text, progress), small stores, advice, and figures that fit.
"""

from __future__ import annotations

import json
import re

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import typer

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import parse_plan
from tailkit.ingest import ingest_paths
from tailkit.ledger import AttemptRecord, JsonlSink, Ledger
from tailkit.report import write_report_result
from tailkit.report._common import finish
from tailkit.report._routes import load_tail_data
from tailkit.simulation import DEFAULT_MIN_CALLS
from tailkit.store import Store


_T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def _calls(path: Path, routes: dict[str, tuple[int, float]], *, ttft: bool = False) -> Path:
    """Calls of openai/<model> for each model: (count, lognormal sigma), seeded."""
    rng = np.random.default_rng(17)
    rows = []
    for model, (n, sigma) in routes.items():
        for t in rng.lognormal(0.0, sigma, n):
            row = {"provider": "openai", "model": model, "total_s": float(t)}
            if ttft:
                row["ttft_s"] = float(t) / 4
            rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _ledger(path: Path, runs: int = 12) -> Path:
    """Executor traces only: ``runs`` runs of two steps on one route, every third hedged."""
    with Ledger(JsonlSink(path)) as ledger:
        for run in range(runs):
            start = _T0 + timedelta(minutes=run)
            for j, step in enumerate(("extract", "summarize")):
                key = f"r{run}-{step}"
                hedged = j == 0 and run % 3 == 0
                ledger.write(AttemptRecord(
                    call_id=f"{key}-0", step=step, attempt=0, role="primary",
                    provider="openai", model="gpt-4.1-mini", run_id=f"r{run}",
                    idempotency_key=key, started_at=start + timedelta(seconds=10 * j),
                    status="cancelled" if hedged else "ok",
                    total_s=None if hedged else 1.0 + run / 10,
                    censored_at_s=3.0 if hedged else None, winner=not hedged,
                ))  # fmt: skip
                if hedged:
                    ledger.write(AttemptRecord(
                        call_id=f"{key}-1", step=step, attempt=1, role="hedge",
                        provider="openai", model="gpt-4.1-mini", run_id=f"r{run}",
                        idempotency_key=key, started_at=start + timedelta(seconds=3),
                        status="ok", total_s=1.0, winner=True,
                    ))  # fmt: skip
    return path


def _notes(index: Path) -> list[str]:
    return re.findall(r'<p class="(?:meta|note)">(.*?)</p>', index.read_text(encoding="utf-8"))


def test_a_store_of_executor_traces_only_draws_what_it_can(store: Store, tmp_path: Path) -> None:
    """A ledger ingested alone: traces drawn, routes named with why, no 'no finished calls'."""
    ingest_paths(store, [_ledger(tmp_path / "ledger.jsonl", runs=6)], format="trace")

    result = write_report_result(store, tmp_path / "report")

    page = result.index.read_text(encoding="utf-8")
    assert "No finished calls" not in page
    assert "0 calls in 0 of" not in page
    assert {"fig_trace_hedges.png", "fig_trace_p99.png"} <= {p.name for p in result.figures}
    assert (
        "14 calls in 1 route by provider, model; none drawn, left out: openai/gpt-4.1-mini "
        "(12 finished calls, fewer than the 20 a curve needs)"
    ) == result.headline
    assert result.heaviest is not None
    assert ("openai/gpt-4.1-mini", False) == (result.heaviest.route, result.heaviest.drawn)


def test_one_route_is_a_report_not_a_ranking(store: Store, tmp_path: Path) -> None:
    """One route: its own tail in the headline, not the 'heaviest of' one, and no 'all 1'."""
    ingest_paths(store, [_calls(tmp_path / "calls.jsonl", {"m": (300, 0.5)})])

    result = write_report_result(store, tmp_path / "report")

    titles = [f.title for s in result.sections for f in s.figures]
    assert titles[0].startswith("openai/m: p99 is ")
    assert "heaviest" not in titles[0]
    assert not any("all 1 routes" in t for t in titles)
    assert "300 calls in 1 of 1 routes by provider, model" == result.headline


def test_an_empty_store_says_what_to_do(store: Store, tmp_path: Path) -> None:
    """No calls at all: the latency section says the store is empty, or the filter matches none."""
    ingest_paths(store, [_calls(tmp_path / "calls.jsonl", {"m": (30, 0.5)})])

    index = write_report_result(store, tmp_path / "report", where="model = 'nope'").index

    assert "No latency figures: no call matches the filter model = &#x27;nope&#x27;." in (
        _notes(index)
    )


def test_no_heatmap_of_counts_only(store: Store, tmp_path: Path) -> None:
    """Token buckets none of which has the calls for a p99: no grid of counts, a note."""
    from tailkit.report._figures_tail import heatmap_figure

    rows = [
        {"provider": "openai", "model": "m", "total_s": 1.0 + i / 100, "input_tokens": 100,
         "output_tokens": 50}
        for i in range(120)
    ]  # fmt: skip
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ingest_paths(store, [path])

    data = load_tail_data(store, by=("provider", "model"), where=None, max_routes=8)

    assert heatmap_figure(data, ("provider", "model")) is None


@pytest.fixture
def mixed_db(tmp_path: Path) -> Path:
    """Five steady routes, a sixth too small to draw with the heaviest tail, streamed."""
    routes = {f"model-{m}": (300, 0.3) for m in range(5)} | {"model-5": (12, 1.6)}
    path = tmp_path / "calls.duckdb"
    with Store.open(path) as store:
        ingest_paths(store, [_calls(tmp_path / "calls.jsonl", routes, ttft=True)])
    return path


def test_json_prints_the_paths_and_the_headline_findings(mixed_db: Path, tmp_path: Path) -> None:
    """`report --json`: paths, the heaviest route over all routes, and left-out routes with why."""
    out = tmp_path / "rep"

    result = CliRunner().invoke(app, ["report", "-o", str(out), "--db", str(mixed_db), "--json"])

    assert 0 == result.exit_code, result.output
    doc = json.loads(result.stdout)
    assert str(out / "index.html") == doc["index"]
    assert all(Path(p).is_file() for p in doc["figures"])
    assert (6, None) == (doc["routes"], doc["plan"])
    assert ["openai/model-5"] == [r["route"] for r in doc["left_out"]]
    heaviest = doc["heaviest_tail"]
    assert ("openai/model-5", False) == (heaviest["route"], heaviest["drawn"])
    assert "12 finished calls, fewer than the 20 a curve needs" == heaviest["why"]
    assert heaviest["p99_p50"] == pytest.approx(heaviest["p99_s"] / heaviest["p50_s"], rel=1e-6)
    assert doc["headline"].startswith("1,500 calls in 5 of 6 routes by provider, model; left out")
    assert "Latency per route" == doc["sections"][0]["title"]
    assert doc["sections"][0]["figures"][0]["title"].startswith("openai/model-5 has the heaviest")
    assert "" == result.stderr


def test_text_prints_the_path_on_stdout_and_findings_on_stderr(
    mixed_db: Path, tmp_path: Path
) -> None:
    """Without --json: stdout is the page's path; stderr the headline and one line a finding."""
    out = tmp_path / "rep"

    result = CliRunner().invoke(app, ["report", "-o", str(out), "--db", str(mixed_db)])
    quiet = CliRunner().invoke(app, ["report", "-o", str(out), "--db", str(mixed_db), "-q"])

    assert 0 == result.exit_code, result.output
    assert f"{out / 'index.html'}\n" == result.stdout
    lines = result.stderr.splitlines()
    assert lines[0].startswith("1,500 calls in 5 of 6 routes by provider, model; left out: ")
    assert lines[1].startswith("  openai/model-5 has the heaviest tail (p99 is ")
    assert "  Workflow: No plan given: no workflow section (pass a calibrated plan)." in lines
    assert (0, f"{out / 'index.html'}\n", "") == (quiet.exit_code, quiet.stdout, quiet.stderr)


def test_progress_is_reported_per_phase(mixed_db: Path, tmp_path: Path) -> None:
    """The library calls `progress` as each phase starts, the long ones included."""
    said: list[str] = []
    with Store.open(mixed_db, read_only=True) as store:
        write_report_result(store, tmp_path / "rep", progress=said.append)

    assert [
        "read the calls per route",
        "draw the latency curves of 5 routes",
        "draw the token bucket heatmap and the tail's growth with work",
        "draw time to first token against generation",
        "draw the fit diagnostics of 5 routes",
        "read the executor traces",
        "write the page",
    ] == said


_THIN_PLAN = """\
tailkit_plan: 1
workflow: thin
deadline_s: 30
routes:
  openai/model-0: {provider: openai, model: model-0}
steps:
  extract:
    route: openai/model-0
    expected_tokens: {input: 100, output: 50}
"""


def test_every_option_the_page_advises_is_an_option_of_report(
    mixed_db: Path, tmp_path: Path
) -> None:
    """A thin plan's advice names the edges (no call to lower --min-calls to): they all work."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(_THIN_PLAN, encoding="utf-8")
    out = tmp_path / "rep"
    command = typer.main.get_command(app).commands["report"]  # type: ignore[attr-defined]
    options = {opt for param in command.params for opt in param.opts}

    result = CliRunner().invoke(
        app, ["report", "-o", str(out), "--db", str(mixed_db), "--plan", str(plan), "-q"]
    )
    fixed = CliRunner().invoke(
        app, ["report", "-o", str(tmp_path / "fixed"), "--db", str(mixed_db), "--plan",
              str(plan), "-q", "--min-calls", "100", "--input-edges", "0,1k",
              "--output-edges", "0,64", "--json"],
    )  # fmt: skip

    assert 0 == result.exit_code, result.output
    notes = " ".join(_notes(out / "index.html"))
    assert "No policy comparison" in notes
    advised = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", notes))
    assert {"--input-edges", "--output-edges"} <= advised
    assert "--min-calls" not in advised  # the bucket has no call: lowering it cannot help
    assert advised <= options
    assert 0 == fixed.exit_code, fixed.output
    note = json.loads(fixed.stdout)["sections"][4]["note"]
    assert "has no calls in bucket in 0-1k / out 0-64" in note  # the edges were applied
    default = next(p for p in command.params if p.name == "min_calls").default
    assert DEFAULT_MIN_CALLS == default


def _overlap(a: object, b: object) -> bool:
    from matplotlib.transforms import BboxBase

    assert isinstance(a, BboxBase)
    assert isinstance(b, BboxBase)
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


def _inside(a: object, b: object) -> bool:
    from matplotlib.transforms import BboxBase

    assert isinstance(a, BboxBase)
    assert isinstance(b, BboxBase)
    return bool(b.x0 <= a.x0 <= a.x1 <= b.x1 and b.y0 <= a.y0 <= a.y1 <= b.y1)


def test_the_phase_legend_covers_no_bar(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TTFT vs generation: the legend's box overlaps no bar's box (renderer extents)."""
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.legend import Legend
    from matplotlib.patches import Rectangle

    from tailkit.report import _figures_tail

    routes = {f"model-{m}": (300, 0.3 + m / 10) for m in range(8)}
    ingest_paths(store, [_calls(tmp_path / "calls.jsonl", routes, ttft=True)])
    data = load_tail_data(store, by=("provider", "model"), where=None, max_routes=8)
    drawn: list[MplFigure] = []

    def keep(fig: MplFigure, **kwargs: str) -> object:
        drawn.append(fig)
        return finish(fig, **kwargs)

    monkeypatch.setattr(_figures_tail, "finish", keep)
    assert _figures_tail.phase_figure(data.routes) is not None
    fig = drawn[0]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = fig.findobj(Legend)
    bars = [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle)]
    assert 1 == len(legends)
    assert 16 == len(bars)
    box = legends[0].get_window_extent(renderer)
    assert not [b for b in bars if _overlap(box, b.get_window_extent(renderer))]


def test_workflow_boxes_hold_their_text_and_do_not_touch() -> None:
    """Long step names and routes: each text inside its box, boxes inside the figure, apart."""
    from matplotlib.text import Text

    from tailkit.report._figures_workflow import dag_plot

    long_route = "bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0-long-deployment-name"
    names = [f"step_{i}_extract_customer_records_from_the_crm_export" for i in range(9)]
    routes = {long_route: {"provider": "bedrock", "model": long_route.split("/")[1]}}
    steps = {
        name: {"route": long_route, "depends_on": names[i - 1 : i] if i % 3 else []}
        for i, name in enumerate(names)
    }
    plan = parse_plan(json.dumps({"tailkit_plan": 1, "workflow": "long", "deadline_s": 60,
                                  "routes": routes, "steps": steps}))  # fmt: skip

    fig, title = dag_plot(plan)
    finish(fig, name="workflow_dag", title=title, caption="c")

    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    page = fig.bbox
    texts = [t for t in fig.findobj(Text) if t.get_bbox_patch() is not None]
    boxes = [t.get_bbox_patch().get_window_extent(renderer) for t in texts]  # type: ignore[union-attr]
    assert 9 == len(texts)
    for text, box in zip(texts, boxes, strict=True):
        inner = text.get_window_extent(renderer)
        assert _inside(inner, box), text.get_text()
        assert _inside(box, page), text.get_text()
    touching = [(i, j) for i in range(len(boxes)) for j in range(i) if _overlap(boxes[i], boxes[j])]
    assert [] == touching


def test_trace_legends_cover_no_bar_and_zero_counts_draw_no_panel(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hedges and p99 per step: legends off the bars; no abandoned or skipped: one panel only."""
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.legend import Legend
    from matplotlib.patches import Rectangle

    from tailkit.report import _figures_traces

    ingest_paths(store, [_ledger(tmp_path / "ledger.jsonl", runs=12)], format="trace")
    traces = _figures_traces.load_traces(store)
    assert traces is not None
    drawn: list[MplFigure] = []

    def keep(fig: MplFigure, **kwargs: str) -> object:
        drawn.append(fig)
        return finish(fig, **kwargs)

    monkeypatch.setattr(_figures_traces, "finish", keep)
    hedges = _figures_traces.hedge_figure(traces)
    assert _figures_traces.p99_figure(traces, None) is not None

    assert 1 == len(drawn[0].axes)
    assert hedges.caption.startswith("Bars: per step, the share of logical calls")
    for fig in drawn:
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        bars = [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle)]
        assert bars
        for legend in fig.findobj(Legend):
            box = legend.get_window_extent(renderer)
            assert not [b for b in bars if _overlap(box, b.get_window_extent(renderer))]


def test_progress_shows_on_a_terminal_unless_quiet(
    mixed_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal stderr gets one '> phase (N s)' line a phase; --quiet silences them."""
    monkeypatch.setattr("tailkit.cli._report.os.isatty", lambda fd: fd == 2)
    args = ["report", "-o", str(tmp_path / "rep"), "--db", str(mixed_db)]

    shown = CliRunner().invoke(app, args)
    quiet = CliRunner().invoke(app, [*args, "--quiet"])

    assert 0 == shown.exit_code, shown.output
    steps = [line for line in shown.stderr.splitlines() if line.startswith("> ")]
    assert 7 == len(steps)
    assert re.fullmatch(r"> read the calls per route  \(\d+ s\)", steps[0])
    assert "" == quiet.stderr


def test_a_p99_past_the_cap_is_null_in_json_and_flagged() -> None:
    """JSON has no infinity: an unbounded p99 is null, with p99_unbounded saying why."""
    from tailkit.report import RouteFinding

    row = {"n": 10, "n_ok": 9, "p50_s": 1.0, "p99_s": float("inf"), "p99_p50": float("inf")}

    found = RouteFinding.of("a/b", row, None).to_json()

    assert (None, None, True, True) == (
        found["p99_s"],
        found["p99_p50"],
        found["p99_unbounded"],
        found["drawn"],
    )
    assert "Infinity" not in json.dumps(found)
