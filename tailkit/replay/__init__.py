"""
``tailkit replay``: a dress rehearsal of a plan against the calls it was calibrated on.

It serves every step's routes from the simulator's own outcome tables (the route's measured
calls in the step's token bucket) in a server process of its own, runs the workflow through the
executor and the HTTP adapter without cutoffs and with the plan, and compares each side with
its prediction, each observed figure with its 95 % interval. It measures its own timing error
and slows down, or says "can't tell", when the machine is too busy for the figures to hold.
"""

from tailkit.replay._compare import Figure as Figure
from tailkit.replay._fidelity import Fidelity as Fidelity
from tailkit.replay._replay import ReplayResult as ReplayResult
from tailkit.replay._replay import ReplaySide as ReplaySide
from tailkit.replay._replay import replay as replay
from tailkit.replay._replay import smallest_cutoff_s as smallest_cutoff_s


__all__ = ["Fidelity", "Figure", "ReplayResult", "ReplaySide", "replay", "smallest_cutoff_s"]
