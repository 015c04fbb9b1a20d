"""
The tail table per group and bucket (`tailkit stats`).
"""

from tailkit._stats._api import stats as stats
from tailkit._stats._query import TableQuery as TableQuery
from tailkit._stats._table import TailReport as TailReport
from tailkit._stats._table import tail_report as tail_report
from tailkit._stats._table import tail_table as tail_table


__all__ = ["TableQuery", "TailReport", "stats", "tail_report", "tail_table"]
