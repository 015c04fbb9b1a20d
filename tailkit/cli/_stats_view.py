"""
How `tailkit stats` shows the tail table: a rich table for people, JSON/CSV/Parquet for tools.

Every cell and line that holds a value from the data (a group's name, a warning that quotes
one) is escaped (`tailkit.cli._common.shown`); every column folds a long value onto more lines
rather than cutting it. JSON carries the values exact.
"""

from __future__ import annotations

import json
import math

from typing import Any

import polars as pl

from rich.console import Console
from rich.table import Table

from tailkit import text
from tailkit.cli._common import shown
from tailkit.fit import min_calls_for_quantile
from tailkit.tails import FIT_COLUMNS, TailReport


_KIND_CELL = {"transient": "yes", "mixed": "mixed", "work": "no", "unknown": "?"}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _num(value: Any, digits: int = 2) -> str:
    return text.number(value, digits)


def _with_interval(row: dict[str, Any], name: str) -> str:
    # A group with under two finished calls has no latency columns, and when no group has
    # any, the table lacks them altogether: both read "-".
    if _missing(row.get(name)):
        return "-"
    return f"{_num(row[name])} [{_num(row.get(name + '_lo'))}–{_num(row.get(name + '_hi'))}]"


def _percent(value: Any) -> str:
    return "-" if _missing(value) else f"{100 * value:.1f}%"


def _fit(row: dict[str, Any]) -> str:
    fit = row.get("fit")
    if fit is None:
        return "-"
    best = row.get("best_family")  # null unless the families were ranked (--fits)
    return f"rejected, best {best}" if fit == "rejected" and best else str(fit)


def _evidence(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """
    A route's evidence in four short cells: residual tail, size, time, repeat attempts.
    """
    residual = "-"
    if not _missing(row["residual_share"]):
        residual = (
            f"{_percent(row['residual_share'])} [{_percent(row['residual_share_lo'])}–"
            f"{_percent(row['residual_share_hi'])}]"
        )
        if row["residual_share"] > 0 and not _missing(row["residual_scale"]):
            residual += f" ×{row['residual_scale']:.1f}"
    if not _missing(row["ttft_residual_share"]) and row["ttft_residual_share"] > 0:
        residual += (
            f"; first token {_percent(row['ttft_residual_share'])} "
            f"×{row['ttft_residual_scale']:.1f}"
        )
    size = (
        "-"
        if not row["size_features"] or _missing(row["size_r2"])
        else f"R²={_percent(max(row['size_r2'], 0.0))}"
    )
    time = (
        "-"
        if _missing(row["clustering_p"])
        else (f"{'clustered' if row['clustered'] else 'spread'} (p={row['clustering_p']:.2g})")
    )
    hedges = (
        "-" if not row["hedge_pairs"] else (f"{row['hedge_escaped']}/{row['hedge_pairs']} escaped")
    )
    return residual, size, time, hedges


def render_table(
    report: TailReport, keys: list[str], console: Console, *, limit: int | None = None
) -> None:
    """
    Print the tail table, the work-vs-transient verdicts and the warnings.

    With ``limit``, only the table's ``limit`` biggest groups (a short table, no verdicts).
    """
    if report.table.is_empty():
        console.print("No calls to describe: the store is empty, or the filter matches nothing.")
        return
    table = Table(title="Where the tail is (seconds; [95% interval])", show_lines=False)
    for key in keys:
        table.add_column(shown(key.replace("_bucket", "")), overflow="fold")
    for name in ("n", "cut", "failed", "p50", "p99", "p99/p50", "σ", "fit", "transient",
                 "tail in", "signal"):  # fmt: skip
        table.add_column(
            name, justify="right" if name in ("n", "cut", "failed") else "left", overflow="fold"
        )
    rows = report.table if limit is None else report.table.sort("n", descending=True).head(limit)
    for row in rows.iter_rows(named=True):
        # The route's verdict in one word: "yes" is transient only, a mixed route says so.
        transient = _KIND_CELL.get(str(row.get("tail_kind")), "?")
        if row.get("transient") and row.get("transient_mixture"):
            # The row's own mixture (size not taken out): not the verdict's residual tail.
            share, scale = row["transient_share"], row["transient_scale"]
            transient += f", slow part {share:.1%} ×{scale:.1f}"
        table.add_row(
            *(shown(row[k]) for k in keys),
            f"{row['n']:,}",
            f"{row['censored_share']:.1%}",
            f"{row['failed_share']:.1%}",
            _with_interval(row, "p50_s"),
            _with_interval(row, "p99_s"),
            _with_interval(row, "p99_p50"),
            _num(row.get("sigma")),
            shown(_fit(row)),
            transient,
            shown(row.get("tail_phase") or "-"),
            shown(row.get("signal") or "-"),
        )
    console.print(table)
    if limit is not None:
        return
    if not report.verdicts.is_empty():
        verdicts = Table(title="Would a fresh attempt escape the tail? (per route)")
        by = report.verdicts.columns[: report.verdicts.columns.index("n")]  # the route
        for name in (*by, "kind", "residual tail", "size", "time", "repeats", "verdict"):
            verdicts.add_column(shown(name), overflow="fold")
        for row in report.verdicts.iter_rows(named=True):
            cells = (row[k] for k in by), (row["tail_kind"],), _evidence(row), (row["verdict"],)
            verdicts.add_row(*(shown(cell) for group in cells for cell in group))
        console.print(verdicts)
    _print_warnings(report.table, keys, console)


def _print_warnings(table: pl.DataFrame, keys: list[str], console: Console) -> None:
    """
    One line for all groups whose p99 is unbounded, one line per other warning.
    """
    unbounded, empty = [], []
    for row in table.filter(pl.col("warning").is_not_null()).iter_rows(named=True):
        where = ", ".join(shown(row[k]) for k in keys)
        if "not bounded above" in str(row["warning"]):
            unbounded.append(where)
        elif "no latency statistics" in str(row["warning"]):
            empty.append(where)
        else:
            console.print(f"[yellow]warning[/yellow] {where}: {shown(row['warning'])}")
    if empty:
        console.print(
            f"[yellow]note[/yellow] {len(empty)} group(s) have fewer than two finished calls "
            f"(the rest cut or failed), so no latency: {_some(empty)}"
        )
    if unbounded:
        console.print(
            f"[yellow]warning[/yellow] the p99 of {len(unbounded)} group(s) is not bounded above "
            f"(a 95% bound needs at least {min_calls_for_quantile(0.99)} calls): "
            f"{_some(unbounded)}"
        )
    if "quantile_rel_error" in table.columns and table["quantile_rel_error"].max() is not None:
        worst = float(table["quantile_rel_error"].max())  # type: ignore[arg-type]
        console.print(
            f"[yellow]note[/yellow] quantiles from mergeable sketches: every p50-p99 is within "
            f"{100 * worst:.2g} % of the exact value (column quantile_rel_error, per group)"
        )


def _some(names: list[str], shown: int = 3) -> str:
    more = f"; and {len(names) - shown} more" if len(names) > shown else ""
    return "; ".join(names[:shown]) + more


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def to_json(report: TailReport, *, engine: dict[str, Any] | None = None) -> str:
    """
    Both tables as one JSON document (non-finite numbers as null / "inf").

    ``engine`` describes what computed them (``stats --json``'s ``"engine"``); ``"fits"`` says
    whether the rows' `FIT_COLUMNS` were computed, and how to get them when not.
    """
    doc: dict[str, Any] = {"engine": engine} if engine else {}
    doc["fits"] = {
        "computed": report.fits,
        "columns": list(FIT_COLUMNS),
        "note": "the family ranking and the transient-tail mixture of every row"
        + ("" if report.fits else ": null here; tailkit stats --fits computes them"),
    }
    doc |= {
        "table": [{k: _clean(v) for k, v in r.items()} for r in report.table.iter_rows(named=True)],
        "verdicts": [
            {k: _clean(v) for k, v in r.items()} for r in report.verdicts.iter_rows(named=True)
        ],
    }
    return json.dumps(doc, indent=2, default=str)
