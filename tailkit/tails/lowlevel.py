"""
The tail table's building blocks, for the engines, extensions and tests; they may change.

A store's calls as one mergeable `Summary` (`tail_summary`: `aggregate`, then `draw`), the
merge of partitions' summaries (`merge`, `merge_samples`) and the table read from a merged
summary (`summary_report`), with the sketches' `RELATIVE_ACCURACY`: what `tailkit.engines`
computes the table of files with, here or on Dask. Code written against `tailkit.tails` needs
none of them.
"""

from tailkit.tails._sketch import RELATIVE_ACCURACY
from tailkit.tails._summary import (
    Summary,
    aggregate,
    draw,
    merge,
    merge_samples,
    summary_report,
    tail_summary,
)


__all__ = [
    "RELATIVE_ACCURACY",
    "Summary",
    "aggregate",
    "draw",
    "merge",
    "merge_samples",
    "summary_report",
    "tail_summary",
]
