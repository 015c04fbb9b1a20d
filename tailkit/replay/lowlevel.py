"""
The building blocks of `tailkit.replay`, for who rehearses another way (low level).

`tailkit.replay` holds `replay` and what it returns. This module holds the pieces a rehearsal
is made of, public so that other packages and tools need not reach into private modules: the
test over two sides (`compare_sides`, `plan_effect`), how a prediction agrees with an
observation (`agrees`), the replay's own timing error (`LagMonitor`, `timing_errors`,
`MAX_ERROR_SHARE`), the tables the server serves (`served_models`, `ServedModels`,
`chunk_tokens`, `served_routes`), a live plan's share lines and the runs in flight its
simulation is batched by (`RouteShareLine`, `runs_in_flight`), and `smallest_cutoff_s` and
`family_level`.
"""

from tailkit.replay._aligned import served_routes
from tailkit.replay._compare import FIGURES, RELATIVE_SLACK, agrees
from tailkit.replay._effect import compare_sides, plan_effect
from tailkit.replay._fidelity import MAX_ERROR_SHARE, LagMonitor, timing_errors
from tailkit.replay._live import RouteShareLine, runs_in_flight
from tailkit.replay._replay import FAMILY_LEVEL, family_level, smallest_cutoff_s
from tailkit.replay._tables import ServedModels, chunk_tokens, served_models


__all__ = [
    "FAMILY_LEVEL",
    "FIGURES",
    "MAX_ERROR_SHARE",
    "RELATIVE_SLACK",
    "LagMonitor",
    "RouteShareLine",
    "ServedModels",
    "agrees",
    "chunk_tokens",
    "compare_sides",
    "family_level",
    "plan_effect",
    "runs_in_flight",
    "served_models",
    "served_routes",
    "smallest_cutoff_s",
    "timing_errors",
]
