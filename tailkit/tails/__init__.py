"""
The tail table per group and bucket (`tailkit stats`).
"""

from tailkit.tails._api import stats as stats
from tailkit.tails._query import TableQuery as TableQuery
from tailkit.tails._sketch import RELATIVE_ACCURACY as RELATIVE_ACCURACY
from tailkit.tails._summary import Summary as Summary
from tailkit.tails._summary import aggregate as aggregate
from tailkit.tails._summary import draw as draw
from tailkit.tails._summary import merge as merge
from tailkit.tails._summary import merge_samples as merge_samples
from tailkit.tails._summary import summarize as summarize
from tailkit.tails._summary import summary_report as summary_report
from tailkit.tails._table import TailReport as TailReport
from tailkit.tails._table import tail_report as tail_report
from tailkit.tails._table import tail_table as tail_table


__all__ = [
    "RELATIVE_ACCURACY",
    "Summary",
    "TableQuery",
    "TailReport",
    "aggregate",
    "draw",
    "merge",
    "merge_samples",
    "stats",
    "summarize",
    "summary_report",
    "tail_report",
    "tail_table",
]
