"""
The tail table of a store or of files read in place, exactly or from mergeable summaries.

`stats_from` is ``tailkit stats`` in one call: it reads a store, or files where they are, and
computes the table exactly or from one summary per file (here, or on a Dask cluster with the
``distributed`` extra). The building blocks of the summaries (one file's two passes, their
merge) are in `tailkit.engines.lowlevel`.
"""

from tailkit.engines._files import EngineRun as EngineRun
from tailkit.engines._files import Reading as Reading
from tailkit.engines._files import summarize_local as summarize_local
from tailkit.engines._stats import ENGINES as ENGINES
from tailkit.engines._stats import SourceStats as SourceStats
from tailkit.engines._stats import stats_from as stats_from


__all__ = ["ENGINES", "EngineRun", "Reading", "SourceStats", "stats_from", "summarize_local"]
