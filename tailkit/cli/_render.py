"""
Plain-text and JSON renderings of library results, for the CLI.

The text renderings are lines for a terminal: every name from the data (a file, a provider, a
model, a reason) is spelt with `tailkit.text.printable`, and a column is padded by the cells
its text fills (a CJK character fills two). Names are never shortened: two long model ids that
differ only in the middle or at the end stay two names. The JSON renderings keep every value
exact (JSON escapes control characters itself).
"""

from __future__ import annotations

import json

from dataclasses import asdict
from typing import Any

from tailkit import text
from tailkit.cli._common import error_text
from tailkit.errors import IngestError
from tailkit.ingest import FileResult, IngestReport
from tailkit.store import StoreSummary


def _n(value: int) -> str:
    return text.count(value)


def _s(value: float | None) -> str:
    return text.number(value, 2)


def _route(provider: str, model: str) -> str:
    # Whole: a cut id reads as another model (llama-2-7… for a 70b); the column grows instead.
    return text.printable(f"{provider}/{model}")


def _left(value: str, width: int) -> str:
    """
    ``value`` padded on the right to ``width`` terminal cells.
    """
    from rich.cells import cell_len

    return value + " " * max(width - cell_len(value), 0)


def file_line(result: FileResult) -> str:
    """
    One line per ingested file; a file skipped as already ingested says so, and why.
    """
    path, why = text.printable(result.path), text.printable(result.why)
    if result.skipped:
        return f"skipped {path}: {why}"
    line = (
        f"{path}: {result.format} ({why}): {_n(result.rows_in)} rows, "
        f"{_n(result.stored)} stored, {_n(result.rejected)} rejected, "
        f"{_n(result.duplicates)} duplicates"
    )
    if result.inferred_provider:
        line += f", {_n(result.inferred_provider)} with provider inferred from the model name"
    if result.already_ingested is not None:
        line += (
            f"; already ingested as #{result.already_ingested} with the same options, "
            "nothing stored (other --map/--set/--unit options load it again)"
        )
    return line


def totals_text(report: IngestReport) -> list[str]:
    """
    The reconciliation line, provider inferences, and the rejects by reason when any.
    """
    totals = report.totals()
    files = sum(1 for f in report.files if not f.skipped)
    lines = [
        f"ingested {files} file(s): {_n(totals['rows_in'])} rows in = "
        f"{_n(totals['stored'])} stored + {_n(totals['rejected'])} rejected + "
        f"{_n(totals['duplicates'])} duplicates skipped"
    ]
    if totals["inferred_provider"]:
        lines.append(
            f"{_n(totals['inferred_provider'])} stored call(s) with provider inferred from "
            "the model name"
        )
    reasons = report.reasons()
    if reasons:
        lines.append(
            "rejected by reason: "
            + ", ".join(f"{text.printable(k)} {_n(v)}" for k, v in reasons.items())
        )
        lines.append("see them with: tailkit rejects")
    return lines


def ingest_text(report: IngestReport) -> list[str]:
    """
    The ingest summary: one line per file, skipped files, totals, rejects by reason.
    """
    lines = [file_line(f) for f in report.files if not f.skipped]
    skipped: dict[str, int] = {}
    for f in report.files:
        if f.skipped:
            skipped[f.why] = skipped.get(f.why, 0) + 1
    lines.extend(f"skipped {n} file(s): {text.printable(why)}" for why, n in skipped.items())
    return lines + totals_text(report)


def summary_text(summary: StoreSummary) -> list[str]:
    """
    The store overview: routes with their latency, and the token-bucket matrix.
    """
    lines = [
        f"store: {_n(summary.calls)} calls, {_n(summary.rejects)} rejects, "
        f"{_n(summary.ingests)} ingests"
    ]
    if not summary.routes:
        return lines
    from rich.cells import cell_len

    names = [_route(r.provider, r.model) for r in summary.routes]
    width = max(cell_len(n) for n in ["route", *names])
    lines.append(
        f"{_left('route', width)}  {'calls':>9}  {'ok':>9}  {'failed':>7}  {'cut':>6}  "
        f"{'ttft':>9}  {'p50_s':>7}  {'p99_s':>7}"
    )
    for name, r in zip(names, summary.routes, strict=True):
        lines.append(
            f"{_left(name, width)}  {_n(r.calls):>9}  {_n(r.ok):>9}  "
            f"{_n(r.failed):>7}  {_n(r.censored):>6}  {_n(r.with_ttft):>9}  "
            f"{_s(r.p50_s):>7}  {_s(r.p99_s):>7}"
        )
    lines.append("calls per token bucket (rows: input tokens, columns: output tokens)")
    head = "".join(f"{label:>10}" for label in summary.output_labels)
    lines.append(f"{'':>10}{head}")
    for a in summary.input_labels:
        cells = "".join(
            f"{_n(summary.bucket_counts.get((a, b), 0)):>10}" for b in summary.output_labels
        )
        lines.append(f"{a:>10}{cells}")
    return lines


def ingest_json(report: IngestReport, summary: StoreSummary | None) -> str:
    """
    The ingest report (and store summary) as one JSON document.
    """
    doc: dict[str, Any] = {
        "files": [asdict(f) for f in report.files],
        "totals": report.totals(),
        "rejected_by_reason": report.reasons(),
        "errors": [error_text(e, "ingest") for e in report.errors],
    }
    if summary is not None:
        doc["store"] = summary_json(summary)
    return json.dumps(doc, indent=2, default=str)


def summary_json(summary: StoreSummary) -> dict[str, Any]:
    """
    The store summary as plain data.
    """
    return {
        "calls": summary.calls,
        "rejects": summary.rejects,
        "ingests": summary.ingests,
        "routes": [asdict(r) for r in summary.routes],
        "buckets": [
            {"input": a, "output": b, "calls": n}
            for (a, b), n in sorted(summary.bucket_counts.items())
        ],
    }


def error_line(error: IngestError) -> str:
    """
    How one failed file is reported on stderr (its option spelt as ingest's flag).
    """
    return f"Error: {text.printable(error_text(error, 'ingest'))}"


def formats_text(*, as_json: bool = False) -> list[str]:
    """
    The formats `tailkit ingest` reads (each detected by content with --format auto).
    """
    from tailkit.formats import FORMATS, describe

    rows = [{"format": name, "reads": describe(name).replace("`", "")} for name in FORMATS]
    if as_json:
        return [json.dumps(rows, indent=2)]
    width = max(len(r["format"]) for r in rows)
    return [f"{r['format']:<{width}}  {r['reads']}" for r in rows]
