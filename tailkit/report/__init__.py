"""
The report: tailkit's findings as pictures, one self-contained HTML page plus its PNGs.

matplotlib is imported only inside the report functions, and draws with Agg (no display, no
pyplot state).

Example::

    from tailkit.report import write_report
    from tailkit.store import Store

    with Store.open("calls.duckdb", read_only=True) as store:
        print(write_report(store, "reports/today/"))
"""

from tailkit.report._report import write_report as write_report


__all__ = ["write_report"]
