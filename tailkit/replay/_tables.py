"""
What the replay serves: each step's routes as the simulator draws them, as outcome tables.

The simulator draws an attempt as one slot of a route's 65,536-slot outcome table
(`tailkit.simulation.RouteSample`): the route's measured calls in the step's token bucket, each
repeated over neighbouring slots, with its TTFT, cut calls filled in beyond their cut, the
failures and the invalid outputs. Without the store, the replay serves the same table, so a
served attempt and a simulated one are draws from one distribution: run-length encoded (each
call once, with the slots it fills), one served model per (step, route), every attempt an
independent draw.

With the store, it serves what the data say about repeat attempts instead: each step's routes
as one group of tables aligned by job (`tailkit.replay._aligned`), so that every attempt of a
run's step (one Idempotency-Key) gets the same job's outcome on its route, or without job keys
an outcome of the same size (and, for a retry, the same moment). A replay then tests the
simulation's assumptions about repeats against the data, not against themselves.
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tailkit.config import Plan
from tailkit.fit import quantile
from tailkit.record import Buckets
from tailkit.replay._aligned import align_step, served_routes
from tailkit.serve.lowlevel import Outcomes
from tailkit.simulation import RouteSample
from tailkit.simulation.lowlevel import SampleKey
from tailkit.store import Store


__all__ = ["CHUNKS_PER_ANSWER", "ServedModels", "chunk_tokens", "served_models"]

CHUNKS_PER_ANSWER = 8  # content events per streamed answer: the same timing, little CPU
_DEFAULT_OUTPUT_TOKENS = 200


@dataclass(frozen=True, slots=True)
class ServedModels:
    """
    The replay's models.

    Args:
        ids: Served model id per (step, route).
        tables: Per model id, its outcomes and tokens per streamed chunk.
        basis: Per step, what a served repeat attempt shares with the attempt it repeats and
            on what evidence (empty: independent draws, the simulator's own tables).
    """

    ids: dict[SampleKey, str]
    tables: dict[str, tuple[Outcomes, int]]
    basis: dict[str, str] = field(default_factory=dict)


def _outcomes(sample: RouteSample, output_tokens: int) -> Outcomes:
    """
    The sample's outcome table, each run of identical slots stored once with its count.

    A call that stalled mid-stream (the sample's ``gap_table``) is served with its gap as a
    pause, after its last chunk before the gap where the simulator places it
    (``stall_start_table``), so a stall cutoff fires on the served stream where the simulator
    has it fire.
    """
    ttft = np.asarray(sample.ttft_table, dtype=np.float64)
    end = np.asarray(sample.end_table, dtype=np.float64)
    kinds = np.full(end.size, "o", dtype="<U1")
    kinds[sample.invalid_table] = "i"
    kinds[sample.ok_entries :] = "e"
    # a failure fails at its end time: its "first token" is when the error arrives
    ttft = np.where(kinds == "e", end, np.minimum(ttft, end))
    change = np.ones(end.size, dtype=np.bool_)
    change[1:] = (ttft[1:] != ttft[:-1]) | (end[1:] != end[:-1]) | (kinds[1:] != kinds[:-1])
    pause = pause_at = None
    if sample.gap_table is not None and sample.stall_start_table is not None:
        stalled = sample.gap_table > 0.0
        pause = np.where(stalled, sample.gap_table, 0.0)
        pause_at = np.where(stalled, np.clip(sample.stall_start_table, ttft, end - pause), 0.0)
        change[1:] |= (pause[1:] != pause[:-1]) | (pause_at[1:] != pause_at[:-1])
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, end.size))
    return Outcomes(
        ttft_s=tuple(float(v) for v in ttft[starts]),
        total_s=tuple(float(v) for v in end[starts]),
        kinds="".join(kinds[starts].tolist()),
        output_tokens=output_tokens,
        counts=tuple(int(c) for c in counts),
        pause_s=None if pause is None else tuple(float(v) for v in pause[starts]),
        pause_at_s=None if pause_at is None else tuple(float(v) for v in pause_at[starts]),
    )


def _pauses(
    sample: RouteSample, ttft_s: tuple[float, ...], total_s: tuple[float, ...], kinds: str
) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """
    The pauses of an aligned table's entries: each measured call's stall, as the sample has it.

    An aligned entry is a measured call of the route; the sample holds the same calls with
    their stall gaps, so a finished entry whose (TTFT, total) is a sample call's gets that
    call's gap, after ``stall_at`` of its normal generation (the simulator's place for it).
    ``(None, None)``: the sample tells no stall.
    """
    if sample.gap_s is None or not bool((sample.gap_s > 0.0).any()):
        return None, None
    stalled = sample.gap_s > 0.0
    gaps = {
        (float(f), float(t)): float(g)
        for f, t, g in zip(
            sample.ttft_s[stalled], sample.total_s[stalled], sample.gap_s[stalled], strict=True
        )
    }
    pause, pause_at = [], []
    for first, total, kind in zip(ttft_s, total_s, kinds, strict=True):
        gap = gaps.get((first, total), 0.0) if kind != "e" else 0.0
        normal = max(total - gap - first, 0.0)
        pause.append(gap)
        pause_at.append(first + sample.stall_at * normal if gap > 0.0 else 0.0)
    if not any(pause):
        return None, None
    return tuple(pause), tuple(pause_at)


def chunk_tokens(sample: RouteSample, output_tokens: int, stall_cutoff_s: float | None) -> int:
    """
    Tokens per streamed chunk: `CHUNKS_PER_ANSWER` chunks, or more under a stall cutoff.

    A served stream goes silent between chunks; under a step's stall cutoff, a gap as long as
    the cutoff would be cut as a stall where the measured stream did not stall. So the chunks
    come at most half the cutoff apart over the generation (less any stall) of all but the
    slowest 0.1 % of the route's calls: the stall cutoff fires on the served streams where the
    calls stalled, as the simulator has it.
    """
    tokens = max(1, math.ceil(output_tokens / CHUNKS_PER_ANSWER))
    if stall_cutoff_s is None or not math.isfinite(stall_cutoff_s):
        return tokens
    ok = sample.ok_entries
    gen = sample.end_table[:ok] - sample.ttft_table[:ok]
    if sample.gap_table is not None:
        gen = gen - sample.gap_table[:ok]
    slowest = quantile(gen, 0.999) if gen.size else 0.0
    if slowest <= 0.0:
        return tokens
    fits = math.floor(0.5 * stall_cutoff_s * output_tokens / slowest)
    return max(1, min(tokens, fits))


def served_models(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    store: Store | None = None,
    buckets: Buckets | None = None,
    seed: int = 0,
) -> ServedModels:
    """
    One served model per (step, route) the plan may send an attempt to (`served_routes`).

    Args:
        plan: The plan (its steps' routes, candidates, hedge, downgrade and upgrade routes).
        samples: The route samples the plan was (or is) simulated with.
        store: The store the samples come from: each step's routes are then served aligned
            by job (or by size), so a repeat attempt does the same job as the attempt it
            repeats (``None``: every attempt an independent draw of the sample's table).
        buckets: Token bucket edges, as the samples used them (``None``: the defaults).
        seed: Seed of the aligned tables' sample and tie breaks.

    Returns:
        The model ids (``"<route> @<step>"``), their outcome tables, and per step what a
        served repeat shares.
    """
    ids: dict[SampleKey, str] = {}
    tables: dict[str, tuple[Outcomes, int]] = {}
    basis: dict[str, str] = {}
    for name, step in plan.steps.items():
        tokens = step.expected_tokens.output or _DEFAULT_OUTPUT_TOKENS
        aligned = None
        if store is not None:
            aligned = align_step(store, plan, name, samples, buckets=buckets, seed=seed)
            basis[name] = aligned.basis
        for route in served_routes(step):
            model = f"{route} @{name}"
            ids[(name, route)] = model
            if aligned is None:
                table = _outcomes(samples[(name, route)], tokens)
            else:
                a = aligned.tables[route]
                pause, pause_at = _pauses(samples[(name, route)], a.ttft_s, a.total_s, a.kinds)
                table = Outcomes(
                    a.ttft_s, a.total_s, a.kinds, output_tokens=tokens, group=name,
                    rows=a.rows, repeats=a.repeats, pause_s=pause, pause_at_s=pause_at,
                )  # fmt: skip
            chunk = chunk_tokens(samples[(name, route)], tokens, step.stall_cutoff_s)
            tables[model] = (table, chunk)
    return ServedModels(ids, tables, basis)
