"""
The report: tailkit's findings as pictures, one self-contained HTML page plus its PNGs.

matplotlib is imported only inside the report functions, and draws with Agg (no display, no
pyplot state).

Example::

    from tailkit.report import write_report
    from tailkit.store import Store

    with Store.open("calls.duckdb", read_only=True) as store:
        print(write_report(store, "reports/today/"))

`write_report_result` writes the same page and returns its findings as well (`ReportResult`:
the heaviest tail, the routes left out and why, the plan's simulated miss rate).
"""

from tailkit.report._report import write_report as write_report
from tailkit.report._report import write_report_result as write_report_result
from tailkit.report._result import PlanFinding as PlanFinding
from tailkit.report._result import ReportResult as ReportResult
from tailkit.report._result import RouteFinding as RouteFinding


__all__ = ["PlanFinding", "ReportResult", "RouteFinding", "write_report", "write_report_result"]
