"""
Where the tail is: latency CCDFs with the lognormal fit, the bucket heatmap, growth with work.
"""

from __future__ import annotations

import math

from typing import Any

import numpy as np

from tailkit.fit import min_calls_for_quantile
from tailkit.record import bucket_label
from tailkit.report._common import PALETTE, Figure, finish, listing, new_figure, seconds_axis
from tailkit.report._routes import LeftOut, Route, TailData, heaviness
from tailkit.text import percent, seconds, times


P99_CALLS = min_calls_for_quantile(0.99)  # fewest calls whose p99 has a bounded interval


def _grid(n: int, *, cols: int = 4) -> tuple[int, int]:
    cols = min(cols, n)
    return math.ceil(n / cols), cols


def survival(total_s: np.ndarray[Any, Any], cut_s: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """
    Kaplan-Meier survival at each finished call's latency (a cut call survives to its age).
    """
    times_s = np.concatenate([total_s, cut_s])
    event = np.concatenate([np.ones(total_s.size, bool), np.zeros(cut_s.size, bool)])
    order = np.argsort(times_s, kind="stable")
    times_s, event = times_s[order], event[order]
    at_risk = times_s.size - np.arange(times_s.size)
    s = np.cumprod(np.where(event, 1.0 - 1.0 / at_risk, 1.0))
    return times_s[event], s[event]


def _tail_words(row: dict[str, Any]) -> str:
    if row.get("transient") and row.get("transient_mixture"):
        return f"a transient tail holds {percent(float(row['transient_share']))} of its calls"
    if row.get("transient"):
        return "its slowest calls look transient"
    if row.get("fit") == "fits":
        return "the lognormal fits its tail"
    return f"its tail is {row.get('best_family') or 'not lognormal'}-shaped, not lognormal"


def ccdf_figure(routes: tuple[Route, ...], left_out: tuple[LeftOut, ...] = ()) -> Figure:
    """
    One panel per route: the survival curve on log-log axes, the lognormal fit and the cap.

    The headline names the heaviest tail of every route with a p99/p50, drawn or not: a route
    left out (too few calls to draw, or beyond the biggest) can still be the worst.
    """
    from scipy.special import ndtr

    rows, cols = _grid(len(routes))
    fig = new_figure(3.2 * cols, 2.7 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, route in zip(axes.flat, routes, strict=False):
        x, s = survival(route.total_s, route.cut_s)
        keep = s > 0
        ax.step(x[keep], s[keep], where="post", color=PALETTE[0], lw=1.4, label="measured")
        mu, sigma = float(route.row["mu"]), float(route.row["sigma"])
        grid = np.geomspace(max(x.min(), 1e-3), x.max() * 1.5, 200)
        fitted = 1.0 - ndtr((np.log(grid) - mu) / max(sigma, 1e-9))
        ax.plot(grid, fitted, "--", color=PALETTE[1], lw=1.2, label="lognormal fit")
        if route.cut_s.size:
            cap = float(route.cut_s.max())
            ax.axvline(cap, color="0.3", ls=":", lw=1.2)
            ax.text(cap, 0.5, f" cap {seconds(cap)}\n {route.cut_s.size} cut",
                    fontsize=7, va="center", ha="right", rotation=90)  # fmt: skip
        p99 = float(route.row["p99_s"])
        if math.isfinite(p99):
            ax.axhline(0.01, color="0.75", lw=0.8)
        ax.set_xscale("log")
        seconds_axis(ax.xaxis)
        ax.set_yscale("log")
        floor = 1.0 / max(x.size + route.cut_s.size, 2)
        ax.set_ylim(floor * 0.7, 1.3)
        ax.set_title(f"{route.label}\n{_ratio_words(route)}, n={int(route.row['n'])}",
                     fontsize=8)  # fmt: skip
        ax.set_xlabel("latency (s)", fontsize=8)
        ax.set_ylabel("share of calls slower", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(routes) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="lower left")
    caption = (
        "Each curve is the share of calls slower than the latency on the x axis (Kaplan-Meier, "
        "so cut calls count); where the solid curve lies above the dashed lognormal fit, the "
        "tail is heavier than a lognormal; the grey line is the 1% level (p99), the dotted "
        "line the cap at which calls were cut."
    )
    return finish(fig, name="latency_ccdf", title=headline(routes, left_out), caption=caption)


def headline(routes: tuple[Route, ...], left_out: tuple[LeftOut, ...] = ()) -> str:
    """
    The latency section's finding: the heaviest tail over every route, drawn or not.

    One route: its own tail. A route left out (too few calls to draw, or beyond the biggest)
    can still be the worst: it is named first, with why it is not drawn.
    """
    top = TailData(routes, [], [], left_out).heaviest()
    hidden = top[2] if top is not None else None
    hidden_words = (
        f"{hidden.label} has the heaviest tail ({_row_ratio_words(hidden.row)}; not drawn: "
        f"{hidden.why})"
        if hidden is not None
        else ""
    )
    if not routes:
        return hidden_words or "No route has a p99/p50 to compare"
    worst = max(routes, key=lambda r: heaviness(r.row["p99_p50"]))
    words = f"{_ratio_words(worst)}; {_tail_words(worst.row)}"
    if hidden_words:
        return f"{hidden_words}; of the routes drawn, {worst.label}: {_ratio_words(worst)}"
    if len(routes) == 1 and not left_out:
        return f"{worst.label}: {words}"
    return f"{worst.label} has the heaviest tail: {words}"


def _row_ratio_words(row: dict[str, Any]) -> str:
    ratio = float(row["p99_p50"])
    return f"p99 is {times(ratio)} its median" if math.isfinite(ratio) else "p99 unbounded"


def _ratio_words(route: Route) -> str:
    """
    ``p99 is 8.9x its median``, or, when more than 1% of calls were cut, that p99 is past the cap.
    """
    ratio = float(route.row["p99_p50"])
    if math.isfinite(ratio):
        return f"p99 is {times(ratio)} its median"
    cap = seconds(float(route.cut_s.max())) if route.cut_s.size else "the cap"
    return f"over 1% of calls pass the {cap} cap"


def _labels(edges: tuple[int, ...]) -> list[str]:
    return [bucket_label(edges, e) for e in edges]


def heatmap_figure(data: TailData, by: tuple[str, ...]) -> Figure | None:
    """
    p99/p50 per input x output bucket for each route, with the calls behind every cell.
    """
    buckets = data.edges
    in_labels, out_labels = _labels(buckets.input_edges), _labels(buckets.output_edges)
    shown = [r.key for r in data.routes]
    names = {r.key: r.label for r in data.routes}
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {k: [] for k in shown}
    for row in data.buckets:
        key = tuple(row[k] for k in by)
        # Calls without token counts have no bucket (`?`): they have no cell to draw.
        known = row["input_bucket"] in in_labels and row["output_bucket"] in out_labels
        if key in cells and known and row.get("p99_p50") is not None:
            cells[key].append(row)
    shown = [k for k in shown if cells[k]][:6]
    # a grid of counts without one coloured cell is an empty plot: the section's note says why
    if not any(_enough(r) for k in shown for r in cells[k]):
        return None
    from matplotlib.colors import LogNorm

    rows, cols = _grid(len(shown), cols=3)
    fig = new_figure(4.4 * cols, 3.4 * rows + 0.8)
    axes = fig.subplots(rows, cols, squeeze=False)
    norm = LogNorm(vmin=1.0, vmax=10.0)
    best: tuple[float, str] = (0.0, "")
    image = None
    for ax, key in zip(axes.flat, shown, strict=False):
        grid = np.full((len(in_labels), len(out_labels)), np.nan)
        for row in cells[key]:
            if row["input_bucket"] not in in_labels or row["output_bucket"] not in out_labels:
                continue
            i, j = in_labels.index(row["input_bucket"]), out_labels.index(row["output_bucket"])
            n, ratio = int(row["n_ok"]), float(row["p99_p50"])
            enough = _enough(row)
            grid[i, j] = ratio if enough else np.nan
            text = f"{times(ratio)}\nn={n}" if enough else f"n={n}"
            # white on the dark half of the colour map, grey where there is no colour
            ink = ("white" if norm(min(ratio, 10.0)) > 0.5 else "black") if enough else "0.45"
            ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color=ink)
            if enough and ratio > best[0]:
                best = (ratio, f"{names[key]} at in {row['input_bucket']} / out "
                               f"{row['output_bucket']} tokens (n={n})")  # fmt: skip
        image = ax.imshow(np.clip(grid, 1.0, 10.0), cmap="magma_r", norm=norm, aspect="auto")
        ax.set_xticks(range(len(out_labels)), out_labels, fontsize=7, rotation=30)
        ax.set_yticks(range(len(in_labels)), in_labels, fontsize=7)
        ax.set_xlabel("output tokens", fontsize=8)
        ax.set_ylabel("input tokens", fontsize=8)
        ax.set_title(names[key], fontsize=9)
    for ax in axes.flat[len(shown) :]:
        ax.set_visible(False)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.6, label="p99 / p50 (×)")
        bar.set_ticks([1, 2, 3, 5, 10], labels=["1×", "2×", "3×", "5×", "≥10×"])
        bar.ax.minorticks_off()
    title = f"The widest tail is {best[1]}: p99 is {times(best[0])} the median"
    caption = (
        "Each cell is one input × output token bucket of a route: its colour and number are "
        f"p99/p50 (darker is a heavier tail) and n its finished calls; cells with fewer than "
        f"{P99_CALLS} calls (the fewest that bound a p99) show only their count."
    )
    return finish(fig, name="bucket_heatmap", title=title, caption=caption)


def _enough(row: dict[str, Any]) -> bool:
    """
    Whether a bucket's p99/p50 is worth a colour: finite, over enough calls for a p99.
    """
    ratio = row.get("p99_p50")
    return ratio is not None and int(row["n_ok"]) >= P99_CALLS and math.isfinite(float(ratio))


def growth_figure(data: TailData, by: tuple[str, ...]) -> Figure | None:
    """
    Per route, p99/p50 against its buckets' median latency, labelled with its tail kind.
    """
    verdicts = {tuple(v[k] for k in by): v for v in data.verdicts}
    lines = []
    for route in data.routes:
        pts = [
            (float(r["p50_s"]), float(r["p99_p50"]), int(r["n_ok"]))
            for r in data.buckets
            if tuple(r[k] for k in by) == route.key
            and r.get("p99_p50") is not None
            and int(r["n_ok"]) >= P99_CALLS
            and math.isfinite(float(r["p99_p50"]))
        ]
        if len(pts) >= 2:
            lines.append((route, sorted(pts), verdicts.get(route.key, {})))
    if not lines:
        return None
    fig = new_figure(10.5, 5.0)
    ax = fig.subplots()
    kinds: dict[str, list[str]] = {}
    for color, (route, pts, verdict) in zip(PALETTE * 4, lines, strict=False):
        p50, ratio, n = (np.array(v) for v in zip(*pts, strict=True))
        kind = str(verdict.get("tail_kind") or "unknown")
        if kind in ("transient", "mixed") and not verdict.get("escape_confirmed_by"):
            kind += " unconfirmed"  # single calls only: no repeat attempts or paired calls
        kinds.setdefault(kind, []).append(route.label)
        ax.scatter(p50, ratio, s=8 + 40 * n / n.max(), color=color,
                   label=f"{route.label}: {_KIND_WORDS[kind]}")  # fmt: skip
    ax.set_xscale("log")
    seconds_axis(ax.xaxis)
    ax.set_xlabel("median latency of the token bucket (s)")
    ax.set_ylabel("p99 / p50 in the bucket (×)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    said = [f"{_KIND_WORDS[k]} on {listing(kinds[k])}" for k in _KIND_WORDS if kinds.get(k)]
    title = "A fresh attempt: " + "; ".join(said)
    caption = (
        "Each point is one token bucket of a route with enough calls for a p99 (point size: "
        "calls), and the legend's verdict comes not from this picture but from regressing the "
        "route's latency on its token counts: calls slower than their size explains are "
        "transient (a fresh attempt escapes them, where repeat attempts or paired calls confirm "
        "it; else they only look transient), a tail that size explains is work (a fresh "
        "attempt is as slow), both is mixed, and can't tell means the data cannot decide."
    )
    return finish(fig, name="tail_growth", title=title, caption=caption)


_KIND_WORDS = {
    "transient": "escapes the tail (transient)",
    "transient unconfirmed": "may escape the tail (looks transient in single calls)",
    "mixed": "escapes part of it (mixed)",
    "mixed unconfirmed": "may escape part of it (looks mixed in single calls)",
    "work": "is as slow (work)",
    "unknown": "can't tell",
}


def phase_figure(routes: tuple[Route, ...]) -> Figure | None:
    """
    Per route, TTFT and generation p50 and p99: which phase holds the tail.
    """
    shown = [r for r in routes if r.ttft_s.size >= 2 and r.row.get("ttft_p99_s") is not None]
    if not shown:
        return None
    fig = new_figure(10.5, 0.5 * len(shown) + 2.1)
    ax = fig.subplots()
    y = np.arange(len(shown))
    ends: list[float] = []
    for offset, (phase, color) in enumerate((("ttft", PALETTE[0]), ("gen", PALETTE[3]))):
        p50 = np.array([float(r.row[f"{phase}_p50_s"]) for r in shown])
        p99 = np.array([float(r.row[f"{phase}_p99_s"]) for r in shown])
        ends += [float(v) for v in (*p50, *p99) if math.isfinite(v) and v > 0]
        yy = y + (offset - 0.5) * 0.35
        name = "time to first token" if phase == "ttft" else "generation (after first token)"
        ax.barh(yy, p99 - p50, 0.18, left=p50, color=color, alpha=0.5,
                label=f"{name}: p50 → p99")  # fmt: skip
        ax.plot(p99, yy, "|", color=color, ms=10, mew=2)
    ax.set_yticks(y, [r.label for r in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    if ends:  # every bar whole: a log axis's autoscale can cut a bar's start
        ax.set_xlim(min(ends) / 1.3, max(ends) * 1.3)
    seconds_axis(ax.xaxis)
    ax.set_xlabel("seconds (p50 to p99 of each phase)")
    # Outside the axes, under them: a legend inside would cover some route's bar.
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)
    for yi, r in zip(y, shown, strict=True):
        where = f"tail in {r.row['tail_phase']}"
        ax.text(1.01, float(yi), where, transform=ax.get_yaxis_transform(), fontsize=7,
                va="center")  # fmt: skip
    in_ttft = [r.label for r in shown if r.row.get("tail_phase") == "ttft"]
    in_gen = [r.label for r in shown if r.row.get("tail_phase") == "generation"]
    parts = []
    if in_ttft:
        parts.append(f"in time to first token on {listing(in_ttft)} (cut on TTFT)")
    if in_gen:
        parts.append(f"in generation on {listing(in_gen)}")
    title = "The tail is " + "; ".join(parts) if parts else "The tail is in neither phase alone"
    caption = (
        "Each bar runs from a phase's median to its p99 for one route (streamed calls only); "
        "the longer bar is the phase that holds the tail, and a tail in time to first token "
        "can be cut early with a TTFT cutoff."
    )
    return finish(fig, name="ttft_vs_generation", title=title, caption=caption)
