"""
Fit diagnostics: QQ plots against each route's lognormal, its verdict and transient share.
"""

from __future__ import annotations

import math

import numpy as np

from tailkit.report._common import PALETTE, Figure, finish, listing, new_figure, seconds_axis
from tailkit.report._routes import Route
from tailkit.text import percent


def qq_figure(routes: tuple[Route, ...]) -> Figure | None:
    """
    One QQ panel per route: measured log latency against the fitted lognormal's quantiles.
    """
    shown = [r for r in routes if r.total_s.size >= 10]
    if not shown:
        return None
    from scipy.special import ndtri

    cols = min(4, len(shown))
    rows = math.ceil(len(shown) / cols)
    fig = new_figure(3.2 * cols, 3.0 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, route in zip(axes.flat, shown, strict=False):
        mu, sigma = float(route.row["mu"]), float(route.row["sigma"])
        measured = np.sort(route.total_s)
        n = measured.size
        probs = (np.arange(1, n + 1) - 0.5) / n
        expected = np.exp(mu + sigma * ndtri(probs))
        # every call in the top 500, an even spread below: the body needs no 60,000 dots
        idx = np.arange(n)
        if n > 2000:
            spread = np.linspace(0, n - 1, 1500).astype(np.int64)
            idx = np.unique(np.concatenate([spread, np.arange(n - 500, n)]))
        ax.loglog(expected[idx], measured[idx], ".", ms=2, color=PALETTE[0], alpha=0.6)
        lo, hi = min(expected[0], measured[0]), max(expected[-1], measured[-1])
        ax.plot([lo, hi], [lo, hi], "--", color=PALETTE[1], lw=1)
        p99 = float(np.exp(mu + sigma * ndtri(0.99)))
        ax.axvline(p99, color="0.75", lw=0.8)
        row = route.row
        verdict = f"fit: {row['fit']} (p={float(row['fit_p']):.2g}); best {row['best_family']}"
        share = (
            f"transient share {percent(float(row['transient_share']))} "
            f"[{percent(float(row['transient_share_lo']))}–"
            f"{percent(float(row['transient_share_hi']))}]"
            if row.get("transient_mixture")
            else "no separate slow tail in the mixture fit"
        )
        ax.set_title(f"{route.label}\n{verdict}\n{share}", fontsize=7.5)
        seconds_axis(ax.xaxis)
        seconds_axis(ax.yaxis)
        ax.set_xlabel("lognormal quantile (s)", fontsize=8)
        ax.set_ylabel("measured quantile (s)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(shown) :]:
        ax.set_visible(False)
    rejected = [r.label for r in shown if r.row.get("fit") != "fits"]
    transient = [r.label for r in shown if r.row.get("transient_mixture")]
    if len(shown) == 1:
        fits = f"the lognormal {'is rejected for' if rejected else 'fits'} {shown[0].label}"
    elif len(rejected) == len(shown):
        fits = f"the lognormal is rejected for all {len(shown)} routes"
    else:
        fits = f"the lognormal fits {len(shown) - len(rejected)} of {len(shown)} routes"
    title = (
        fits[0].upper()
        + fits[1:]
        + "; "
        + (f"transient tails on {listing(transient)}" if transient else "no transient tails")
    )
    caption = (
        "Each point is one measured call against the same quantile of the route's fitted "
        "lognormal (log axes); on the dashed diagonal the fit is exact, points bending above "
        "it at the right are a heavier tail than the fit, and the grey line is the fit's p99."
    )
    return finish(fig, name="fit_qq", title=title, caption=caption)
