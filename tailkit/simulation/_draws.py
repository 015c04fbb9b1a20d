"""
The simulator's random numbers: one seeded stream per step name and attempt slot.
"""

from __future__ import annotations

import zlib

from dataclasses import dataclass, field

import numpy as np

from tailkit.simulation._model import SLOTS
from tailkit.simulation._sample import Index


@dataclass(slots=True)
class Draws:
    """
    Draws for every step and run, one stream per step name and slot (common random numbers).

    A step has three slots, one per attempt it may make: its first attempt, the attempt its
    cutoff or an error starts, and the attempt that re-does invalid output. A draw is a
    uniform 16-bit index into the route's outcome table (`RouteSample`). Each slot is its own
    seeded stream, read ``runs`` draws at a time, so a slot a plan does not use is never
    drawn, and two plans that use different slots still share the draws of the slots they
    both use. `run_step` reads the same slots for every block of runs, so the streams stay
    aligned block by block.

    Args:
        runs: Runs per block: each `slot` call returns the next ``runs`` draws.
        seed: Base seed.
        keep: Draw each slot once and return the same draws every time (for the
            calibrator, which replays one block of runs for every candidate).
    """

    runs: int
    seed: int = 0
    keep: bool = False
    _streams: dict[tuple[str, int], np.random.Generator] = field(default_factory=dict)
    _cache: dict[tuple[str, int], Index] = field(default_factory=dict)

    def slot(self, name: str, k: int) -> Index:
        """
        The next block of draws of slot ``k`` (0-2) of step ``name``, one per run.
        """
        key = (name, k)
        if key in self._cache:
            return self._cache[key]
        stream = self._streams.get(key)
        if stream is None:
            stream = np.random.default_rng([self.seed, zlib.crc32(name.encode()), k])
            self._streams[key] = stream
        # the raw 64-bit output read as four 16-bit draws: one per entry of a 2**16 table
        u = stream.bit_generator.random_raw((self.runs + 3) // 4).view(np.uint16)[: self.runs]
        if self.keep:
            self._cache[key] = u
        return u

    def stack(self, name: str) -> Index:
        """
        All three slots of step ``name`` as a ``(3, runs)`` array (kept draws, if any).
        """
        return np.stack([self.slot(name, k) for k in range(SLOTS)])
