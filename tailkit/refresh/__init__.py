"""
The drift loop in one call: check the running plan, recalibrate on recent calls, replace it.

`refresh` checks the plan a service runs against the ledgers of its runs
(`tailkit.check.check_plan`). When a line drifted (or when forced) it ingests the ledgers into
the store, calibrates the workflow again on the store's recent calls (``since``: six hours
back from the newest call by default) with the running plan's deadline, hedge budget and
routing mode, and writes the new plan over the plan file in one step, the old one kept as
``PLAN.prev``. A service that follows the file (`tailkit.executor.follow_plan`) runs the new
plan from its next poll on. Scheduled (cron, a systemd timer), it keeps a plan true to its
providers; its exit code says what it did (`EXIT_CODES`; 2 is bad input).

Example::

    result = refresh("plan.yaml", "workflow.yaml", ["ledger.jsonl"], db="tailkit.duckdb")
    print(result.summary())
    for row in result.steps():
        print(row["step"], row["old"]["cutoff_s"], row["new"] and row["new"]["cutoff_s"])
    raise SystemExit(result.exit_code)
"""

from tailkit.refresh._refresh import BACKUP_SUFFIX as BACKUP_SUFFIX
from tailkit.refresh._refresh import SINCE as SINCE
from tailkit.refresh._refresh import refresh as refresh
from tailkit.refresh._report import BAD_INPUT as BAD_INPUT
from tailkit.refresh._report import EXIT_CODES as EXIT_CODES
from tailkit.refresh._report import KEPT as KEPT
from tailkit.refresh._report import NOT_RECALIBRATED as NOT_RECALIBRATED
from tailkit.refresh._report import OUTCOMES as OUTCOMES
from tailkit.refresh._report import UNCHANGED as UNCHANGED
from tailkit.refresh._report import WOULD_WRITE as WOULD_WRITE
from tailkit.refresh._report import WRITTEN as WRITTEN
from tailkit.refresh._report import Refresh as Refresh


__all__ = [
    "BACKUP_SUFFIX",
    "BAD_INPUT",
    "EXIT_CODES",
    "KEPT",
    "NOT_RECALIBRATED",
    "OUTCOMES",
    "SINCE",
    "UNCHANGED",
    "WOULD_WRITE",
    "WRITTEN",
    "Refresh",
    "refresh",
]
