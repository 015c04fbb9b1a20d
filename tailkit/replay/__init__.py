"""
``tailkit replay``: a dress rehearsal of a plan against the calls it was calibrated on.

It serves every step's routes from the calls the simulator draws from (the route's measured
calls in the step's token bucket), aligned so that every attempt of one call does one job (its
measured call on each route by job key, else one of the same size and moment), in a server
process of its own; runs the workflow through the executor and the HTTP adapter without
cutoffs and with the plan; and compares each side with its prediction, each observed figure
with its 95 % interval, and the two sides with each other by a test (`PlanEffect`). It
measures its own timing error and slows down, or says "can't tell", when the machine is too
busy for the figures to hold.
"""

from tailkit.replay._compare import Figure as Figure
from tailkit.replay._effect import PlanEffect as PlanEffect
from tailkit.replay._effect import compare_sides as compare_sides
from tailkit.replay._effect import plan_effect as plan_effect
from tailkit.replay._fidelity import Fidelity as Fidelity
from tailkit.replay._replay import ReplayResult as ReplayResult
from tailkit.replay._replay import ReplaySide as ReplaySide
from tailkit.replay._replay import replay as replay
from tailkit.replay._replay import smallest_cutoff_s as smallest_cutoff_s


__all__ = [
    "Fidelity",
    "Figure",
    "PlanEffect",
    "ReplayResult",
    "ReplaySide",
    "compare_sides",
    "plan_effect",
    "replay",
    "smallest_cutoff_s",
]
