"""
Coverage study: nominal vs observed coverage of the tail table's intervals, and its verdicts.

Calls the fits of `tailkit.fit` directly on seeded simulations (no store), as the tail table
(`tailkit stats`) calls them, at n = 200, 1,000 and 2,000 calls, with no call cut and with
about 10 % of calls cut. A call is cut by a cancellation that strikes at a constant rate,
independent of its latency (an exponential cancellation age, its rate solved per case so that
10 % of calls are cut): the Kaplan-Meier and censored-likelihood methods are on their own
assumptions. A cell is ``--reps`` replicates (500; ``--quick`` 60), fewer for the mixture fits,
which cost 10-250 ms each; its coverage comes with a Clopper-Pearson 95 % interval for the
Monte Carlo error.

Intervals (table column: function studied -> its target):

- ``p50_s`` .. ``p99_s``: `empirical_quantiles` at 95 % -> the true quantile;
- ``p99_p50``: ``p99 low / p50 high .. p99 high / p50 low``, each end at 97.5 % -> true p99/p50;
- ``mu``, ``sigma`` and the lognormal p99: `fit_lognormal` -> the true value on lognormal data;
  on other data ("model wrong") the estimator's own limit for mu and sigma (its fit of 2M
  calls, cut alike) and the true p99 for the p99;
- ``transient_share``: `fit_transient_tails` -> the share of calls drawn from the slow part
  (0 on data with none); over every replicate, and over those whose tail is flagged;
- ``residual_share`` and ``ttft_residual_share``: `tail_kind` -> their own population value
  (the share beyond the threshold less the body's share: the same fit on 400k calls cut
  alike) and the true share of transient calls;
- ``hedge_share``: `hedge_evidence` (Wilson) -> the escape probability: exact coverage,
  summed over the binomial, not simulated.

Verdicts: the share of replicates in which `tail_kind` gives an expected kind, a wrong one,
or ``unknown``; how often the mixture flags a tail (``has_transient_tail``); what
`hedge_evidence` says (exact).

The plan's predictions (calibrate's intervals) have their own study, with the cases where
repeat attempts share the job: `benchmarks/plan_coverage.py` (coverage) and
`benchmarks/paired.py` (predicted miss rates and gains against a world of paired jobs);
`tailkit check`'s false alarms and detection: `benchmarks/check_alarms.py`.

Full run: about 4 minutes on 2 idle cores; ``--quick``: about 40 s. Exits 0 whatever it finds.
"""

from __future__ import annotations

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import functools
import itertools
import math
import sys
import time
import zlib

from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from scipy import optimize, stats

from tailkit.fit import TailKind, empirical_quantiles, fit_lognormal, tail_kind
from tailkit.fit.lowlevel import fit_transient_tails, hedge_evidence


_Array = npt.NDArray[np.float64]
QS = (0.5, 0.9, 0.95, 0.99)
LEVEL = 0.95
CUT_SHARE = 0.10
SPAN_S, WINDOW_S, SLOW_WINDOWS = 12_000.0, 60.0, 2  # 200 windows of 60 s, 1 % of them slow
REF_N, REF_TAIL_N = 2_000_000, 400_000


@dataclass(frozen=True)
class Calls:
    """
    One simulated route: latencies (NaN where cut), cut ages, tokens, start times.
    """

    latency_s: _Array
    started_s: _Array
    tokens: _Array | None = None  # output tokens
    input_tokens: _Array | None = None
    ttft_s: _Array | None = None
    cut_s: _Array | None = None


Draw = Callable[[np.random.Generator, int], Calls]


def _starts(rng: np.random.Generator, n: int) -> _Array:
    # Poisson arrivals over the span, given their number: sorted uniform times
    return np.sort(rng.uniform(0.0, SPAN_S, n))


def _tokens(rng: np.random.Generator, n: int) -> _Array:
    return np.round(rng.lognormal(math.log(500.0), 0.8, n))


def lognormal(rng: np.random.Generator, n: int, *, tokens: bool = False) -> Calls:
    """
    Lognormal latency, median 1 s, sigma 0.5; token counts independent of it if ``tokens``.
    """
    return Calls(rng.lognormal(0.0, 0.5, n), _starts(rng, n), _tokens(rng, n) if tokens else None)


def mixture(rng: np.random.Generator, n: int, *, share: float, scale: float) -> Calls:
    """
    A lognormal body (median 1 s, sigma 0.3) and a share of calls ``scale`` times slower.
    """
    slow = rng.random(n) < share
    return Calls(rng.lognormal(np.where(slow, math.log(scale), 0.0), 0.3), _starts(rng, n))


def cold_starts(
    rng: np.random.Generator, n: int, *, exact: bool = False, tokens: bool = False
) -> Calls:
    """
    The llmperf replicate 70b run: a body at 12.4 s (sigma 0.15) and 7 calls in 145 at 46-82 s.

    With ``tokens``, output counts as llmperf records them (asked-for lengths, unrelated to the
    cold start); without, the verdict cannot tell a slow call from a big one and says so.
    """
    cold = rng.random(n) < 7 / 145
    if exact:  # the measured composition: exactly 7 of 145, in random order
        cold = rng.permutation(n) < round(n * 7 / 145)
    body = rng.lognormal(math.log(12.4), 0.15, n)
    latency = np.where(cold, rng.uniform(46.0, 82.0, n), body)
    return Calls(latency, _starts(rng, n), _tokens(rng, n) if tokens else None)


def work(rng: np.random.Generator, n: int, *, stalls: float = 0.0) -> Calls:
    """
    Work-driven: ``ttft + tokens / 50 * lognormal(0, 0.1)``, TTFT about 0.5 s.

    A share ``stalls`` of calls waits 3-30 s more for its first token. Input tokens
    (100-4,000) are unrelated to latency, as a prompt's length barely moves a short TTFT.
    """
    tokens = _tokens(rng, n)
    ttft = 0.5 * rng.lognormal(0.0, 0.3, n)
    ttft = ttft + np.where(rng.random(n) < stalls, rng.uniform(3.0, 30.0, n), 0.0)
    latency = ttft + tokens / 50.0 * rng.lognormal(0.0, 0.1, n)
    inputs = rng.integers(100, 4000, n).astype(np.float64)
    return Calls(latency, _starts(rng, n), tokens, inputs, ttft)


def work_bucket(rng: np.random.Generator, n: int) -> Calls:
    """
    Work-driven calls of 64-255 output tokens, as one table row (an output bucket) sees them.
    """
    got = work(rng, 8 * n + 100)
    assert got.tokens is not None
    keep = np.flatnonzero((got.tokens >= 64) & (got.tokens < 256))[:n]
    assert keep.size == n, "draw more calls per bucket call"
    return Calls(got.latency_s[keep], _starts(rng, n), got.tokens[keep])  # the mixture's input


def fast_group(rng: np.random.Generator, n: int) -> Calls:
    """
    Lognormal (sigma 0.5) with 2 % of calls at a tenth of the latency (cache hits).
    """
    calls = lognormal(rng, n)
    return replace(calls, latency_s=calls.latency_s * np.where(rng.random(n) < 0.02, 0.1, 1.0))


def spells(
    rng: np.random.Generator, n: int, *, on_work: bool = False, tokens: bool = False
) -> Calls:
    """
    Slow spells: 2 of 200 windows of 60 s (1 %) are 5x slower; start times known.

    On a lognormal body, ``tokens`` adds output counts unrelated to latency.
    """
    calls = work(rng, n) if on_work else lognormal(rng, n, tokens=tokens)
    slow = rng.choice(int(SPAN_S // WINDOW_S), SLOW_WINDOWS, replace=False)
    slower = np.where(np.isin(np.floor(calls.started_s / WINDOW_S), slow), 5.0, 1.0)
    ttft = None if calls.ttft_s is None else calls.ttft_s * slower
    return replace(calls, latency_s=calls.latency_s * slower, ttft_s=ttft)


P = functools.partial
CASES: dict[str, tuple[Draw, float]] = {  # name: (draw, true share of transient calls)
    "lognormal": (lognormal, 0.0),
    "lognormal, tokens unrelated": (P(lognormal, tokens=True), 0.0),
    "mixture 5 % at 6x": (P(mixture, share=0.05, scale=6.0), 0.05),
    "mixture 5 % at 3x": (P(mixture, share=0.05, scale=3.0), 0.05),
    "cold starts": (cold_starts, 7 / 145),
    "cold starts, 7 of 145": (P(cold_starts, exact=True), 7 / 145),
    "cold starts, 7 of 145, tokens": (P(cold_starts, exact=True, tokens=True), 7 / 145),
    "work-driven": (work, 0.0),
    "work + 3 % stalls": (P(work, stalls=0.03), 0.03),
    "work-driven, 64-255 tokens": (work_bucket, 0.0),
    "fast group 2 % at 1/10": (fast_group, 0.0),
    "slow spells": (spells, 0.01),
    "slow spells, tokens": (P(spells, tokens=True), 0.01),
    "slow spells on work": (P(spells, on_work=True), 0.01),
}
MODEL_WRONG = ("mixture 5 % at 6x", "work-driven")  # the lognormal fit shown off its model
MIXTURES = ("mixture 5 % at 6x", "mixture 5 % at 3x", "cold starts", "lognormal")
RESIDUALS = ("work-driven", "work + 3 % stalls", "cold starts", "lognormal")


def censor(rng: np.random.Generator, calls: Calls, rate: float) -> Calls:
    """
    Cut each call whose cancellation (exponential age, ``rate`` per second) comes first.
    """
    age = rng.exponential(1.0 / rate, calls.latency_s.size)
    cut = age < calls.latency_s
    ttft = None if calls.ttft_s is None else np.where(cut, np.nan, calls.ttft_s)
    return replace(calls, latency_s=np.where(cut, np.nan, calls.latency_s),
                   cut_s=np.where(cut, age, np.nan), ttft_s=ttft)  # fmt: skip


@dataclass(frozen=True)
class Targets:
    """
    A case's true values, from the model or from a large seeded reference sample.
    """

    cut_rate: float
    quantiles: tuple[float, ...]
    log_moments: dict[bool, tuple[float, float]] = field(default_factory=dict)
    residual: dict[tuple[str, bool], float] = field(default_factory=dict)  # (which, cut)


def verdict(calls: Calls) -> TailKind:
    """
    `tail_kind` of a route's calls, with every column the table gives it.
    """
    return tail_kind(calls.latency_s, censored_at_s=calls.cut_s, output_tokens=calls.tokens,
                     input_tokens=calls.input_tokens, started_at_s=calls.started_s,
                     ttft_s=calls.ttft_s, level=LEVEL)  # fmt: skip


def _head(calls: Calls, k: int) -> Calls:
    def part(v: _Array | None) -> _Array | None:
        return None if v is None else v[:k]

    return Calls(calls.latency_s[:k], calls.started_s[:k], part(calls.tokens),
                 part(calls.input_tokens), part(calls.ttft_s), part(calls.cut_s))  # fmt: skip


def targets(case: str) -> Targets:
    """
    Cancellation rate, true quantiles, the lognormal fit's and the residual share's limits.
    """
    rng = np.random.default_rng(20_261_201)
    ref = CASES[case][0](rng, REF_N)
    x = ref.latency_s
    rate = optimize.brentq(lambda r: np.mean(-np.expm1(-r * x)) - CUT_SHARE, 1e-9, 1e3)
    quantiles = np.quantile(x, QS)
    if case == "lognormal":
        quantiles = np.exp(0.5 * stats.norm.ppf(QS))
    out = Targets(rate, tuple(float(q) for q in quantiles))
    cut = censor(rng, ref, rate)
    if case == "lognormal":
        out.log_moments.update({False: (0.0, 0.5), True: (0.0, 0.5)})
    elif case in MODEL_WRONG:
        fit = fit_lognormal(cut.latency_s, censored_at_s=cut.cut_s)
        out.log_moments.update({False: (float(np.mean(np.log(x))), float(np.std(np.log(x)))),
                                True: (fit.mu, fit.sigma)})  # fmt: skip
    if case == "lognormal":  # a normal body on the log scale: nothing beyond it but its own
        out.residual.update({(w, c): 0.0 for w in ("whole", "first") for c in (False, True)})
    elif case in RESIDUALS:
        for censored, calls in ((False, ref), (True, cut)):
            v = verdict(_head(calls, REF_TAIL_N))
            assert v.tail is not None
            out.residual["whole", censored] = v.tail.share
            out.residual["first", censored] = v.first_token.share if v.first_token else math.nan
    return out


@dataclass
class Tally:
    """
    Coverage counts of one interval in one cell.
    """

    interval: str
    case: str
    n: int
    cut: bool
    nominal: float = LEVEL
    reps: int = 0
    hits: int = 0
    low_miss: int = 0  # the interval lies below the target
    high_miss: int = 0  # ... above it
    unbounded: int = 0  # no upper bound: inf, or a share interval of [0, 1]
    exact: float | None = None  # coverage computed exactly, not simulated

    def add(self, low: float, high: float, target: float, *, unbounded: bool = False) -> None:
        """
        Count one replicate's interval against the target.
        """
        self.reps += 1
        self.hits += low <= target <= high
        self.low_miss += high < target
        self.high_miss += low > target
        self.unbounded += unbounded or math.isinf(high)

    def merge(self, other: Tally) -> None:
        """
        Add another chunk's counts of the same cell.
        """
        for name in ("reps", "hits", "low_miss", "high_miss", "unbounded"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _rng(seed: int, *key: object) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


def _draw(rng: np.random.Generator, case: str, n: int, cut: bool, t: Targets | None) -> Calls:
    calls = CASES[case][0](rng, n)
    return censor(rng, calls, t.cut_rate) if cut and t is not None else calls


Rng = np.random.Generator


def study_quantiles(
    case: str, n: int, cut: bool, *, reps: int, rng: Rng, t: Targets
) -> list[Tally]:
    """
    p50..p99 at 95 % (order statistics, or Kaplan-Meier with cuts) and p99/p50.
    """
    names = [f"p{round(q * 100)}_s" for q in QS]
    tallies = [Tally(name, case, n, cut) for name in [*names, "p99_p50"]]
    for _ in range(reps):
        calls = _draw(rng, case, n, cut, t)
        est = empirical_quantiles(calls.latency_s, censored_at_s=calls.cut_s, level=LEVEL)
        for tally, e, truth in zip(tallies, est, t.quantiles, strict=False):
            tally.add(e.interval.low, e.interval.high, truth)
        p50, p99 = (
            e.interval
            for e in empirical_quantiles(
                calls.latency_s, censored_at_s=calls.cut_s, qs=(0.5, 0.99), level=(1 + LEVEL) / 2
            )
        )
        low = p99.low / p50.high if p50.high > 0 else 0.0  # as the table computes it
        high = p99.high / p50.low if p50.low > 0 else math.inf
        tallies[-1].add(low, high, t.quantiles[3] / t.quantiles[0])
    return tallies


def study_lognormal(
    case: str, n: int, cut: bool, *, reps: int, rng: Rng, t: Targets
) -> list[Tally]:
    """
    `fit_lognormal`'s mu and sigma intervals and its p99 interval.
    """
    label = case if case == "lognormal" else f"{case} [model wrong]"
    names = ("mu (lognormal)", "sigma (lognormal)", "p99 (lognormal fit)")
    tallies = [Tally(name, label, n, cut) for name in names]
    mu, sigma = t.log_moments[cut]
    for _ in range(reps):
        calls = _draw(rng, case, n, cut, t)
        fit = fit_lognormal(calls.latency_s, censored_at_s=calls.cut_s, level=LEVEL)
        p99 = fit.quantile_interval(0.99)
        for tally, got, truth in zip(tallies, (fit.mu_interval, fit.sigma_interval, p99),
                                     (mu, sigma, t.quantiles[3]), strict=True):  # fmt: skip
            tally.add(got.low, got.high, truth)
    return tallies


def study_mixture(case: str, n: int, cut: bool, *, reps: int, rng: Rng, t: Targets) -> list[Tally]:
    """
    The mixture's ``tail_share_interval`` (fits batched as the table batches them).
    """
    every = Tally("transient_share", case, n, cut)
    flagged = Tally("transient_share where flagged", case, n, cut)  # what the CLI shows
    samples = [_draw(rng, case, n, cut, t) for _ in range(reps)]
    for fit in fit_transient_tails([(c.latency_s, c.cut_s) for c in samples], level=LEVEL):
        i = fit.tail_share_interval
        for tally in (every, flagged) if fit.has_transient_tail else (every,):
            tally.add(i.low, i.high, CASES[case][1], unbounded=math.isnan(fit.tail_share))
    return [every, flagged] if flagged.reps else [every]


def study_residual(case: str, n: int, cut: bool, *, reps: int, rng: Rng, t: Targets) -> list[Tally]:
    """
    The verdict's residual share intervals (whole call; first token, with a TTFT).

    Each against its population value and against the true share of transient calls.
    """
    names = (
        "residual_share vs its limit",
        "residual_share vs transient share",
        "ttft_residual_share vs its limit",
        "ttft_residual_share vs transient share",
    )
    tallies = [Tally(name, case, n, cut) for name in names]
    for _ in range(reps):
        v = verdict(_draw(rng, case, n, cut, t))
        assert v.tail is not None
        for which, tail, pair in (("whole", v.tail, tallies[:2]),
                                  ("first", v.first_token, tallies[2:])):  # fmt: skip
            if tail is not None:
                i = tail.share_interval
                pair[0].add(i.low, i.high, t.residual[which, cut])
                pair[1].add(i.low, i.high, CASES[case][1])
    return [tally for tally in tallies if tally.reps]


STUDIES = {"quantiles": study_quantiles, "lognormal": study_lognormal,
           "mixture": study_mixture, "residual": study_residual}  # fmt: skip
STUDY_CASES = {"quantiles": ("lognormal", "mixture 5 % at 6x"),
               "lognormal": ("lognormal", *MODEL_WRONG), "mixture": MIXTURES,
               "residual": RESIDUALS}  # fmt: skip


def hedge_tallies() -> list[Tally]:
    """
    Exact coverage of the Wilson interval of ``hedge_share``, summed over the binomial.
    """
    out = []
    for p in (0.75, 0.5, 0.1):
        for pairs in (20, 100, 400):
            pmf = stats.binom.pmf(np.arange(pairs + 1), pairs, p)
            inside = [p in hedge_evidence(pairs, k, level=LEVEL).interval for k in range(pairs + 1)]
            tally = Tally("hedge_share (Wilson)", f"escape p = {p:g}", pairs, False)
            tally.exact = float(np.dot(pmf, inside))
            out.append(tally)
    return out


@dataclass
class Verdicts:
    """
    Verdict counts of one scenario.
    """

    scenario: str
    n: int
    expected: tuple[str, ...]
    reps: int = 0
    right: float = 0.0
    wrong: float = 0.0
    unknown: float = 0.0

    def merge(self, other: Verdicts) -> None:
        """
        Add another chunk's counts of the same scenario.
        """
        for name in ("reps", "right", "wrong", "unknown"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


# (scenario, case, n, cut, expected kinds, share of --reps); "unknown" listed = not an error
SCENARIOS = [
    ("work-driven", "work-driven", 2000, False, ("work",), 1.0),
    ("work-driven, 10 % cut", "work-driven", 2000, True, ("work",), 1.0),
    ("work-driven", "work-driven", 300, False, ("work", "unknown"), 1.0),
    ("work-driven", "work-driven", 200_000, False, ("work",), 0.06),
    ("work + 3 % stalls", "work + 3 % stalls", 2000, False, ("transient", "mixed"), 1.0),
    ("work + 3 % stalls, 10 % cut", "work + 3 % stalls", 2000, True, ("transient", "mixed"), 1.0),
    ("work + 3 % stalls", "work + 3 % stalls", 300, False, ("transient", "mixed"), 1.0),
    ("cold starts, 7 of 145", "cold starts, 7 of 145, tokens", 145, False, ("transient",), 1.0),
    ("cold starts, 70 of 1,450", "cold starts, 7 of 145, tokens", 1450, False, ("transient",),
     1.0),
    ("cold starts, 70 of 1,450, no tokens", "cold starts, 7 of 145", 1450, False, ("unknown",),
     1.0),
    ("lognormal, tokens unrelated", "lognormal, tokens unrelated", 2000, False,
     ("unknown", "work"), 1.0),
    ("lognormal, no tokens", "lognormal", 2000, False, ("unknown", "work"), 1.0),
    ("lognormal, no tokens", "lognormal", 300, False, ("unknown", "work"), 1.0),
    ("lognormal, no tokens, 10 % cut", "lognormal", 200, True, ("unknown", "work"), 1.0),
    ("fast group 2 % at 1/10", "fast group 2 % at 1/10", 2000, False, ("unknown", "work"), 1.0),
    ("slow spells (lognormal body)", "slow spells, tokens", 2000, False, ("transient",), 1.0),
    ("slow spells, no tokens", "slow spells", 2000, False, ("unknown",), 1.0),
    ("slow spells on work-driven", "slow spells on work", 2000, False, ("transient", "mixed"), 1.0),
]  # fmt: skip
# (scenario, case, n, expected has_transient_tail)
FLAGS = [
    ("work-driven, 64-255 tokens", "work-driven, 64-255 tokens", n, False)
    for n in (200, 1000, 2000)
] + [
    ("cold starts, 7 of 145", "cold starts, 7 of 145", 145, True),
    ("cold starts, 70 of 1,450", "cold starts, 7 of 145", 1450, True),
    ("fast group 2 % at 1/10", "fast group 2 % at 1/10", 2000, False),
    ("lognormal", "lognormal", 2000, False),
    ("mixture 5 % at 6x", "mixture 5 % at 6x", 200, True),
    ("mixture 5 % at 3x", "mixture 5 % at 3x", 2000, True),
]  # fmt: skip


def study_verdicts(i: int, reps: int, rng: Rng, t: Targets | None) -> Verdicts:
    """
    `tail_kind` on one scenario of `SCENARIOS`.
    """
    name, case, n, cut, expected, _ = SCENARIOS[i]
    out = Verdicts(f"{name}: tail_kind", n, expected)
    for _ in range(reps):
        kind = verdict(_draw(rng, case, n, cut, t)).kind
        out.reps += 1
        out.right += kind in expected
        out.unknown += kind == "unknown"
        out.wrong += kind not in expected and kind != "unknown"
    return out


def study_flags(i: int, reps: int, rng: Rng, t: Targets | None) -> Verdicts:
    """
    The mixture's ``has_transient_tail`` on one scenario of `FLAGS`.
    """
    name, case, n, expected = FLAGS[i]
    out = Verdicts(f"{name}: mixture flag", n, (f"tail: {'yes' if expected else 'no'}",))
    samples = [CASES[case][0](rng, n) for _ in range(reps)]
    for fit in fit_transient_tails([(c.latency_s, None) for c in samples]):
        out.reps += 1
        out.right += fit.has_transient_tail == expected
        out.wrong += fit.has_transient_tail != expected
    return out


def hedge_verdicts() -> list[Verdicts]:
    """
    What `hedge_evidence` says, exactly, when fresh attempts escape with probability p.
    """
    out = []
    for p, expected in ((0.75, "transient"), (0.6, "transient"), (0.1, "work")):
        for pairs in (20, 100):
            pmf = stats.binom.pmf(np.arange(pairs + 1), pairs, p)
            says = np.array([hedge_evidence(pairs, k, level=LEVEL).says for k in range(pairs + 1)])
            v = Verdicts(f"hedge pairs, escape p = {p:g}: hedge_evidence", pairs, (expected,), 0)
            v.right, v.unknown = (float(pmf[says == s].sum()) for s in (expected, "unknown"))
            v.wrong = 1.0 - v.right - v.unknown
            out.append(v)
    return out


# Replicates of a cell, as a share of --reps: the mixture fits (their profile-likelihood
# intervals above all) cost 10-250 ms each, against 1-10 ms for everything else.
MIXTURE_REPS, MIXTURE_NO_TAIL_REPS, FLAG_REPS = 0.5, 0.4, 0.3
CHUNK = 10  # replicates per task: small, so that two processes finish together


@dataclass(frozen=True)
class Task:
    """
    One chunk of one cell: a coverage study (``kind`` in `STUDIES`), a verdict or a flag.
    """

    kind: str
    chunk: int
    reps: int
    cost: float  # a rough weight, to start the slowest first
    case: str = ""  # a study's cell
    n: int = 0
    cut: bool = False
    index: int = 0  # a verdict's or a flag's scenario


def tasks(reps: int) -> list[Task]:
    """
    Every chunk of every cell, slowest first.
    """
    cells: list[tuple[Task, int]] = []  # each cell's first chunk, and its replicates
    for kind, cases in STUDY_CASES.items():
        for case, n, cut in itertools.product(cases, (200, 1000, 2000), (False, True)):
            share, cost = 1.0, 0.002
            if kind == "mixture":
                share = MIXTURE_NO_TAIL_REPS if case == "lognormal" else MIXTURE_REPS
                cost = 0.1 if case == "lognormal" else 0.02
            cells.append((Task(kind, 0, 0, cost, case, n, cut), max(5, round(reps * share))))
    for i, s in enumerate(SCENARIOS):
        cells.append((Task("verdict", 0, 0, s[2] / 2e5, index=i), max(5, round(reps * s[5]))))
    for i in range(len(FLAGS)):
        cells.append((Task("flag", 0, 0, 0.05, index=i), max(5, round(reps * FLAG_REPS))))
    out = []
    for cell, total in cells:
        for j in range(math.ceil(total / CHUNK)):
            size = min(CHUNK, total - j * CHUNK)
            out.append(replace(cell, chunk=j, reps=size, cost=cell.cost * size))
    return sorted(out, key=lambda t: -t.cost)


def run(task: Task, seed: int, t: Targets | None) -> tuple[list[Tally] | Verdicts, float]:
    """
    Run one chunk, with its own seeded generator; the result and the CPU seconds it took.
    """
    cpu = time.process_time()
    rng = _rng(seed, task.kind, task.case, task.n, task.cut, task.index, task.chunk)
    got: list[Tally] | Verdicts
    if task.kind == "verdict":
        got = study_verdicts(task.index, task.reps, rng, t)
    elif task.kind == "flag":
        got = study_flags(task.index, task.reps, rng, t)
    else:
        assert t is not None
        got = STUDIES[task.kind](task.case, task.n, task.cut, reps=task.reps, rng=rng, t=t)
    return got, time.process_time() - cpu


def timed_targets(case: str) -> tuple[Targets, float]:
    """
    `targets`, and the CPU seconds it took.
    """
    cpu = time.process_time()
    return targets(case), time.process_time() - cpu


def _ci(k: int, n: int) -> tuple[float, float]:
    got = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(got.low), float(got.high)


def interval_table(tallies: Iterable[Tally]) -> list[str]:
    """
    The coverage table, as markdown.
    """
    lines = ["| interval | case | n | cut | nominal | coverage | MC 95 % | miss lo / hi "
             "| no upper bound | reps | |",
             "|---|---|---:|---|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for t in tallies:
        cut = "10 %" if t.cut else "none"
        if t.exact is not None:
            short = "below" if t.exact < t.nominal - 0.005 else ""
            lines.append(f"| {t.interval} | {t.case} | {t.n:,} | {cut} | {t.nominal:.2f} | "
                         f"{t.exact:.3f} | exact | | | | {short} |")  # fmt: skip
            continue
        low, high = _ci(t.hits, t.reps)
        short = "below" if high < t.nominal else ""
        lines.append(
            f"| {t.interval} | {t.case} | {t.n:,} | {cut} | {t.nominal:.2f} | "
            f"{t.hits / t.reps:.3f} | [{low:.3f}, {high:.3f}] | "
            f"{t.low_miss / t.reps:.3f} / {t.high_miss / t.reps:.3f} | "
            f"{t.unbounded / t.reps:.2f} | {t.reps:,} | {short} |"
        )
    return lines


def verdict_table(rows: Iterable[Verdicts]) -> list[str]:
    """
    The verdict table, as markdown.
    """
    lines = ["| scenario | n | expected | right | wrong | can't tell | replicates |",
             "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for v in rows:
        reps = "exact" if v.reps == 0 else f"{v.reps:,}"
        total = max(v.reps, 1)
        lines.append(f"| {v.scenario} | {v.n:,} | {' or '.join(v.expected)} | "
                     f"{v.right / total:.3f} | {v.wrong / total:.3f} | "
                     f"{v.unknown / total:.3f} | {reps} |")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    """
    Run every cell (in parallel) and print the two tables as markdown.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 replicates a cell (~40 s)")
    parser.add_argument("--reps", type=int, help="replicates per cell (default 500; quick 60)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    reps = args.reps or (60 if args.quick else 500)
    t0 = time.perf_counter()
    todo = tasks(reps)
    tallies: dict[tuple[str, str, int, bool], Tally] = {}
    verdicts: dict[tuple[str, int], Verdicts] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        needed = sorted({t.case for t in todo if t.case} | {s[1] for s in SCENARIOS if s[3]})
        found = list(pool.map(timed_targets, needed))
        truth = {case: got for case, (got, _) in zip(needed, found, strict=True)}
        cpu = {"targets": sum(seconds for _, seconds in found)}
        cases = [SCENARIOS[t.index][1] if t.kind == "verdict" else t.case for t in todo]
        futures = [
            pool.submit(run, t, args.seed, truth.get(c)) for t, c in zip(todo, cases, strict=True)
        ]
        for task, future in zip(todo, futures, strict=True):
            got, seconds = future.result()
            cpu[task.kind] = cpu.get(task.kind, 0.0) + seconds
            if isinstance(got, Verdicts):
                verdicts.setdefault((task.kind, task.index), replace(got, reps=0, right=0.0,
                                    wrong=0.0, unknown=0.0)).merge(got)  # fmt: skip
                continue
            for tally in got:
                key = (tally.interval, tally.case, tally.n, tally.cut)
                tallies.setdefault(key, replace(tally, reps=0, hits=0, low_miss=0, high_miss=0,
                                                unbounded=0)).merge(tally)  # fmt: skip
    rows = sorted(tallies.values(), key=lambda t: (ORDER.index(t.interval), t.case, t.n, t.cut))
    kinds = [verdicts[k] for k in sorted(verdicts, key=lambda k: (k[0] != "verdict", k[1]))]
    print(
        f"replicates: {reps} a cell, fewer for the mixture fits (see the reps column); "
        f"seed {args.seed}; {args.jobs} processes; {time.perf_counter() - t0:.0f} s; CPU s: "
        + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
        + f" (total {sum(cpu.values()):.0f})\n"
    )
    print("\n".join(interval_table([*rows, *hedge_tallies()])))
    print()
    print("\n".join(verdict_table([*kinds, *hedge_verdicts()])))
    return 0


ORDER = ("p50_s", "p90_s", "p95_s", "p99_s", "p99_p50", "mu (lognormal)", "sigma (lognormal)",
         "p99 (lognormal fit)", "transient_share", "transient_share where flagged",
         "residual_share vs its limit", "residual_share vs transient share",
         "ttft_residual_share vs its limit", "ttft_residual_share vs transient share")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
