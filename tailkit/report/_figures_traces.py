"""
What the executor did (store rows with source 'tailkit-executor'): hedges, events, p99 per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailkit.config import Plan
from tailkit.report._common import PALETTE, Figure, finish, listing, new_figure
from tailkit.store import Store
from tailkit.text import percent, seconds


TRACE_SOURCE = "tailkit-executor"
_TRACES = f"(SELECT * FROM calls WHERE source = '{TRACE_SOURCE}') AS t"


@dataclass(frozen=True, slots=True)
class StepTrace:
    """
    One step over the traced runs.

    Its logical calls, hedges and their wins, abandoned completions, skipped actions, and the
    runs and p99 of its observed latency (first attempt's start to the winner's end).
    """

    step: str
    calls: int
    hedges: int
    hedge_wins: int
    abandoned: int
    skipped: int
    runs: int
    p99_s: float | None


@dataclass(frozen=True, slots=True)
class Traces:
    """
    The executor's traces: per step, and the skipped actions by reason.
    """

    steps: tuple[StepTrace, ...]
    skipped: tuple[tuple[str, int], ...]


def load_traces(store: Store) -> Traces | None:
    """
    The executor's rows summarized per step (``None`` when the store has none).
    """
    row = store.fetchone(f"SELECT count(*) FROM {_TRACES}")
    if row is None or row[0] == 0:
        return None
    key = "coalesce(attrs->>'idempotency_key', call_id)"
    counts = store.fetchall(
        f"SELECT coalesce(step, '(no step)'), count(DISTINCT {key}), "
        "count(*) FILTER (role = 'hedge'), "
        "count(*) FILTER (role = 'hedge' AND attrs->>'winner' = 'true'), "
        "count(*) FILTER (abandoned), count(*) FILTER (attrs->>'action_skipped' IS NOT NULL) "
        f"FROM {_TRACES} GROUP BY ALL ORDER BY 1"
    )
    # A step's latency in a run: from its first attempt's start to its winner's end.
    latency = {
        r[0]: (int(r[1]), r[2])
        for r in store.fetchall(
            "SELECT step, count(*), quantile_cont(end_s - start_s, 0.99) FROM ("
            "SELECT step, run_id, min(epoch(started_at)) AS start_s, "
            "max(epoch(started_at) + total_s) FILTER (attrs->>'winner' = 'true') AS end_s "
            f"FROM {_TRACES} WHERE step IS NOT NULL GROUP BY ALL) "
            "WHERE end_s IS NOT NULL GROUP BY step"
        )
    }
    steps = tuple(
        StepTrace(str(s), int(c), int(h), int(w), int(a), int(k), *latency.get(s, (0, None)))
        for s, c, h, w, a, k in counts
    )
    skipped = tuple(
        (str(r[0]), int(r[1]))
        for r in store.fetchall(
            f"SELECT attrs->>'action_skipped', count(*) FROM {_TRACES} "
            "WHERE attrs->>'action_skipped' IS NOT NULL GROUP BY 1 ORDER BY 2 DESC"
        )
    )
    return Traces(steps, skipped)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def hedge_figure(traces: Traces) -> Figure:
    """
    Per step, the hedge rate and the hedges' win rate; beside it, abandoned and skipped counts.
    """
    events = [("abandoned completions", sum(s.abandoned for s in traces.steps))]
    events += [(f"skipped: {why}", n) for why, n in traces.skipped]
    fig = new_figure(10.5, 4.2)
    # all counts zero is no picture: the title says it, the rates get the whole width
    left, right = (
        fig.subplots(1, 2, width_ratios=(3, 2))
        if any(n for _, n in events)
        else (fig.subplots(), None)
    )
    steps = traces.steps
    x = np.arange(len(steps))
    rate = [s.hedges / max(s.calls, 1) for s in steps]
    wins = [s.hedge_wins / s.hedges if s.hedges else 0.0 for s in steps]
    left.bar(x - 0.2, rate, 0.4, color=PALETTE[0], label="hedge rate (hedges / calls)")
    left.bar(x + 0.2, wins, 0.4, color=PALETTE[2], label="hedge win rate (wins / hedges)")
    left.set_xticks(x, [s.step for s in steps], fontsize=8, rotation=20)
    left.set_ylabel("share (0 to 1)")
    left.set_ylim(0, 1.05)
    # above the bars, not on them: a rate of 1 reaches the top of the axes
    left.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False)
    if right is not None:
        names, counts = zip(*events, strict=True)
        colors = [PALETTE[4]] + [PALETTE[3]] * len(traces.skipped)
        right.barh(range(len(events)), counts, color=colors)
        right.set_yticks(range(len(events)), names, fontsize=7.5)
        right.invert_yaxis()
        right.set_xlabel("attempts (count)")
        for i, n in enumerate(counts):
            right.text(n, i, f" {n}", va="center", fontsize=8)
    calls = sum(s.calls for s in steps)
    hedges = sum(s.hedges for s in steps)
    won = sum(s.hedge_wins for s in steps)
    skipped = sum(n for _, n in traces.skipped)
    title = (
        f"Hedges fired on {percent(hedges / max(calls, 1))} of {calls:,} calls and won "
        f"{percent(won / hedges) if hedges else 'none'} of their races; "
        f"{_count(events[0][1], 'completion')} abandoned, "
        f"{_count(skipped, 'action')} skipped by budget or throttle"
    )
    rates = (
        "per step, the share of logical calls that started a hedge and the share of hedges "
        "that returned first (a low win rate means hedges start too early)"
    )
    caption = (
        f"Left: {rates}; right: attempts that finished after nobody waited, and cutoff "
        "actions the executor skipped (hedge budget spent, provider throttled)."
        if right is not None
        else f"Bars: {rates}; no attempt finished after nobody waited, and the executor "
        "skipped no cutoff action."
    )
    return finish(fig, name="trace_hedges", title=title, caption=caption)


def p99_figure(traces: Traces, plan: Plan | None) -> Figure | None:
    """
    Per step, the observed p99 from the traces next to the plan's predicted p99.
    """
    steps = [s for s in traces.steps if s.p99_s is not None]
    if not steps:
        return None
    predicted = {
        name: step.predicted.p99_s
        for name, step in (plan.steps.items() if plan else ())
        if step.predicted is not None
    }
    fig = new_figure(10.5, 4.2)
    ax = fig.subplots()
    x = np.arange(len(steps))
    observed = [float(s.p99_s or 0.0) for s in steps]
    ax.bar(x + (0.2 if predicted else 0.0), observed, 0.4, color=PALETTE[0],
           label="observed p99 (traces)")  # fmt: skip
    if predicted:
        ax.bar(x - 0.2, [predicted.get(s.step, 0.0) for s in steps], 0.4, color="0.7",
               label="predicted p99 (plan)")  # fmt: skip
    ax.set_xticks(x, [f"{s.step}\n{s.runs} runs" for s in steps], fontsize=8)
    ax.set_ylabel("step latency p99 (s)")
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False)
    over = [
        s.step
        for s, o in zip(steps, observed, strict=True)
        if s.step in predicted and o > 1.2 * predicted[s.step]
    ]
    compared = [s for s in steps if s.step in predicted]
    if compared:
        title = (
            f"Observed p99 exceeds the plan's prediction by over 20% on {listing(over)}"
            if over
            else f"Observed p99 is at most 20% above the plan's prediction on all "
            f"{len(compared)} steps compared"
        )
    else:
        slowest = max(steps, key=lambda s: s.p99_s or 0.0)
        title = (
            f"Observed p99 per step (no plan to compare): {slowest.step} is slowest at "
            f"{seconds(slowest.p99_s or 0.0)}"
        )
    caption = (
        "Each pair is one step: its p99 latency in the traced runs (first attempt's start to "
        "the winning attempt's end) beside the p99 the plan predicted; with few runs an "
        "observed p99 is close to the slowest run."
    )
    return finish(fig, name="trace_p99", title=title, caption=caption)
