"""
Aligned tables: what the replay serves so that a repeat attempt does the same job.

Why: a hedge, retry, downgrade or upgrade re-does the work of the attempt it repeats (the same
prompt: about the same output, hidden reasoning, slow tool) and, on the same provider, meets
the same moment (a slow spell). Serving every attempt an independent draw is what a simulator
without dependence assumes, so a replay built that way can never disagree with it. Here each
step's routes are served as one *group* of tables aligned row by row, and the server gives
every attempt of one call (one Idempotency-Key) the same row (`tailkit.serve._jobs`).

What a row is depends on the evidence:

- **Job keys** (``calls.job_key``, a benchmark that ran one prompt set on several models):
  row ``j`` is job ``j``, one of the jobs whose call on the step's first route is in its
  bucket; each route's entry is the job's measured call there. A job with no call on a route
  gets that route's call of the nearest output size (a random one when sizes are unknown).
- **No job keys**: row ``j`` holds, on each route, a call at the same output-token rank
  (ties broken at random; a call without a size, a failure, at a random rank), so that a
  repeat gets an outcome of the same size as the attempt it repeats.

A repeat on the *same* route (a retry) would otherwise get the very same call: it gets the
entry's repeat instead. That is the job's other measured call on the route when the data have
one; else a call of about the same size started within `MOMENT_WINDOW_S` of it (the nearest
in size among its nearest in time, so a slow spell is shared); else, without start times, a
different call of the same size.

The served outcome of a call is what the simulator would make of it: a cut call finishes at a
latency of the route's sample beyond its cut, a failure fails at its time, a call that did not
stream has its whole answer as its first token.
"""

from __future__ import annotations

import zlib

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.config import Plan, Step
from tailkit.record import Buckets
from tailkit.replay._pool import Calls, job_calls, pool
from tailkit.simulation import RouteSample
from tailkit.simulation.lowlevel import SampleKey, step_routes
from tailkit.store import Store
from tailkit.text import percent


__all__ = [
    "MAX_ROWS",
    "MIN_JOBS",
    "MOMENT_WINDOW_S",
    "Aligned",
    "StepAlignment",
    "align_step",
    "served_routes",
]

MAX_ROWS = 20_000
"""Rows (jobs, or finished calls of the first route) per step: 200 beyond its p99."""
MIN_JOBS = 30
"""Jobs seen on two of a step's routes (or twice on one) before job keys align its rows."""
MOMENT_WINDOW_S = 300.0
"""A retry's call started at most this far from the call it repeats shares its moment."""
_NEIGHBOURS = 8  # calls either side in time order a retry's call is chosen among
Index = npt.NDArray[np.intp]


def served_routes(step: Step) -> tuple[str, ...]:
    """
    Every route a step may send an attempt to, its own route first: the replay serves each.

    Its route, its candidates (where a live step's first attempt may go, and a live step's
    hedge when it would go to the first attempt's own route), then its hedge, downgrade and
    upgrade routes.
    """
    return tuple(dict.fromkeys((step.route, *step.first_routes(), *step_routes(step))))


@dataclass(frozen=True, slots=True)
class Aligned:
    """
    One route's table of one step, aligned with the step's other routes.

    Args:
        ttft_s: Profile seconds to the first token, per entry (a failure: when it fails).
        total_s: Profile seconds to the end, per entry.
        kinds: ``o`` (ok), ``e`` (error) or ``i`` (invalid output), per entry.
        rows: The entry of each row (row ``j``: job ``j``).
        repeats: Per entry, the entry a repeat on this route gets.
    """

    ttft_s: tuple[float, ...]
    total_s: tuple[float, ...]
    kinds: str
    rows: tuple[int, ...]
    repeats: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StepAlignment:
    """
    A step's aligned tables and what their rows stand for.

    Args:
        tables: Per route of the step, its table.
        basis: What a served repeat shares with the attempt it repeats, and from what.
    """

    tables: dict[str, Aligned]
    basis: str


def align_step(
    store: Store,
    plan: Plan,
    name: str,
    samples: Mapping[SampleKey, RouteSample],
    *,
    buckets: Buckets | None = None,
    seed: int = 0,
) -> StepAlignment:
    """
    The aligned tables of step ``name``'s routes (module docstring).

    Args:
        store: The store the plan was calibrated on.
        plan: The plan.
        name: The step.
        samples: The route samples of the plan (for the latency of cut calls beyond their cut,
            and the time a failure without one takes).
        buckets: Token bucket edges (``None``: the defaults).
        seed: Seed of the samples, the tie breaks and the cut calls' latencies.
    """
    buckets = buckets or Buckets()
    step = plan.steps[name]
    routes = list(served_routes(step))
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    pools = {
        r: pool(store, plan.routes[r], step, buckets=buckets, seed=seed, max_rows=MAX_ROWS)
        for r in routes
    }
    found = _by_jobs(store, plan, routes, pools, buckets=buckets, rng=rng)
    if found is None:
        found = _by_size(routes, pools, rng=rng)
    per_route, basis = found
    tables = {
        r: _table(calls, rows, jobs, samples[(name, r)], rng=rng, transfer=transfer)
        for r, (calls, rows, jobs, transfer) in per_route.items()
    }
    return StepAlignment(tables, basis)


# Each route's result before outcomes: its entries' calls, the entry per row, per entry the
# other measured calls of its job on the route (entry numbers), and the retries the job's rank
# on another route gives (entry -> entry), for its repeats.
_Routed = dict[str, tuple[Calls, Index, list[list[int]], dict[int, int]]]


def _by_jobs(
    store: Store,
    plan: Plan,
    routes: list[str],
    pools: Mapping[str, Calls],
    *,
    buckets: Buckets,
    rng: np.random.Generator,
) -> tuple[_Routed, str] | None:
    """
    Rows by job key, or ``None`` when fewer than `MIN_JOBS` jobs pair two attempts.
    """
    first = pools[routes[0]]
    keyed = first.take(np.flatnonzero(first.job != None))  # noqa: E711 - numpy's elementwise test
    if len(keyed) < MIN_JOBS:
        return None
    mains = keyed.take(_first_per_job(keyed))
    jobs = [str(j) for j in mains.job]
    found = {r: job_calls(store, plan.routes[r], jobs, buckets=buckets) for r in routes}
    by_route = {r: _grouped(calls) for r, calls in found.items()}
    twice = sum(1 for j in jobs if len(by_route[routes[0]].get(j, ())) > 1)
    also = {r: sum(1 for j in jobs if j in by_route[r]) for r in routes[1:]}
    if max([twice, *also.values()]) < MIN_JOBS:
        return None
    out: _Routed = {}
    filled = {}
    for k, r in enumerate(routes):
        calls, groups = found[r], by_route[r]
        if k == 0:  # the first route's row is the job's call in the bucket, its others repeats
            groups = {
                j: [i, *(len(mains) + g for g in groups.get(j, []) if calls.call_id[g] != main)]
                for i, (j, main) in enumerate(zip(jobs, mains.call_id, strict=True))
            }
            calls = Calls.joined([mains, calls])
        missing = [i for i, j in enumerate(jobs) if j not in groups]
        filled[r] = len(missing)
        fill = _nearest_size(pools[r], mains.tokens[missing], rng)
        picked = np.empty(len(jobs), dtype=np.intp)
        for i, j in enumerate(jobs):
            if j in groups:
                picked[i] = groups[j][0]
        picked[missing] = len(calls) + fill
        calls = Calls.joined([calls, pools[r]])
        siblings = {g[0]: g[1:] for g in groups.values()}
        out[r] = (*_entries(calls, picked, siblings), {})
    for k, r in enumerate(routes if len(routes) > 1 else ()):
        calls, rows, others, _ = out[r]
        partner = out[routes[1] if k == 0 else routes[0]]
        out[r] = (calls, rows, others, _transferred(calls, rows, partner[0], partner[1], rng))
    paired = ", ".join(f"{n} also on {r}" for r, n in also.items())
    gaps = ", ".join(f"{n} on {r}" for r, n in filled.items() if n)
    basis = (
        f"job keys: {len(jobs)} jobs of {routes[0]} in the bucket"
        + (f" ({paired})" if paired else "")
        + (f", {twice} run twice there" if twice else "")
        + "; every attempt of a run's step gets its job's measured call on its route"
        + (f" (missing, the nearest output size: {gaps})" if gaps else "")
        + "; a retry on the same route gets the job's other measured call there, else "
        + (
            "the call at the job's rank on another of the step's routes (its work, not its moment)"
            if len(routes) > 1
            else f"a call of about its size started within {MOMENT_WINDOW_S:.0f} s"
        )
    )
    return out, basis


def _by_size(
    routes: list[str], pools: Mapping[str, Calls], *, rng: np.random.Generator
) -> tuple[_Routed, str]:
    """
    Rows by output-token rank: each route's call at row ``j`` is at the same rank.
    """
    n_rows = len(pools[routes[0]])
    out: _Routed = {}
    for r in routes:
        calls = pools[r]
        order = _size_order(calls, rng)
        at = ((np.arange(n_rows) + 0.5) / n_rows * len(calls)).astype(np.intp)
        out[r] = (*_entries(calls, order[np.minimum(at, len(calls) - 1)], {}), {})
    first = pools[routes[0]]
    sized = float(np.isfinite(first.tokens).mean()) if len(first) else 0.0
    timed = bool(np.isfinite(first.start_s).any())
    moment = (
        f"a retry gets a call of about the same size started within {MOMENT_WINDOW_S:.0f} s"
        if timed
        else "a retry gets a different call of the same size (no start times)"
    )
    basis = (
        f"no job keys: attempts aligned by output size ({percent(sized)} of {routes[0]}'s calls "
        f"have one); {moment}"
    )
    return out, basis


def _first_per_job(calls: Calls) -> Index:
    """
    One call per job: its first attempt, earliest, by call id.
    """
    start = np.where(np.isfinite(calls.start_s), calls.start_s, np.inf)
    order = np.lexsort((calls.call_id.astype(str), start, calls.attempt))
    _, first = np.unique(calls.job[order].astype(str), return_index=True)
    return np.sort(order[first])


def _grouped(calls: Calls) -> dict[str, list[int]]:
    """
    Each job's calls, first attempt and earliest first.
    """
    start = np.where(np.isfinite(calls.start_s), calls.start_s, np.inf)
    order = np.lexsort((calls.call_id.astype(str), start, calls.attempt))
    groups: dict[str, list[int]] = {}
    for i in order:
        groups.setdefault(str(calls.job[i]), []).append(int(i))
    return groups


def _entries(
    calls: Calls, picked: Index, siblings: Mapping[int, Sequence[int]]
) -> tuple[Calls, Index, list[list[int]]]:
    """
    The distinct calls rows use (and their jobs' other calls), renumbered as entries.
    """
    used = np.unique(
        np.concatenate([picked, [s for v in siblings.values() for s in v]]).astype(np.intp)
    )
    number = {int(c): e for e, c in enumerate(used)}
    others = [[number[s] for s in siblings.get(int(c), ())] for c in used]
    return calls.take(used), np.asarray([number[int(c)] for c in picked], dtype=np.intp), others


def _ranks(calls: Calls, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """
    Each call's latency rank in (0, 1): a cut call at its cut age, a failure at random.
    """
    known = np.where(np.isfinite(calls.total_s), calls.total_s, calls.cut_s)
    score = np.where(calls.kind == "e", np.nan, known)
    score = np.where(
        np.isfinite(score), score, np.nanmax(score, initial=0.0) * rng.random(len(calls))
    )
    order = np.lexsort((rng.random(len(calls)), score))
    rank = np.empty(len(calls), dtype=np.float64)
    rank[order] = (np.arange(len(calls)) + 0.5) / max(len(calls), 1)
    return rank


def _transferred(
    calls: Calls, rows: Index, partner: Calls, partner_rows: Index, rng: np.random.Generator
) -> dict[int, int]:
    """
    Per entry, the entry a retry gets: the row whose rank here is the job's rank on the partner.

    A benchmark runs each job once per route, so a retry on the same route has no measured
    call; the job's call on another route tells its work (its rank there), and the call at that
    rank here does that much work with its own transient part: the pairs keep the routes'
    correlation. Never the entry itself.
    """
    own = _ranks(calls, rng)[rows]
    theirs = _ranks(partner, rng)[partner_rows]
    by_own = np.argsort(own, kind="stable")
    place = np.empty(rows.size, dtype=np.intp)
    place[by_own] = np.arange(rows.size)
    at = np.argsort(np.argsort(theirs, kind="stable"), kind="stable")  # the job's rank there
    out: dict[int, int] = {}
    for j in range(rows.size):
        k = int(at[j])
        target = int(rows[by_own[k]])
        if target == rows[j]:  # the very call: its neighbour in rank instead
            k = k + 1 if k + 1 < rows.size else k - 1
            target = int(rows[by_own[max(k, 0)]])
        if target != rows[j]:
            out[int(rows[j])] = target
    return out


def _size_order(calls: Calls, rng: np.random.Generator) -> Index:
    """
    The calls by output tokens, ties at random, calls without a size at random ranks.
    """
    n = len(calls)
    sized = np.isfinite(calls.tokens)
    score = rng.random(n)
    if sized.any():
        ranked = np.lexsort((rng.random(int(sized.sum())), calls.tokens[sized]))
        rank = np.empty(ranked.size, dtype=np.float64)
        rank[ranked] = (np.arange(ranked.size) + 0.5) / ranked.size
        score[sized] = rank
    return np.argsort(score, kind="stable").astype(np.intp)


def _nearest_size(calls: Calls, tokens: npt.NDArray[np.float64], rng: np.random.Generator) -> Index:
    """
    For each size in ``tokens``, a finished call of the nearest size (random among equals).

    A random call where the size, or every call's size, is unknown.
    """
    out = rng.integers(0, max(len(calls), 1), tokens.size).astype(np.intp)
    sized = np.flatnonzero(np.isfinite(calls.tokens) & (calls.kind == "o"))
    want = np.isfinite(tokens)
    if sized.size == 0 or not want.any():
        return out
    sizes = np.sort(calls.tokens[sized])
    order = sized[np.argsort(calls.tokens[sized], kind="stable")]
    t = tokens[want]
    at = (
        np.clip(np.searchsorted(sizes, t), 1, sizes.size - 1)
        if sizes.size > 1
        else np.zeros(t.size, np.intp)
    )
    below, above = sizes[np.maximum(at - 1, 0)], sizes[at]
    value = np.where(np.abs(t - below) <= np.abs(above - t), below, above)
    low, high = np.searchsorted(sizes, value, "left"), np.searchsorted(sizes, value, "right")
    out[want] = order[low + (rng.random(t.size) * (high - low)).astype(np.intp)]
    return out


def _repeats(calls: Calls, rng: np.random.Generator) -> Index:
    """
    Per call, another call a retry on the route gets: the same size and moment (module doc).
    """
    n = len(calls)
    if n < 2:
        return np.zeros(n, dtype=np.intp)
    order = _size_order(calls, rng)
    place = np.empty(n, dtype=np.intp)
    place[order] = np.arange(n)
    side = np.where(rng.random(n) < 0.5, -1, 1)
    side = np.where(place == 0, 1, np.where(place == n - 1, -1, side))
    out = order[place + side]  # a different call of the same size (its neighbour in rank)
    timed = np.flatnonzero(np.isfinite(calls.start_s))
    if timed.size < 2:
        return out
    by_time = timed[np.argsort(calls.start_s[timed], kind="stable")]
    m = by_time.size
    offsets = np.concatenate([np.arange(-_NEIGHBOURS, 0), np.arange(1, _NEIGHBOURS + 1)])
    at = np.arange(m)[:, None] + offsets[None, :]
    valid = (at >= 0) & (at < m)
    cand = by_time[np.clip(at, 0, m - 1)]
    me = by_time[:, None]
    gap = np.abs(calls.start_s[cand] - calls.start_s[me]) / MOMENT_WINDOW_S
    valid &= gap <= 1.0
    size = np.log(np.where(calls.tokens > 0, calls.tokens, np.nan))
    apart = np.abs(size[cand] - size[me])
    # the nearest in size among the nearest in time (a call without a size: the nearest in time)
    score = np.where(np.isfinite(apart), apart + 0.01 * gap, 1e6 + gap)
    score = np.where(np.isfinite(size[me]), score, gap) + 1e-9 * rng.random(score.shape)
    score[~valid] = np.inf
    best = np.argmin(score, axis=1)
    found = np.isfinite(score[np.arange(m), best])
    out[by_time[found]] = cand[np.arange(m), best][found]
    return out


def _table(
    calls: Calls,
    rows: Index,
    jobs: list[list[int]],
    sample: RouteSample,
    *,
    rng: np.random.Generator,
    transfer: dict[int, int],
) -> Aligned:
    """
    The served outcomes of ``calls``, their rows, and their repeats.
    """
    repeats = _repeats(calls, rng)
    for entry, target in transfer.items():
        repeats[entry] = target
    for entry, others in enumerate(jobs):  # the job's own other calls on the route, in turn
        if others:
            cycle = [entry, *others]
            for a, b in zip(cycle, [*cycle[1:], entry], strict=True):
                repeats[a] = b
    ttft, total, kinds = _outcomes(calls, sample, rng)
    return Aligned(
        ttft_s=tuple(float(v) for v in ttft),
        total_s=tuple(float(v) for v in total),
        kinds=kinds,
        rows=tuple(int(r) for r in rows),
        repeats=tuple(int(r) for r in repeats),
    )


def _outcomes(
    calls: Calls, sample: RouteSample, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], str]:
    """
    Each call's served TTFT, end and kind, as the simulator makes them of a measured call.
    """
    n = len(calls)
    kind, total = calls.kind, calls.total_s.copy()
    latencies = np.sort(np.asarray(sample.total_s, dtype=np.float64))
    cut = np.flatnonzero(kind == "c")
    if cut.size:  # beyond its cut: a latency of the route's sample above the cut age
        age = calls.cut_s[cut]
        low = np.searchsorted(latencies, age, "right")
        pick = low + (rng.random(cut.size) * (latencies.size - low)).astype(np.intp)
        beyond = latencies[np.minimum(pick, latencies.size - 1)]
        total[cut] = np.where(low < latencies.size, beyond, np.maximum(age, latencies[-1]))
    unknown = ~(np.isfinite(total) & (total >= 0))
    errors = np.asarray(sample.error_s, dtype=np.float64)
    total = np.where(unknown & (kind == "e"), errors[rng.integers(0, errors.size, n)], total)
    total = np.where(unknown & (kind != "e"), latencies[rng.integers(0, latencies.size, n)], total)
    first = calls.ttft_s
    streamed = np.isfinite(first) & (first > 0) & (first <= total) & (kind != "e")
    ttft = np.where(streamed, first, total)
    kinds = "".join(np.where(kind == "c", "o", kind).tolist())
    return ttft, total, kinds
