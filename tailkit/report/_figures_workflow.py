"""
The workflow: the plan's DAG with each step's cutoff and action, and the policy comparison.
"""

from __future__ import annotations

import math
import textwrap

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tailkit.config import Plan, Step
from tailkit.report._common import PALETTE, Figure, finish, new_figure, seconds_axis
from tailkit.simulation import POLICY_TITLES, SimResult
from tailkit.text import percent, seconds


if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.text import Text


def _action(step: Step) -> str:
    cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
    if step.on_cutoff == "wait" or cutoff is None:
        return "waits (no cutoff)"
    clock = "if no first token by" if step.signal == "ttft" else "at"
    target = {"hedge": step.hedge_route, "downgrade": step.downgrade_route}.get(step.on_cutoff)
    when = seconds(cutoff).replace(" ", _NBSP)
    return f"{step.on_cutoff} {clock} {when}" + (f"\n→ {target}" if target else "")


def _depths(plan: Plan) -> dict[str, int]:
    depth: dict[str, int] = {}
    for name in plan.order():
        depth[name] = 1 + max((depth[d] for d in plan.steps[name].depends_on), default=-1)
    return depth


BOX_CHARS = 34  # a box line longer than this wraps (names and routes can be any length)
_NBSP = "\u00a0"  # keeps a number with its unit when a line wraps
_GAP_IN = 0.35  # free space between two boxes, inches


def _wrapped(text: str) -> str:
    return "\n".join(
        textwrap.fill(line, BOX_CHARS, break_on_hyphens=True) for line in text.splitlines()
    )


def dag_figure(plan: Plan) -> Figure:
    """
    The steps left to right by dependency depth, each with its route, cutoff, action and p99.
    """
    fig, title = dag_plot(plan)
    caption = (
        "Boxes are steps (arrows point from a step to the steps waiting on it), each with its "
        "route, what it does at its cutoff (red boxes act, blue ones wait) and its predicted "
        "p99 latency."
    )
    return finish(fig, name="workflow_dag", title=title, caption=caption)


def dag_plot(plan: Plan) -> tuple[MplFigure, str]:
    """
    The DAG's matplotlib figure and its title; the figure grows until no two boxes touch.

    Long lines wrap at `BOX_CHARS`; the boxes are then measured, and the figure made wide
    enough for the widest box in every column and tall enough for the tallest in every row.
    """
    depth = _depths(plan)
    layers: dict[int, list[str]] = {}
    for name in plan.order():
        layers.setdefault(depth[name], []).append(name)
    tallest = max(len(v) for v in layers.values())
    fig = new_figure(max(10.5, 2.6 * len(layers)), 1.5 * tallest + 1.4)
    ax = fig.subplots()
    pos: dict[str, tuple[float, float]] = {}
    for d, names in layers.items():
        for i, name in enumerate(names):
            pos[name] = (float(d), (len(names) - 1) / 2 - i)
    acting: dict[str, list[str]] = {}
    boxes = {}
    for name, (x, y) in pos.items():
        step = plan.steps[name]
        acts = step.on_cutoff != "wait"
        if acts:
            acting.setdefault(step.on_cutoff, []).append(name)
        p99 = (
            f"\npredicted p99 {seconds(step.predicted.p99_s).replace(' ', _NBSP)}"
            if step.predicted
            else ""
        )
        optional = "" if step.required else " (optional)"
        text = _wrapped(f"{name}{optional}\n{step.route}\n{_action(step)}{p99}")
        boxes[name] = ax.text(x, y, text, ha="center", va="center", fontsize=7.5, parse_math=False,
                bbox={"boxstyle": "round,pad=0.4", "fc": "#fde9d9" if acts else "#eef2f7",
                      "ec": PALETTE[1] if acts else "0.5"})  # fmt: skip
    for name, step in plan.steps.items():
        for dep in step.depends_on:
            # From the right edge of the step waited on to the left edge of the waiting one;
            # an arrow that skips a layer bends, so it does not run through the boxes between.
            skips = depth[name] - depth[dep] > 1
            ax.annotate(
                "", xy=(0.0, 0.5), xycoords=boxes[name], xytext=(1.0, 0.5),
                textcoords=boxes[dep],
                arrowprops={"arrowstyle": "->", "color": "0.4", "lw": 1.2,
                            "connectionstyle": f"arc3,rad={0.35 if skips else 0.0}"},
            )  # fmt: skip
    ax.set_xlim(-0.55, max(layers) + 0.55)
    ax.set_ylim(-tallest / 2 - 0.2, tallest / 2 + 0.2)
    ax.axis("off")
    _fit_boxes(fig, ax, list(boxes.values()), columns=len(layers), rows=tallest)
    n_acting = sum(len(v) for v in acting.values())
    how = ", ".join(f"{len(v)} {a}" for a, v in acting.items())
    title = (
        f"{plan.workflow}: the plan acts on {n_acting} of {len(plan.steps)} steps ({how}) "
        f"to meet its {seconds(plan.deadline_s)} deadline"
        if acting
        else f"{plan.workflow}: no step needs a cutoff to meet its {seconds(plan.deadline_s)} "
        "deadline"
    )
    return fig, title


def _fit_boxes(fig: MplFigure, ax: Axes, boxes: list[Text], *, columns: int, rows: int) -> None:
    """
    Grow ``fig`` until a column (a row) is as wide (tall) as the widest (tallest) box and a gap.
    """
    for _ in range(3):  # the layout moves a little as the figure grows: measure again
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        dpi = fig.dpi
        sizes = [b.get_bbox_patch().get_window_extent(renderer) for b in boxes]  # type: ignore[union-attr]
        need_w = max(e.width for e in sizes) / dpi + _GAP_IN
        need_h = max(e.height for e in sizes) / dpi + _GAP_IN
        area = ax.get_window_extent(renderer)
        unit_w = area.width / dpi / (columns - 1 + 1.1)
        unit_h = area.height / dpi / (rows + 0.4)
        grow_w = max(0.0, (need_w - unit_w) * (columns + 0.1))
        grow_h = max(0.0, (need_h - unit_h) * (rows + 0.4))
        if grow_w < 0.01 and grow_h < 0.01:
            return
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + grow_w + 0.05, height + grow_h + 0.05)


def policy_figure(comparison: Mapping[str, SimResult]) -> Figure:
    """
    End-to-end CCDFs of each policy on the same runs, with the deadline and the miss rates.
    """
    fig = new_figure(10.5, 5.0)
    ax = fig.subplots()
    deadline = next(iter(comparison.values())).deadline_s
    for color, (policy, result) in zip(PALETTE, comparison.items(), strict=False):
        end = np.sort(result.end_s[np.isfinite(result.end_s)])
        if end.size == 0:
            continue
        s = 1.0 - np.arange(1, end.size + 1) / result.end_s.size
        keep = s > 0
        name = POLICY_TITLES.get(policy, policy)
        ax.step(
            end[keep],
            s[keep],
            where="post",
            color=color,
            lw=1.6 if policy == "plan" else 1.1,
            label=f"{name}: miss {percent(result.miss_rate)}, p99 {seconds(result.p99_s)}",
        )
    if math.isfinite(deadline):
        ax.axvline(deadline, color="black", ls="--", lw=1.2)
        ax.text(deadline, 0.5, f" deadline {seconds(deadline)}", fontsize=8, va="center")
    ax.set_xscale("log")
    seconds_axis(ax.xaxis)
    ax.set_yscale("log")
    runs = max(r.runs for r in comparison.values())
    ax.set_ylim(0.5 / runs, 1.2)
    ax.set_xlabel("end-to-end run latency (s)")
    ax.set_ylabel("share of runs slower")
    ax.legend(fontsize=8, loc="lower left")
    plan = comparison.get("plan")
    baseline = comparison.get("none")
    if plan is not None and baseline is not None:
        title = (
            f"The plan misses the {seconds(deadline)} deadline in {percent(plan.miss_rate)} of "
            f"runs, against {percent(baseline.miss_rate)} with no cutoffs"
        )
    else:
        best = min(comparison, key=lambda p: comparison[p].miss_rate)
        title = f"{POLICY_TITLES.get(best, best)} misses the deadline least often"
    caption = (
        f"Each curve is the share of {runs:,} simulated runs slower than the x value, per "
        "policy on the same random draws; the lower a curve where it crosses the dashed "
        "deadline, the fewer runs miss it (failed runs count as misses)."
    )
    return finish(fig, name="policy_ccdf", title=title, caption=caption)
