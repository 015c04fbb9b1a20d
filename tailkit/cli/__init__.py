"""
The ``tailkit`` command line, assembled from one module per command.

Each command parses its options, calls one library function and prints its result.

The commands load lazily: `COMMANDS` names each one's module and the summary ``tailkit
--help`` lists, and a module is imported only when its command runs or its own ``--help`` is
drawn. ``tailkit --help``, ``tailkit docs`` and ``tailkit check`` therefore import neither
DuckDB, NumPy nor SciPy for the other commands (issue 31: short commands start fast); a test
holds each summary to its function's docstring, so the two cannot drift apart.
"""

from __future__ import annotations

import sys

from tailkit.cli._help import HelpGroup, HelpTyper


COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": (
        "tailkit.cli._ingest:ingest",
        "Load call logs into the store and print what was stored.",
    ),
    "summary": (
        "tailkit.cli._ingest:summary",
        "Show what the store holds: calls per route with p50/p99, and calls per token bucket.",
    ),
    "rejects": (
        "tailkit.cli._ingest:rejects",
        "List rejected input rows with their file, row number, reason and raw text.",
    ),
    "stats": (
        "tailkit.cli._stats:stats",
        "Show where the latency tail is, per group and token bucket, with intervals and fits.",
    ),
    "calibrate": (
        "tailkit.cli._workflow:calibrate",
        "Choose each step's cutoff and action so the workflow keeps its deadline; write the plan.",
    ),
    "simulate": (
        "tailkit.cli._workflow:simulate",
        "Simulate a plan next to no cutoffs, sequential retry at p95 and hedging at p95 "
        "everywhere.",
    ),
    "demo": (
        "tailkit.cli._demo:demo",
        "Run the whole tailkit loop on the bundled samples and check the plan's predictions.",
    ),
    "serve": (
        "tailkit.cli._serve:serve",
        "Serve OpenAI's chat completions and Anthropic's Messages API on loopback, with faults.",
    ),
    "report": (
        "tailkit.cli._report:report",
        "Write an HTML report (figures embedded, opens offline) and its PNGs.",
    ),
    "races": (
        "tailkit.cli._races:races",
        "Find the races between a harness and its tool: two logs of the same calls, two clocks.",
    ),
    "replay": (
        "tailkit.cli._replay:replay",
        "Rehearse a plan against the calls it was calibrated on, and compare with its predictions.",
    ),
    "check": (
        "tailkit.cli._check:check",
        "Check a calibrated plan's predictions against the ledgers of its production runs.",
    ),
    "refresh": (
        "tailkit.cli._refresh:refresh",
        "Check the running plan against its ledgers; if it drifted, recalibrate and replace it.",
    ),
    "docs": ("tailkit.cli._docs:docs", "List the reference pages, or print one (Markdown)."),
}
"""Each command, in the order ``--help`` lists them: ``module:function`` and its summary."""

app = HelpTyper(
    name="tailkit",
    cls=HelpGroup,
    help="Measure LLM latency tails and keep workflows inside their deadline.\n\n"
    "Reference: `tailkit docs` (call record, plan, deadline, ledger, formats).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _name, (_target, _summary) in COMMANDS.items():
    app.lazy_command(_name, _target, _summary)


def main() -> None:
    """
    Run the app (for ``python -m tailkit.cli``).
    """
    app(prog_name="tailkit")
    sys.exit(0)
