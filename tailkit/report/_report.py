"""
`write_report`: the store's tails, the plan and the executor's traces as one HTML page + PNGs.
"""

from __future__ import annotations

import math
import os

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.record import Buckets
from tailkit.report._common import PNG_PREFIX, Figure, Section
from tailkit.report._html import render_html
from tailkit.report._races import RaceFindings, races_section
from tailkit.report._replay import replay_section
from tailkit.report._result import PlanFinding, ReportResult, RouteFinding
from tailkit.report._write import replace_files
from tailkit.simulation import DEFAULT_MIN_CALLS, SimResult
from tailkit.store import Store


if TYPE_CHECKING:
    from tailkit.report._routes import TailData

__all__ = ["PNG_PREFIX", "write_report", "write_report_result"]

INDEX = "index.html"
POLICY_RUNS = 20_000  # simulated runs per policy when the comparison is computed here
_NO_PLAN = "No plan given: no workflow section (pass a calibrated plan)."


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
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    progress: Callable[[str], None] | None = None,
    field_name: Callable[[str], str] | None = None,
) -> Path:
    """
    Write ``index.html`` (self-contained: figures embedded, no script) and the figures' PNGs.

    `write_report_result` takes the same arguments and returns the findings as well.

    Returns:
        The path of ``index.html``.
    """
    return write_report_result(
        store, out_dir, plan=plan, comparison=comparison, by=by, title=title, where=where,
        max_routes=max_routes, races=races, replay=replay, buckets=buckets,
        min_calls=min_calls, progress=progress, field_name=field_name,
    ).index  # fmt: skip


def write_report_result(
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
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    progress: Callable[[str], None] | None = None,
    field_name: Callable[[str], str] | None = None,
) -> ReportResult:
    """
    Write ``index.html`` and the figures' PNGs; return the paths and the headline findings.

    Every figure's title states its finding, computed from the data; a section without data
    says so in one line instead of showing an empty plot.

    Args:
        store: An open store.
        out_dir: Folder for ``index.html`` and ``fig_*.png`` (created; only those files are
            replaced). Every file is written whole or not at all, the page last: a run that
            fails (a full disk, a kill) leaves the previous report as it was.
        plan: A calibrated plan: adds the workflow section (its DAG and the policy comparison).
        comparison: Policy name -> `SimResult`, as `compare_policies` returns; computed from
            the store (20,000 runs per policy) when ``None`` and a plan is given.
        by: Call-record columns that make a route.
        title: The page's title.
        where: SQL filter on call-record columns for the tail sections.
        max_routes: The biggest routes shown in the per-route figures: those with the most
            calls, and among as many, the plan's routes first (then more finished calls, then
            by name; the page says when that chose).
        races: A `tailkit.races.RaceReport` (harness log against tool log): adds its section.
        replay: A replay's JSON document (``ReplayResult.to_json()``): adds the
            replay beside the simulation.
        buckets: Token bucket edges of the heatmap and the policy comparison (the defaults
            of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls a step's route needs in its bucket for the policy comparison.
        progress: Called with a short message as each phase starts.
        field_name: How the page names a parameter its advice tells you to change (a
            thin sample's ``min_calls``, say): ``None`` writes the library's parameter name;
            the command line passes the flag that sets it (`tailkit.errors.TailkitError.render`).

    Returns:
        The paths written and the findings (`ReportResult`).

    Raises:
        ConfigError: ``by`` names a column that cannot be grouped by, ``max_routes < 1``,
            or the files cannot be written (``field`` is ``out_dir``; nothing was replaced).
        StoreError: ``where`` is not a valid filter.
    """
    from tailkit.report import _figures_traces
    from tailkit.report._routes import load_tail_data

    if max_routes < 1:
        msg = f"{{field}} must be at least 1, got {max_routes}."
        raise ConfigError(
            msg,
            field="max_routes",
            value=max_routes,
            fix="Pass how many of the biggest routes to draw (8 by default).",
        )
    say = progress or (lambda _: None)
    sections: list[Section] = []
    say("read the calls per route")
    data = load_tail_data(
        store, by=by, where=where, max_routes=max_routes, buckets=buckets, plan=plan
    )
    n_calls = sum(int(r.row["n"]) for r in data.routes)
    sections.extend(_tail_sections(data, by, where, say))
    workflow, outcome = _workflow_section(
        store, plan, comparison=comparison, buckets=buckets, min_calls=min_calls, say=say,
        field_name=field_name,
    )  # fmt: skip
    sections.append(workflow)
    if replay is not None:
        sections.append(replay_section(replay))
    say("read the executor traces")
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
    say("write the page")
    out = Path(out_dir)
    meta = _meta(data, n_calls, by, where)
    files = {f"{PNG_PREFIX}{fig.name}.png": fig.png for s in sections for fig in s.figures}
    files[INDEX] = render_html(title, meta, sections).encode("utf-8")
    # the old figures the new page lacks go only once the new page is in place
    stale = [p for p in out.glob(f"{PNG_PREFIX}*.png") if p.name not in files]
    written = replace_files(out, files, last=INDEX, stale=stale)
    index = written[-1]
    top = data.heaviest()
    return ReportResult(
        index=index,
        figures=tuple(sorted(written[:-1])),
        headline=meta,
        calls=n_calls,
        routes=len(data.routes) + len(data.left_out),
        heaviest=RouteFinding.of(top[0], top[1], top[2].why if top[2] else None) if top else None,
        left_out=tuple(RouteFinding.of(r.label, r.row, r.why) for r in data.left_out),
        plan=outcome,
        sections=tuple(sections),
    )


def _tail_sections(
    data: TailData, by: tuple[str, ...], where: str | None, say: Callable[[str], None]
) -> list[Section]:
    """
    The sections on the store's tails: latency, growth with work, phases, fit diagnostics.
    """
    from tailkit.report import _figures_fit, _figures_tail

    out: list[Section] = []
    if data.routes:
        routes = f"{len(data.routes)} route{'s' * (len(data.routes) > 1)}"
        say(f"draw the latency curves of {routes}")
        latency = _section(
            "Latency per route", [_figures_tail.ccdf_figure(data.routes, data.left_out)]
        )
        if data.ties:  # it begins with a count: a sentence as it is
            latency = Section(latency.title, latency.figures, note=f"{data.ties}.")
        out.append(latency)
        say("draw the token bucket heatmap and the tail's growth with work")
        out.append(
            _section(
                "Does the tail grow with work?",
                [_figures_tail.heatmap_figure(data, by), _figures_tail.growth_figure(data, by)],
                empty=f"no token bucket of a route has the {_figures_tail.P99_CALLS} finished "
                "calls a p99 needs (calls without token counts have no bucket)",
            )
        )
        say("draw time to first token against generation")
        out.append(
            _section(
                "Time to first token or generation?",
                [_figures_tail.phase_figure(data.routes)],
                empty="no call reports its time to first token (none was streamed)",
            )
        )
        say(f"draw the fit diagnostics of {routes}")
        out.append(
            _section(
                "Fit diagnostics",
                [_figures_fit.qq_figure(data.routes)],
                empty="no route has the 10 finished calls a QQ plot needs",
            )
        )
    elif data.left_out:
        note = (
            f"{_figures_tail.headline((), data.left_out)}. No route has the finished calls a "
            f"curve needs; {data.left_out_words()}."
        )
        out.append(Section("Latency per route", note=note))
    else:
        filtered = f"no call matches the filter {where}" if where else "the store has no calls"
        out.append(Section("Latency per route", note=f"No latency figures: {filtered}."))
    return out


def _meta(data: TailData, n_calls: int, by: tuple[str, ...], where: str | None) -> str:
    """
    The line under the page's title: the calls drawn, of how many routes, and what is left out.
    """
    filt = f", filter {where}" if where else ""
    shown, total = len(data.routes), len(data.routes) + len(data.left_out)
    if not data.routes:
        calls = sum(int(r.row["n"]) for r in data.left_out)
        meta = f"{calls:,} calls in {total} route{'s' * (total != 1)} by {', '.join(by)}{filt}"
        return meta + (f"; none drawn, {data.left_out_words()}" if data.left_out else "")
    meta = f"{n_calls:,} calls in {shown} of {total} routes by {', '.join(by)}{filt}"
    meta += f"; {data.ties}" if data.ties else ""
    return meta + (f"; {data.left_out_words()}" if data.left_out else "")


def _section(title: str, figures: list[Figure | None], empty: str = "no data") -> Section:
    shown = tuple(f for f in figures if f is not None)
    return Section(title, shown, note=None if shown else f"Left out: {empty}.")


def _workflow_section(
    store: Store,
    plan: Plan | None,
    *,
    comparison: Mapping[str, SimResult] | None,
    buckets: Buckets | None,
    min_calls: int,
    say: Callable[[str], None],
    field_name: Callable[[str], str] | None,
) -> tuple[Section, PlanFinding | None]:
    from tailkit.report import _figures_workflow as wf
    from tailkit.simulation import ThinSampleError, compare_policies, load_samples

    if plan is None:
        return Section("Workflow", note=_NO_PLAN), None
    say("draw the workflow")
    out = [wf.dag_figure(plan)]
    note = None
    if comparison is None:
        try:
            say("read each step's calls")
            samples = load_samples(store, plan, buckets=buckets, min_calls=min_calls)
            say(f"simulate the policies ({POLICY_RUNS:,} runs each)")
            comparison = compare_policies(plan, samples, runs=POLICY_RUNS)
        except ThinSampleError as exc:
            note = f"No policy comparison: {exc.render(field_name)}"
    outcome = None
    if comparison:
        out.append(wf.policy_figure(comparison))
        mine = comparison.get("plan")
        if mine is not None:
            baseline = comparison.get("none")
            outcome = PlanFinding(
                workflow=plan.workflow,
                deadline_s=plan.deadline_s if math.isfinite(plan.deadline_s) else None,
                runs=mine.runs,
                miss_rate=mine.miss_rate,
                p99_s=mine.p99_s if math.isfinite(mine.p99_s) else None,
                baseline_miss_rate=baseline.miss_rate if baseline is not None else None,
            )
    return Section("Workflow", tuple(out), note=note), outcome
