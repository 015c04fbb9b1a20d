"""
The outcomes a replay serves: building blocks for `tailkit.replay` and tests; they may change.

A replay does not draw from a parametric `ModelProfile`: it serves the measured calls the
simulator draws from, one `Outcomes` table per route (``ModelProfile(outcomes=...)``).
``tailkit replay`` writes the tables to a file (`dump_outcomes`), the server process reads them
back (`load_outcomes`, or `tailkit.serve.serve_outcomes` for a whole configuration), and an
answer whose measured output failed validation starts with `INVALID_MARK`. Code that only
serves a latency tail needs none of them.
"""

from tailkit.serve._outcomes import INVALID_MARK, Outcomes, dump_outcomes, load_outcomes


__all__ = ["INVALID_MARK", "Outcomes", "dump_outcomes", "load_outcomes"]
