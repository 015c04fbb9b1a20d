"""
`write_report`: the store's tails, the plan and the executor's traces as one HTML page + PNGs.
"""

from __future__ import annotations

import os

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.report._common import Figure, Section
from tailkit.report._html import render_html
from tailkit.report._races import RaceFindings, races_section
from tailkit.report._replay import replay_section
from tailkit.simulate import SimResult
from tailkit.store import Store


POLICY_RUNS = 20_000  # simulated runs per policy when the comparison is computed here
PNG_PREFIX = "fig_"  # the report's own PNGs: only these are replaced in out_dir


def write_report(
    store: Store,
    out_dir: str | os.PathLike[str],
    *,
    plan: Plan | None = None,
    comparison: Mapping[str, SimResult] | None = None,
    by: tuple[str, ...] = ("provider", "model"),
    title: str = "tailkit report",
    where: str | None = None,
    max_routes: int = 8,
    races: RaceFindings | None = None,
    replay: Mapping[str, Any] | None = None,
) -> Path:
    """
    Write ``index.html`` (self-contained: figures embedded, no script) and the figures' PNGs.

    Every figure's title states its finding, computed from the data; a section without data
    says so in one line instead of showing an empty plot.

    Args:
        store: An open store.
        out_dir: Folder for ``index.html`` and ``fig_*.png`` (created; only those files are
            replaced).
        plan: A calibrated plan: adds the workflow section (its DAG and the policy comparison).
        comparison: Policy name -> `SimResult`, as `compare_policies` returns; computed from
            the store (20,000 runs per policy) when ``None`` and a plan is given.
        by: Call-record columns that make a route.
        title: The page's title.
        where: SQL filter on call-record columns for the tail sections.
        max_routes: The biggest routes shown in the per-route figures.
        races: A `tailkit.races.RaceReport` (harness log against tool log): adds its section.
        replay: A ``tailkit replay --json`` document (``ReplayResult.to_json()``): adds the
            replay beside the simulation.

    Returns:
        The path of ``index.html``.

    Raises:
        ConfigError: ``by`` names a column that cannot be grouped by, or ``max_routes < 1``.
        StoreError: ``where`` is not a valid filter.
    """
    from tailkit.report import _figures_fit, _figures_tail, _figures_traces
    from tailkit.report._routes import load_tail_data

    if max_routes < 1:
        msg = f"max_routes must be at least 1, got {max_routes}"
        raise ConfigError(msg)
    sections: list[Section] = []
    data = load_tail_data(store, by=by, where=where, max_routes=max_routes)
    n_calls = sum(int(r.row["n"]) for r in data.routes)
    if data.routes:
        sections.append(
            _section("Latency per route", [_figures_tail.ccdf_figure(data.routes, data.left_out)])
        )
        sections.append(
            _section(
                "Does the tail grow with work?",
                [_figures_tail.heatmap_figure(data, by), _figures_tail.growth_figure(data, by)],
                empty="no route has two token buckets with enough calls for a p99 (calls "
                "without token counts have no bucket)",
            )
        )
        sections.append(
            _section(
                "Time to first token or generation?",
                [_figures_tail.phase_figure(data.routes)],
                empty="no call reports its time to first token (none was streamed)",
            )
        )
        sections.append(
            _section(
                "Fit diagnostics",
                [_figures_fit.qq_figure(data.routes)],
                empty="no route has the 10 finished calls a QQ plot needs",
            )
        )
    elif data.left_out:
        note = f"No route has the finished calls a curve needs; {data.left_out_words()}."
        sections.append(Section("Latency per route", note=note[0].upper() + note[1:]))
    else:
        sections.append(Section("Latency per route", note="No finished calls in the store."))
    sections.append(_workflow_section(store, plan, comparison))
    if replay is not None:
        sections.append(replay_section(replay))
    traces = _figures_traces.load_traces(store)
    if traces is None:
        sections.append(
            Section("Executor traces", note="No executor traces (source 'tailkit-executor').")
        )
    else:
        sections.append(
            _section(
                "Executor traces",
                [_figures_traces.hedge_figure(traces), _figures_traces.p99_figure(traces, plan)],
            )
        )
    if races is not None:
        sections.append(races_section(races))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{PNG_PREFIX}*.png"):
        old.unlink()
    for section in sections:
        for fig in section.figures:
            (out / f"{PNG_PREFIX}{fig.name}.png").write_bytes(fig.png)
    filt = f", filter {where}" if where else ""
    shown = len(data.routes)
    meta = (
        f"{n_calls:,} calls in {shown} of {shown + len(data.left_out)} routes by "
        f"{', '.join(by)}{filt}"
    )
    if data.left_out:
        meta += f"; {data.left_out_words()}"
    index = out / "index.html"
    index.write_text(render_html(title, meta, sections), encoding="utf-8")
    return index


def _section(title: str, figures: list[Figure | None], empty: str = "no data") -> Section:
    shown = tuple(f for f in figures if f is not None)
    return Section(title, shown, note=None if shown else f"Left out: {empty}.")


def _workflow_section(
    store: Store,
    plan: Plan | None,
    comparison: Mapping[str, SimResult] | None,
) -> Section:
    from tailkit.report import _figures_workflow as wf
    from tailkit.simulate import ThinSampleError, compare_policies, load_samples

    if plan is None:
        return Section("Workflow", note="No plan given (--plan): no workflow section.")
    out = [wf.dag_figure(plan)]
    note = None
    if comparison is None:
        try:
            samples = load_samples(store, plan)
            comparison = compare_policies(plan, samples, runs=POLICY_RUNS)
        except ThinSampleError as exc:
            note = f"No policy comparison: {exc}"
    if comparison:
        out.append(wf.policy_figure(comparison))
    return Section("Workflow", tuple(out), note=note)
