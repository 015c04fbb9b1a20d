"""
Which row of an aligned table a request gets: the job its ``Idempotency-Key`` drew.

A hedge, retry, downgrade or upgrade does the same job as the attempt it repeats, and the
executor sends every attempt of one logical call with one ``Idempotency-Key``. The tables of
one step's routes share a group and are aligned row by row (row ``j``: job ``j`` on each
route; see `tailkit.serve._outcomes`). So the first request with a key draws a row, the server
remembers it, and every later request with the key on a model of the group is answered from
that row: a hedge on another route gets the same job's outcome there. A repeat on a model the
key already asked (a retry on the same route) gets the entry's ``repeats`` instead, another
call of the same job, size and moment, and a third request the repeat's repeat.

Every request takes exactly one draw from the server's generator, used or not, so that the
same seed and the same requests in the same order give the same answers whatever was seen.
Memory is bounded as the server's other keys are: at most ``keep`` keys, the least recently
seen forgotten first (a forgotten key draws again, as a request without a key does).
"""

from __future__ import annotations

import collections
import random

from dataclasses import dataclass, field

from tailkit.serve._outcomes import Outcomes


__all__ = ["Jobs"]


@dataclass(slots=True)
class _Job:
    row: int
    asked: collections.Counter[str] = field(default_factory=collections.Counter)


class Jobs:
    """
    The row each recent key drew, per group, and how often each model was asked for it.

    Args:
        keep: Keys remembered at most (0: none; every request draws).
    """

    def __init__(self, *, keep: int) -> None:
        self.keep = keep
        self._jobs: collections.OrderedDict[tuple[str, str], _Job] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._jobs)

    def entry(
        self, rng: random.Random, table: Outcomes, *, model: str, key: str
    ) -> tuple[int, int]:
        """
        The entry of ``table`` (an aligned table of ``model``) that a request with ``key`` gets.

        Args:
            rng: The server's generator: one draw, always.
            table: The requested model's aligned table (its ``group`` and ``rows`` set).
            model: The requested model's id.
            key: The request's ``Idempotency-Key`` (``""``: none, a fresh row).

        Returns:
            The entry, and the row it came from.
        """
        u = rng.random()
        group = table.group or ""
        rows = table.rows or (0,)
        if not key or self.keep <= 0:
            row = table.row_of(u)
            return rows[row], row
        job = self._jobs.pop((group, key), None)
        if job is None:
            job = _Job(table.row_of(u))
        self._jobs[(group, key)] = job
        while len(self._jobs) > self.keep:
            self._jobs.popitem(last=False)
        entry = rows[job.row]
        for _ in range(job.asked[model]):  # the n-th repeat on this model: n steps along
            entry = table.repeats[entry] if table.repeats is not None else entry
        job.asked[model] += 1
        return entry, job.row
