"""
How much a repeat attempt shares with the attempt it repeats, estimated from the store.

A hedge, retry, downgrade or upgrade does the same job as the first attempt (its work: output
length, hidden reasoning, a slow tool) and, on the same provider, at the same moment (a slow
spell). The simulator couples a repeat's latency rank to the first attempt's with a Gaussian
copula (`tailkit.simulation._couple`); this module says with which correlation, per step, and on
what evidence. A latent model reads the two parts: a call's normal score is
``sqrt(w) J + sqrt(m) M + sqrt(1 - w - m) e``, with ``J`` its job, ``M`` its provider's moment
and ``e`` its own; a repeat on another provider shares ``w`` (work), one on the same provider
``w + m``.

The work part, best evidence first:

1. **job keys** (``calls.job_key``): the same job on the step's route and on other routes (a
   benchmark that ran one prompt set on several models). The correlation of the normal scores
   of their latency ranks, over the jobs whose call on the step's route is in its bucket,
   pooled over the other routes (Fisher's z, weighted by jobs).
2. **repeat attempts in ledgers**: a slow first attempt on the step's route and its hedge,
   retry or downgrade, linked by the executor's idempotency key: how often the repeat was slow
   too, beyond its route's p75. A same-provider repeat measures the work and the moment at
   once, and then stands for the same-provider correlation.
3. **the size regression**: the share of the log-latency variance that output length explains
   in the step's bucket (R^2 of log latency on log output tokens). Two attempts of one job have
   the same length, so they share at least that much; hidden work is not in the tokens, so it
   is a lower bound, and said to be one.
4. **a default** of 0.75, the top of what public paired data shows (rank correlations of
   0.46-0.75 across routes): conservative, since the more a repeat shares the less a hedge
   helps. A default is a range, not a measurement: the plan is chosen at its top, and the
   predictions' intervals span it down to independent repeats (`resample_sharing`,
   `default_as_independent`), since nothing in the data says where in it the truth lies.

The moment part comes from calls on the step's route started close together (within
`MOMENT_WINDOW_S`): different jobs, the same moment, so the correlation of neighbours' ranks
is what a slow spell shares; without start times, a default of 0.1.

Nothing here is silent: every estimate carries the sentence that says where it came from,
which calibrate prints and writes into the plan's ``basis``.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from tailkit.config import Plan, Shared
from tailkit.record import Buckets
from tailkit.simulation._build import shared_of
from tailkit.simulation._fetch import OK, Need, lit, since_sql
from tailkit.simulation._load import _need
from tailkit.store import Store
from tailkit.store.lowlevel import (
    ATTEMPT_KEY,
    ESCAPE_RANK,
    SLOW_RANK,
    calls_with_buckets_sql,
    paired_calls_sql,
)
from tailkit.text import percent


__all__ = [
    "DEFAULT_MOMENT",
    "DEFAULT_SOURCE",
    "DEFAULT_WORK",
    "MIN_PAIRS",
    "default_as_independent",
    "estimate_sharing",
    "independent_sharing",
    "resample_sharing",
]

DEFAULT_WORK = 0.75
"""Work shared without evidence: the top of the public range (conservative)."""

DEFAULT_MOMENT = 0.1
"""Moment shared on one provider without start times."""

DEFAULT_SOURCE = "default"
"""The source of a default's correlation (`Shared.source`)."""

MIN_PAIRS = 30
"""Fewest paired jobs (or neighbours, or sized calls) an estimate needs."""

MOMENT_WINDOW_S = 300.0
"""Neighbouring calls started at most this far apart share the moment."""

MAX_SHARED = 0.95


@dataclass(frozen=True, slots=True)
class _Part:
    value: float
    source: str
    evidence: str
    pairs: int = 0


def independent_sharing(plan: Plan) -> dict[str, Shared]:
    """
    Independent attempts for every step, said as an assumption (for comparisons and tests).
    """
    note = "assumed independent (no sharing modelled)"
    return {name: Shared(0.0, 0.0, "assumed", note) for name in plan.steps}


def default_as_independent(plan: Plan) -> dict[str, Shared] | None:
    """
    The low end of the defaults' range: the steps whose sharing is a default, independent.

    ``None`` when no step's sharing is a default (there is no range to span). Steps with a
    measured or assumed sharing keep theirs.
    """
    out: dict[str, Shared] = {}
    for name in plan.steps:
        shared = shared_of(plan, name, None)
        if shared is not None:
            out[name] = shared
        if shared is not None and shared.source == DEFAULT_SOURCE:
            note = f"the low end of the default: independent repeats ({shared.evidence})"
            out[name] = Shared(0.0, 0.0, "assumed", note)
    return out if out != {n: shared_of(plan, n, None) for n in out} else None


def estimate_sharing(
    store: Store,
    plan: Plan,
    *,
    buckets: Buckets | None = None,
    since: datetime | None = None,
) -> dict[str, Shared]:
    """
    Per step, what a repeat shares with its first attempt, and the evidence (module doc).

    Args:
        store: An open store with the plan's calls.
        plan: The workflow; each step's route and expected tokens pick the calls.
        buckets: Bucket edges (the defaults when ``None``).
        since: Only calls started at or after this instant (a time-zone-aware datetime);
            ``None``: every call.

    Returns:
        Per step name, the correlations of a repeat on another provider and on the same
        provider, with the source and a sentence of evidence.
    """
    buckets = buckets or Buckets()
    scope = since_sql(since)
    base = f"({calls_with_buckets_sql(buckets, where=scope)}) AS c"
    out: dict[str, Shared] = {}
    moments: dict[Need, _Part] = {}
    for name, step in plan.steps.items():
        need = _need(plan.routes[step.route], step, buckets)
        other, again = _by_repeats(store, base, need)
        work = (
            _by_jobs(store, base, need) or other or _by_size(store, base, need) or _default_work()
        )
        if again is None:
            if need not in moments:
                moments[need] = _by_timing(store, base, need)
            moment = moments[need]
            same = min(work.value + moment.value, MAX_SHARED)
            said = moment.evidence
        else:  # repeats on the provider itself measured work and moment together
            same, said = max(again.value, work.value), again.evidence
        out[name] = Shared(
            other_provider=round(min(work.value, MAX_SHARED), 3),
            same_provider=round(min(same, MAX_SHARED), 3),
            source=work.source,
            evidence=f"{work.evidence}; {said}",
            pairs=work.pairs,
        )
    return out


def _by_repeats(store: Store, base: str, need: Need) -> tuple[_Part | None, _Part | None]:
    """
    The parts that ledgers' repeat attempts measure, on another provider and on the same.

    A first attempt on the step's route that was slow (cut, or raced by a hedge) and its
    first repeat (hedge, retry or downgrade, finished or cut), linked by the executor's
    idempotency key: the repeat escaped when it finished below the p75 of first attempts on
    its own route. The first attempts that were repeated are the slowest ``share`` of the
    route's, so the observed escapes say which copula correlation holds beyond rank
    ``1 - share`` (`tail_correlation`). ``None`` where fewer than `MIN_PAIRS` pairs say.
    """
    rows = store.fetchall(
        f"WITH rep AS (SELECT {ATTEMPT_KEY} AS _key, provider, model, role, "
        "CASE WHEN status = 'ok' THEN total_s END AS _total "
        f"FROM {base} WHERE attempt > 0 AND role IN ('hedge', 'retry', 'downgrade') "
        "AND (status = 'ok' OR censored_at_s > 0) "
        "QUALIFY row_number() OVER (PARTITION BY _key ORDER BY attempt, started_at, call_id) = 1), "
        f"f AS (SELECT {ATTEMPT_KEY} AS _key, provider, status, censored_at_s FROM {base} "
        f"WHERE coalesce(attempt, 0) = 0 AND {need.sql()} "
        f"AND {ATTEMPT_KEY} IN (SELECT _key FROM rep)), "
        f"ref AS (SELECT provider, model, quantile_cont(total_s, {ESCAPE_RANK}) AS _p75 "
        f"FROM {base} WHERE {_first('TRUE')} AND (provider, model) IN "
        "(SELECT (provider, model) FROM rep) GROUP BY ALL), "
        f"firsts AS (SELECT count(*) AS n FROM {base} WHERE coalesce(attempt, 0) = 0 "
        f"AND {need.sql()} AND (status = 'ok' OR censored_at_s > 0)) "
        "SELECT r.provider = f.provider AS same, count(*) AS pairs, "
        "count(*) FILTER (r._total < ref._p75) AS escaped, any_value(firsts.n) AS firsts "
        "FROM f JOIN rep AS r USING (_key) JOIN ref ON ref.provider = r.provider "
        "AND ref.model = r.model, firsts "
        "WHERE f.censored_at_s > 0 OR (r.role = 'hedge' AND f.status = 'ok') GROUP BY ALL"
    )
    found = {
        bool(same): (int(pairs), int(escaped), int(firsts)) for same, pairs, escaped, firsts in rows
    }
    slow = sum(p for p, _, _ in found.values())
    parts: list[_Part | None] = []
    for same in (False, True):
        pairs, escaped, firsts = found.get(same, (0, 0, 0))
        if pairs < MIN_PAIRS or firsts <= slow:
            parts.append(None)
            continue
        rank = 1.0 - slow / firsts
        rho = tail_correlation(1.0 - escaped / pairs, slow_rank=rank)
        where = "the same provider" if same else "another provider"
        evidence = (
            f"repeat attempts in ledgers: {pairs - escaped} of {pairs} repeats on {where} of "
            f"slow first attempts (the slowest {percent(slow / firsts)}) were slow too, "
            f"correlation {rho:.2f}"
        )
        parts.append(_Part(rho, "repeat attempts", evidence, pairs))
    return parts[0], parts[1]


def _first(where: str) -> str:
    return f"{OK} AND coalesce(attempt, 0) = 0 AND {where}"


def _by_jobs(store: Store, base: str, need: Need) -> _Part | None:
    """
    The work part from jobs run on the step's route and on others (``None``: too few).

    The tail verdict's own count (`tailkit.store.paired_calls_sql`): the step's slow calls
    (beyond its bucket's p95, or cut) whose job also ran on another route, and how many of
    those partners finished below their route's p75. The step's route is read in its bucket,
    the other routes whole.
    """
    mine = f"provider = {lit(need.provider)} AND model = {lit(need.model)}"
    source = f"(SELECT * FROM {base} WHERE NOT ({mine}) OR {need.sql()}) AS j"
    rows = store.fetchall(paired_calls_sql(source, ("provider", "model")))
    found = next((r for r in rows if (r[0], r[1]) == (need.provider, need.model)), None)
    if found is None or found[2] < MIN_PAIRS:
        return None
    pairs, escaped = int(found[2]), int(found[3])
    rho = tail_correlation(1.0 - escaped / pairs)
    evidence = (
        f"job keys: of {pairs} slow calls whose jobs also run on another route, "
        f"{pairs - escaped} were slow there too, correlation {rho:.2f}"
    )
    return _Part(rho, "job keys", evidence, pairs)


def _by_size(store: Store, base: str, need: Need) -> _Part | None:
    """
    The work part from the size regression in the step's bucket (``None``: too few).
    """
    row = store.fetchone(
        f"SELECT regr_r2(ln(total_s), ln(output_tokens)), count(*) FROM {base} "
        f"WHERE {_first(need.sql())} AND output_tokens > 0"
    )
    if row is None or row[1] < MIN_PAIRS or row[0] is None or not math.isfinite(row[0]):
        return None
    r2 = float(row[0])
    evidence = (
        f"size regression: output length explains {percent(r2)} of log latency in {row[1]} calls "
        "(a lower bound: hidden work is not in the tokens; no job keys to pair)"
    )
    return _Part(r2, "size regression", evidence)


def _default_work() -> _Part:
    evidence = (
        f"no job keys and no token counts: the conservative default {DEFAULT_WORK:.2f} "
        "(the top of public paired data)"
    )
    return _Part(DEFAULT_WORK, DEFAULT_SOURCE, evidence)


def _by_timing(store: Store, base: str, need: Need) -> _Part:
    """
    The moment part: rank correlation of calls started close together on the route.
    """
    row = store.fetchone(
        "SELECT corr(r, r_prev), count(*) FROM ("
        "SELECT r, lag(r) OVER w AS r_prev, "
        "epoch(started_at) - lag(epoch(started_at)) OVER w AS gap_s FROM ("
        f"SELECT started_at, call_id, percent_rank() OVER (ORDER BY total_s) AS r FROM {base} "
        f"WHERE {_first(need.sql())} AND started_at IS NOT NULL) "
        "WINDOW w AS (ORDER BY started_at, call_id)) "
        f"WHERE gap_s <= {MOMENT_WINDOW_S}"
    )
    if row is None or row[1] < MIN_PAIRS or row[0] is None or not math.isfinite(row[0]):
        evidence = f"no start times to read a moment from: the default {DEFAULT_MOMENT:.2f}"
        return _Part(DEFAULT_MOMENT, "default", evidence)
    spearman = float(row[0])
    rho = max(2.0 * math.sin(math.pi * spearman / 6.0), 0.0)
    evidence = (
        f"calls started within {MOMENT_WINDOW_S:.0f} s of each other on the route: "
        f"correlation {rho:.2f} over {row[1]} neighbours (the moment a same-provider retry shares)"
    )
    return _Part(rho, "call timing", evidence)


def paired_tail_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """
    The copula correlation that reproduces how often a slow ``a`` finds its ``b`` slow.

    What matters for a hedge or a retry is the tail: when the first attempt is beyond its
    p95, how often the repeat is beyond *its* p75 (25 % for independent attempts, more when
    they share work). A correlation fitted to every pair would be set by the body, where work
    dominates, and overstate how much a transient stall in the tail is shared; so the
    correlation is the one under which a Gaussian copula gives the observed share.
    """
    from scipy import stats

    n = a.size
    ra, rb = stats.rankdata(a) / n, stats.rankdata(b) / n
    slow = ra > SLOW_RANK
    if slow.sum() < MIN_PAIRS // 3:
        return 0.0
    return tail_correlation(float((rb[slow] > ESCAPE_RANK).mean()))


def tail_correlation(share: float, *, slow_rank: float = SLOW_RANK) -> float:
    """
    The copula correlation under which a repeat of a slow attempt is slow this often.

    Args:
        share: Observed share of repeats beyond their p75 when the first was beyond its
            ``slow_rank`` quantile.
        slow_rank: The first attempt's threshold rank.

    Returns:
        The correlation in [0, `MAX_SHARED`]: 0 at or below the independent share (25 %).
    """
    lo, hi = 0.0, MAX_SHARED
    if share <= _slow_share(0.0, slow_rank):
        return 0.0
    if share >= _slow_share(hi, slow_rank):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if _slow_share(mid, slow_rank) < share:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _slow_share(rho: float, slow_rank: float) -> float:
    """
    P(Z2 > z_p75 | Z1 > z_slow) for standard normals with correlation ``rho``.
    """
    from scipy import special

    c, a = special.ndtri(slow_rank), special.ndtri(ESCAPE_RANK)
    z = np.linspace(c, c + 8.0, 2001)
    dens = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    beyond = special.ndtr((rho * z - a) / math.sqrt(1.0 - rho * rho))
    return float(np.trapezoid(dens * beyond, z) / (1.0 - slow_rank))


def resample_sharing(
    plan: Plan, sharing: Mapping[str, Shared] | None, rng: np.random.Generator
) -> dict[str, Shared]:
    """
    One bootstrap replicate of what each step's repeats share (for a prediction's interval).

    A correlation measured on ``pairs`` slow first attempts is as unsure as the share of
    their repeats that were slow too: that share is redrawn (binomial) and turned back into a
    correlation; the same-provider one moves with it. A default is a range with nothing in
    the data to place the truth in it: its work part is drawn uniformly between independence
    and the default, so the interval spans both ends. A regression (a stated lower bound) or an
    assumption is kept as it is: its doubt is not a sampling error.

    Args:
        plan: The plan (a step not in ``sharing`` reads its ``basis.shared``).
        sharing: Per step, what its repeats share (``None``: the plan's).
        rng: Random numbers.
    """
    out: dict[str, Shared] = {}
    for name in plan.steps:
        shared = shared_of(plan, name, sharing)
        if shared is None:
            continue
        if shared.pairs > 0:
            share = _slow_share(min(shared.other_provider, MAX_SHARED), SLOW_RANK)
            again = tail_correlation(rng.binomial(shared.pairs, share) / shared.pairs)
            moved = again - shared.other_provider
            shared = dataclasses.replace(
                shared,
                other_provider=again,
                same_provider=min(max(shared.same_provider + moved, again), MAX_SHARED),
            )
        elif shared.source == DEFAULT_SOURCE:
            work = float(rng.uniform(0.0, shared.other_provider))
            shared = dataclasses.replace(
                shared,
                other_provider=work,
                same_provider=max(shared.same_provider - shared.other_provider + work, work),
            )
        out[name] = shared
    return out
