"""
The ``tailkit`` command line, assembled from one module per command.

Each command parses its options, calls one library function and prints its result.
"""

from __future__ import annotations

import sys

from tailkit.cli import (
    _check,
    _demo,
    _docs,
    _ingest,
    _races,
    _replay,
    _report,
    _serve,
    _stats,
    _workflow,
)
from tailkit.cli._help import HelpGroup, HelpTyper


app = HelpTyper(
    name="tailkit",
    cls=HelpGroup,
    help="Measure LLM latency tails and keep workflows inside their deadline.\n\n"
    "Reference: `tailkit docs` (call record, plan, deadline, ledger, formats).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command(name="ingest")(_ingest.ingest)
app.command(name="summary")(_ingest.summary)
app.command(name="rejects")(_ingest.rejects)
app.command(name="stats")(_stats.stats)
app.command(name="calibrate")(_workflow.calibrate)
app.command(name="simulate")(_workflow.simulate)
app.command(name="demo")(_demo.demo)
app.command(name="serve")(_serve.serve)
app.command(name="report")(_report.report)
app.command(name="races")(_races.races)
app.command(name="replay")(_replay.replay)
app.command(name="check")(_check.check)
app.command(name="docs")(_docs.docs)


def main() -> None:
    """
    Run the app (for ``python -m tailkit.cli``).
    """
    app(prog_name="tailkit")
    sys.exit(0)
