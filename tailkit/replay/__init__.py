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

Example::

    result = replay(store, plan, runs=400, out_dir="rehearsal/")
    print(result.verdict, result.effect.sentence())

Each observed figure is a `tailkit.estimate.Estimate`. The building blocks (the test over two
sides, the timing error, the served tables) are in `tailkit.replay.lowlevel`.
"""

from tailkit.replay._effect import PlanEffect as PlanEffect
from tailkit.replay._fidelity import Fidelity as Fidelity
from tailkit.replay._replay import ReplayResult as ReplayResult
from tailkit.replay._replay import ReplaySide as ReplaySide
from tailkit.replay._replay import replay as replay


__all__ = ["Fidelity", "PlanEffect", "ReplayResult", "ReplaySide", "replay"]
