"""
Low-level: the summaries engines' building blocks, for tools that schedule them; may change.

One file is summarized in two passes (`aggregate_file`, then `draw_file` with the merged
counts, `counts_only`); partitions merge with `merge_partitions`. `tailkit.engines.stats_from`
runs them; a scheduler of its own (as ``summarize_dask`` is) needs only these.
"""

from tailkit.engines._dask import summarize_dask
from tailkit.engines._files import (
    Partition,
    aggregate_file,
    counts_only,
    draw_file,
    merge_partitions,
    peak_rss_bytes,
)


__all__ = [
    "Partition",
    "aggregate_file",
    "counts_only",
    "draw_file",
    "merge_partitions",
    "peak_rss_bytes",
    "summarize_dask",
]
