"""
The tail table per group and bucket (`tailkit stats`).

`stats` is the table from Python; `tail_report` the table with its warnings, for a
`TableQuery`. The mergeable summaries the engines compute the table of files with are in
`tailkit.tails.lowlevel`.
"""

from tailkit.tails._api import stats as stats
from tailkit.tails._query import TableQuery as TableQuery
from tailkit.tails._table import FIT_COLUMNS as FIT_COLUMNS
from tailkit.tails._table import TailReport as TailReport
from tailkit.tails._table import tail_report as tail_report
from tailkit.tails._table import tail_table as tail_table


__all__ = [
    "FIT_COLUMNS",
    "TableQuery",
    "TailReport",
    "stats",
    "tail_report",
    "tail_table",
]
