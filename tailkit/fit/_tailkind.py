"""
Would a fresh attempt escape this tail? Work-driven, transient, mixed -- or can't tell.

The question decides whether hedging and cut-and-retry help. A call slow because of its work
(a long prompt, a long answer) is slow again; a call slowed by queueing, a cold start or a
provider incident is usually fast the second time. `tail_kind` answers it per route from
three kinds of evidence, strongest last:

1. Size. Log latency is regressed on log token counts (`size_model`); the *residual* tail,
   calls slower than same-size calls of the body explain, is what a fresh attempt escapes
   (`residual_tail`).
2. Time. Residual tail calls that bunch up in time are slow spells (`time_clustering`).
3. Repeat attempts and paired calls. Where the store holds hedges and retries of the same
   call, they say directly how often the fresh attempt of a slow call finished fast
   (`hedge_evidence`); where it holds the same job (prompt) run on several routes, how often
   the job finished fast elsewhere when it was slow on this route (the same judgement).

Single calls can only say a tail *looks* transient: work bound to the request that the token
counts do not show (uncounted reasoning, a slow tool behind the model) looks the same, and a
fresh attempt meets it again. So the sentence says whether repeat attempts or paired calls
confirm that a fresh attempt escapes, or only that single calls look transient. And where slow
calls come in spells, a retry on the same provider meets the same spell: the sentence says so.

A test that fails to reject is never turned into a claim: ``work`` needs size to explain
the spread *and* the residual tail's interval to exclude 1 % of calls; otherwise the verdict
is ``unknown`` and says what is missing.
"""

from __future__ import annotations

import dataclasses
import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import stats

from tailkit.estimate import Estimate
from tailkit.fit._modes import SlowMode, slow_mode
from tailkit.fit._quantiles import quantile
from tailkit.fit._size import (
    KNOWN_SHARE,
    MIN_TAIL_SHARE,
    TAIL_FLOOR,
    ResidualTail,
    SizeModel,
    residual_tail,
    size_model,
)
from tailkit.fit._trend import ALPHA, TimeClustering, time_clustering
from tailkit.text import number, percent


__all__ = ["TAIL_KINDS", "HedgeEvidence", "TailKind", "hedge_evidence", "tail_kind"]

_Array = npt.NDArray[np.float64]

TAIL_KINDS = ("transient", "work", "mixed", "unknown")
MIN_CALLS = 50  # fewer calls (finished and cut) cannot place a tail
MIN_FINISHED = 20
WORK_SHARE_MAX = 0.01  # "work" needs the residual tail's upper end below 1 % of calls
TOP_SHARE = 0.02  # the route's slowest 2 % (at least 5 calls) decide transient vs mixed
MIN_PAIRS = 20  # repeat attempts needed before they count as evidence
ESCAPE_LIMIT = 0.75  # a fresh attempt "escaped" when it finished below its route's p75
ESCAPE_SPLIT = 0.5  # independent attempts escape 75 % of the time, fully tied ones ~0 %
KNOWN_TTFT = 0.8  # TTFT counts when 80 % of finished calls have one ...
STREAMED_TTFT = 0.9  # ... and it is less than 90 % of the call (a non-streamed TTFT is the call)
SPELL_ALPHA = 0.01  # slow spells alone decide only at 1 % (the pooled chi-square runs a bit hot)
MATERIAL_WAIT = 0.25  # a first-token stall must add a quarter of a typical call's latency
WILSON = "Wilson"
REPEATS, PAIRED = "repeat attempts", "paired calls"
UNCONFIRMED = (
    "looks transient in single calls; no repeat attempts or paired calls confirm a fresh "
    "attempt escapes it"
)
SPELL_RETRY = "a retry on the same provider does not escape a spell; a different provider may"


@dataclass(frozen=True, slots=True)
class HedgeEvidence:
    """
    How often a fresh attempt (hedge or retry) of a slow call finished fast.

    Returned by `hedge_evidence` -- do not instantiate directly.

    Args:
        pairs: Slow first attempts with a fresh attempt of the same call.
        escaped: Of those, fresh attempts that finished below their route's p75 (a random
            call does so 75 % of the time; a call as big as the slow one rarely does).
        share: ``escaped / pairs`` (NaN without pairs).
        interval: Wilson interval of ``share``.
        says: ``"transient"`` (the interval lies above 0.5), ``"work"`` (below 0.5) or
            ``"unknown"`` (it straddles 0.5, or fewer than 20 pairs).
    """

    pairs: int
    escaped: int
    share: float
    interval: Estimate
    says: str


def hedge_evidence(pairs: int, escaped: int, *, level: float = 0.95) -> HedgeEvidence:
    """
    Judge ``escaped`` fresh attempts out of ``pairs`` slow calls (Wilson interval).
    """
    if pairs <= 0:
        none = Estimate(math.nan, 0.0, 1.0, 0, WILSON, level)
        return HedgeEvidence(0, 0, math.nan, none, "unknown")
    share = escaped / pairs
    z = float(stats.norm.ppf((1.0 + level) / 2.0))
    centre = (share + z * z / (2 * pairs)) / (1 + z * z / pairs)
    half = z * math.sqrt(share * (1 - share) / pairs + z * z / (4 * pairs * pairs))
    half /= 1 + z * z / pairs
    low, high = max(centre - half, 0.0), min(centre + half, 1.0)
    interval = Estimate(share, low, high, pairs, WILSON, level)
    says = "unknown"
    if pairs >= MIN_PAIRS and interval.low > ESCAPE_SPLIT:
        says = "transient"
    elif pairs >= MIN_PAIRS and interval.high < ESCAPE_SPLIT:
        says = "work"
    return HedgeEvidence(pairs, escaped, share, interval, says)


@dataclass(frozen=True, slots=True)
class TailKind:
    """
    Whether a fresh attempt escapes a route's tail, with the evidence.

    Returned by `tail_kind` -- do not instantiate directly.

    Args:
        kind: ``"transient"`` (a fresh attempt escapes the tail), ``"work"`` (the tail is
            the calls' size: a fresh attempt is just as slow), ``"mixed"`` (both: a residual
            tail a fresh attempt escapes, on top of a spread that grows with size) or
            ``"unknown"`` (the evidence cannot tell; ``sentence`` says what is missing).
        n: Calls used, finished and cut.
        n_cut: Of those, cut calls.
        n_unsized: Of those, cut calls left out of the residual tail: the size model uses a
            token count they lack (a call cut at a cap has no output count).
        size: The size model (``size.features`` empty without token counts).
        tail: The residual tail (``None`` with too few calls).
        top_transient: Share of the route's slowest 2 % of calls that are residual tail calls
            (NaN without a tail).
        first_token: The residual tail of the time to first token, regressed on input tokens
            alone (finished calls that streamed; ``None`` without TTFT): queueing and cold
            starts show there first, large against a short TTFT even when small against the
            whole call.
        clustering: Whether residual tail calls bunch up in time.
        hedges: Evidence from repeat attempts, when given.
        sentence: The verdict in plain words: what the calls show, whether repeat attempts
            or paired calls confirm that a fresh attempt escapes (or only single calls look
            transient), and, with slow spells, that a retry on the same provider does not
            escape a spell.
        paired: Evidence from paired calls (the same job on other routes), when given.
        counted: The token counts known for most finished calls (80 %) and not all zero,
            whether or not they vary: ``("output", "input")``, either, or none. Without output
            counts a tail of the whole latency, without input counts one of the first token,
            cannot be called transient from single calls (the big calls may be it).
        mode: A second, slower mode of the calls (`slow_mode`), e.g. retries after a
            client's timeout; ``None`` when there is none.
    """

    kind: str
    n: int
    n_cut: int
    n_unsized: int
    size: SizeModel | None
    tail: ResidualTail | None
    top_transient: float
    first_token: ResidualTail | None
    clustering: TimeClustering | None
    hedges: HedgeEvidence | None
    sentence: str
    paired: HedgeEvidence | None = None
    counted: tuple[str, ...] = ("output", "input")
    mode: SlowMode | None = None

    @property
    def transient(self) -> bool | None:
        """
        True for transient or mixed, False for work, None for unknown.
        """
        return None if self.kind == "unknown" else self.kind != "work"

    @property
    def escape_confirmed_by(self) -> str | None:
        """
        What confirms that a fresh attempt escapes the tail, if anything.

        ``"repeat attempts"`` or ``"paired calls"`` when that evidence says transient (20+
        pairs, its interval above one half) and the verdict is transient or mixed; ``None``
        when only single calls look transient (or the tail is work, or unknown).
        """
        evidence = ((REPEATS, self.hedges), (PAIRED, self.paired))
        says = {e.says for _, e in evidence if e is not None}
        if self.kind not in ("transient", "mixed") or "work" in says:
            return None
        return next((name for name, e in evidence if e is not None and e.says == "transient"), None)

    @property
    def spells(self) -> bool:
        """
        Slow calls come in spells in time: the clustering test at p < 0.01.

        A retry on the same provider during a spell meets the same spell. The test's own
        ``clustered`` flag (p < 0.05) is not enough for that claim: the pooled chi-square runs
        a bit hot, as for a verdict from spells alone.
        """
        return self.clustering is not None and self.clustering.p_value < SPELL_ALPHA


def tail_kind(
    latency_s: npt.ArrayLike,
    *,
    censored_at_s: npt.ArrayLike | None = None,
    output_tokens: npt.ArrayLike | None = None,
    input_tokens: npt.ArrayLike | None = None,
    started_at_s: npt.ArrayLike | None = None,
    ttft_s: npt.ArrayLike | None = None,
    hedges: HedgeEvidence | None = None,
    paired: HedgeEvidence | None = None,
    window_s: float = 60.0,
    level: float = 0.95,
) -> TailKind:
    """
    Decide whether a route's tail is transient, work-driven, mixed, or can't be told.

    The rules, in order:

    - fewer than 50 calls or 20 finished: ``unknown``;
    - a residual tail, or slow spells, without the token counts of its work (output for the
      whole latency, input for the first token; known for 80 % of finished calls, not all
      zero): ``unknown`` (big calls or stalled ones: the work's share cannot be separated);
    - a residual tail (see `residual_tail`) of the whole latency, or of the time to first
      token on input tokens: ``transient`` when size explains little of the spread or the
      tail calls make at least half of the route's slowest 2 %, else ``mixed``;
    - no residual tail, the slowest 5 % of residuals (size taken out) clustered in time
      (p < 0.01): ``transient`` (slow spells), ``mixed`` where size explains the spread;
    - no residual tail, size explaining the spread (``SizeModel.explains``), both residual
      tails' intervals below 1 % of calls and no clustering at 5 %: ``work``;
    - otherwise ``unknown``, naming what is missing: more calls only where more calls would
      tell, and a second, slower mode of the calls (`slow_mode`: retries after a timeout?)
      where there is one.

    Repeat attempts and paired calls, when they say something (20+ pairs, interval clear of
    one half), are the direct evidence: they turn ``unknown`` into their answer, and a
    contradicting verdict into ``mixed``. Without them a transient or mixed verdict says that
    its tail only looks transient in single calls (`TailKind.escape_confirmed_by` is
    ``None``). With slow spells (`TailKind.spells`) it says that a retry on the same provider
    does not escape a spell.

    Args:
        latency_s: Latency of each call in seconds (ignored where the call was cut).
        censored_at_s: Aligned: the age at which a call was cut, NaN where it finished.
        output_tokens: Aligned output token counts, NaN (or negative) where unknown.
        input_tokens: Aligned input token counts, likewise.
        started_at_s: Aligned start times, epoch seconds, NaN where unknown.
        ttft_s: Aligned time to first token, NaN where unknown (a residual tail there counts
            like one in the whole latency).
        hedges: Evidence from repeat attempts of this route's slow calls.
        paired: Evidence from paired calls: this route's slow calls whose job also ran on
            another route (see `hedge_evidence`; the same judgement of ``pairs`` and
            ``escaped``).
        window_s: Time window for the clustering test.
        level: Confidence level of every interval.

    Raises:
        ValueError: The arrays differ in length.
    """
    x = np.asarray(latency_s, dtype=np.float64).ravel()
    columns = {"censored_at_s": censored_at_s, "output_tokens": output_tokens,
               "input_tokens": input_tokens, "started_at_s": started_at_s,
               "ttft_s": ttft_s}  # fmt: skip
    aligned = {k: _aligned(k, v, x.size) for k, v in columns.items()}
    cut_age = aligned["censored_at_s"]
    is_cut = np.isfinite(cut_age) & (cut_age > 0.0)
    finished = ~is_cut & np.isfinite(x) & (x > 0.0)
    used = finished | is_cut
    n, n_cut = int(used.sum()), int(is_cut.sum())
    if n < MIN_CALLS or n - n_cut < MIN_FINISHED:
        sentence = (
            f"can't tell: too few calls ({n}, {n - n_cut} finished; "
            f"need {MIN_CALLS} with {MIN_FINISHED} finished)"
        )
        return _with_evidence(TailKind("unknown", n, n_cut, 0, None, None, math.nan, None,
                                       None, hedges, sentence, paired))  # fmt: skip
    log_age = np.log(np.where(is_cut, cut_age, x)[used])
    tokens = {"output": aligned["output_tokens"][used], "input": aligned["input_tokens"][used]}
    size = size_model(log_age, finished[used], tokens)
    # A cut call whose size is unknown (a cap leaves no output count) cannot be compared
    # with calls of its size: big, or stalled? It is left out, and counted.
    placed = finished[used].copy()
    sized = np.ones(placed.size, dtype=bool)
    for name in size.features:
        sized &= np.isfinite(tokens[name]) & (tokens[name] >= 0)
    placed |= is_cut[used] & sized
    unsized = int(placed.size - placed.sum())
    residual = (log_age - size.predicted)[placed]
    # Two residual tails are tested (whole latency, first token): Bonferroni, each at half.
    alpha = (1.0 - level) / 4.0
    tail = residual_tail(residual, is_cut[used][placed], level=level, alpha=alpha)
    top = _top_transient(log_age[placed], tail.in_tail)
    flags = tail.in_tail if tail.present else _residual_top(residual)
    first = _first_token_tail(
        x, aligned["ttft_s"], finished, aligned["input_tokens"], level=level, alpha=alpha
    )
    if first is not None and first.present:
        ttft_slow = np.zeros(x.size, dtype=bool)
        ttft_slow[finished & np.isfinite(aligned["ttft_s"]) & (aligned["ttft_s"] > 0)] = (
            first.in_tail
        )
        flags = flags | ttft_slow[used][placed] if tail.present else ttft_slow[used][placed]
    started = aligned["started_at_s"][used][placed]
    clustering = time_clustering(started, flags, window_s=window_s)
    counted = _counted(tokens, finished[used])
    done = finished[used][placed]
    mode = slow_mode(residual[done], np.exp(log_age[placed][done]))
    kind, sentence = _decide(
        size, tail, top=top, first=first, clustering=clustering, n=n, unsized=unsized,
        claim=_claim(hedges, paired), counted=counted, mode=mode,
    )  # fmt: skip
    return _with_evidence(
        TailKind(
            kind,
            n,
            n_cut,
            unsized,
            size,
            tail,
            top,
            first,
            clustering,
            hedges,
            sentence,
            paired,
            counted,
            mode,
        )
    )


def _counted(tokens: dict[str, _Array], finished: npt.NDArray[np.bool_]) -> tuple[str, ...]:
    """
    The token counts known (finite, not negative) for 80 % of finished calls, not all zero.

    A log that writes 0 where it does not know the count (usage not reported) is no count.
    """
    out = []
    for name, counts in tokens.items():
        known = np.isfinite(counts) & (counts >= 0)
        if not finished.any() or known[finished].mean() < KNOWN_SHARE:
            continue
        if np.any(counts[known & finished] > 0):
            out.append(name)
    return tuple(out)


def _first_token_tail(
    total: _Array,
    ttft: _Array,
    finished: npt.NDArray[np.bool_],
    inputs: _Array,
    *,
    level: float,
    alpha: float,
) -> ResidualTail | None:
    """
    The residual tail of log TTFT on input tokens, over finished calls that streamed.

    Cut calls are left out: whether they had their first token is not known. Without TTFT
    on 80 % of finished calls, or where TTFT is most of the call (not streamed), ``None``.
    """
    known = finished & np.isfinite(ttft) & (ttft > 0.0)
    if known.sum() < max(MIN_FINISHED, KNOWN_TTFT * finished.sum()):
        return None
    if float(np.median(ttft[known] / total[known])) > STREAMED_TTFT:
        return None
    log_t = np.log(ttft[known])
    size = size_model(log_t, np.ones(log_t.size, dtype=bool), {"input": inputs[known]})
    no_cut = np.zeros(log_t.size, dtype=bool)
    # A longer wait for the first token matters when it is material against the whole call:
    # at least a quarter of a typical call's latency.
    typical = float(np.median(total[known]) / np.median(ttft[known]))
    floor = max(TAIL_FLOOR, math.log1p(MATERIAL_WAIT * typical))
    return residual_tail(log_t - size.predicted, no_cut, level=level, alpha=alpha, floor=floor)


def _aligned(name: str, values: npt.ArrayLike | None, size: int) -> _Array:
    if values is None:
        return np.full(size, np.nan)
    out = np.asarray(values, dtype=np.float64).ravel()
    if out.size != size:
        msg = f"{name} has {out.size} entries but latency_s has {size}: pass one per call"
        raise ValueError(msg)
    return out


def _top_transient(log_age: _Array, in_tail: npt.NDArray[np.bool_]) -> float:
    """
    Share of the slowest 2 % (at least 5) calls that are residual tail calls.
    """
    if not in_tail.any():
        return 0.0
    k = max(5, math.ceil(TOP_SHARE * log_age.size))
    top = np.argsort(log_age)[-k:]
    return float(np.mean(in_tail[top]))


def _residual_top(residual: _Array) -> npt.NDArray[np.bool_]:
    """
    Calls in the top 5 % of residuals: the tail the clustering test places without a tail.
    """
    return residual >= quantile(residual, 0.95)


def _decide(
    size: SizeModel,
    tail: ResidualTail,
    *,
    top: float,
    first: ResidualTail | None,
    clustering: TimeClustering,
    n: int,
    unsized: int,
    claim: str,
    counted: tuple[str, ...] = ("output", "input"),
    mode: SlowMode | None = None,
) -> tuple[str, str]:
    """
    The kind and its sentence (the rules of `tail_kind`, before repeat attempts).

    ``claim`` is what to say of whether a fresh attempt escapes what looks transient
    (`_claim`): confirmed by repeat attempts or paired calls, or only seen in single calls.
    Without the token counts a residual tail is measured against (``counted``: output for the
    whole latency, input for the first token) single calls cannot separate the work's share
    of the tail, and say so; ``mode`` is a second, slower mode of the calls, said where found.
    """
    share = tail.share_interval
    explained = _explained(size, counted)
    than = "a call of their size" if size.features else "the route's typical call"
    seen = f"; {mode.describe(than)}" if mode is not None else ""
    # Each residual tail is measured against the counts of its own work: the whole latency
    # against the answer's length, the first token against the prompt's. Without them, slow
    # calls may be the big ones: single calls cannot separate the work's share.
    whole = tail.present and "output" in counted
    waits = first is not None and first.present and "input" in counted
    if (tail.present or (first is not None and first.present)) and not (whole or waits):
        missing = _uncounted(counted, ("output",) if tail.present else ("input",))
        return "unknown", (
            f"can't tell: {missing}, so the work's share of the tail cannot be separated: "
            f"{_slower(tail, first, than)}{seen}; big calls or stalled ones? Log their token "
            f"counts, or let {_NEEDED} tell"
        )
    if whole or waits:
        what = _slower(tail if whole else None, first if waits else None, than)
        if not size.explains or top >= 0.5:
            return "transient", f"transient: {what} ({explained}){seen}: {claim}"
        return "mixed", (
            f"mixed: {what}{seen}: {claim}; the rest of the tail grows with call size "
            f"({explained}), and a fresh attempt is as slow there"
        )
    if clustering.p_value < SPELL_ALPHA:
        # The slowest residuals (size taken out) bunch up in time: slow spells.
        if "output" not in counted:
            return "unknown", (
                f"can't tell: {_uncounted(counted, ('output',))}, so the work's share of the "
                f"tail cannot be separated: slow calls come in spells ({clustering.verdict})"
                f"{seen}; a batch of big calls, or slow spells? Log their token counts, or let "
                f"{_NEEDED} tell"
            )
        if not size.explains:
            return "transient", (
                f"transient: slow calls come in spells ({clustering.verdict}); {explained}: {claim}"
            )
        return "mixed", (
            f"mixed: calls slower than their size predicts come in spells "
            f"({clustering.verdict}): {claim}; the rest of the tail grows with call size "
            f"({explained})"
        )
    spells = clustering.p_value < ALPHA
    ttft_clear = first is None or first.share_interval.high < WORK_SHARE_MAX
    if size.explains and share.high < WORK_SHARE_MAX and ttft_clear and spells:
        return "unknown", (
            f"can't tell: {explained} and no call is materially slower than its size predicts, "
            f"but the slowest for their size bunch up in time ({clustering.verdict}): slow "
            "spells or chance"
        )
    if size.explains and share.high < WORK_SHARE_MAX and ttft_clear and unsized > 0.01 * n:
        return "unknown", (
            f"can't tell: {explained} and the finished calls are no slower than their size "
            f"predicts, but {unsized:,} of {n:,} calls were cut with no size to compare "
            "(big calls, or stalled ones?): log their token counts, or cut later"
        )
    if size.explains and share.high < WORK_SHARE_MAX and ttft_clear:
        return "work", (
            f"work: {explained}, and at most {percent(share.high)} of calls are materially "
            "slower than their size predicts: a fresh attempt would be just as slow"
        )
    if mode is not None:
        # A hump of its own is no lack of calls: more calls would show the same hump.
        return "unknown", (
            f"can't tell: {mode.describe(than)}, apart from the body ({explained}): a mode of "
            f"its own, not too few calls; whether a fresh attempt escapes it needs {_NEEDED}"
        )
    if size.explains:
        return "unknown", _not_ruled_out(explained, tail, first, n)
    skewed = [
        f"{percent(t.share)} of {what} lie beyond 3 body spreads"
        for t, what in ((tail, "calls"), (first, "first tokens"))
        if t is not None and t.skewed
    ]
    if skewed:
        return "unknown", (
            f"can't tell: the body's slow side is heavier than a lognormal's ({'; '.join(skewed)}"
            f"), too many for a separate tail, and {explained}: whether a fresh attempt "
            f"escapes it needs {_NEEDED}"
        )
    return "unknown", (
        "can't tell: no tail beyond the body's spread, and the spread is not explained by "
        f"call size ({explained}): whether a fresh attempt escapes it needs {_NEEDED}"
    )


def _explained(size: SizeModel, counted: tuple[str, ...]) -> str:
    """
    What size explains: a share of the spread, or why nothing (no counts, or all alike).
    """
    if size.features:
        return f"size explains {percent(max(size.r2, 0.0))} of the spread"
    if not counted:
        return "no token counts, so no call size to measure"
    return "the token counts are all alike, so size cannot explain the spread"


def _uncounted(counted: tuple[str, ...], needed: tuple[str, ...]) -> str:
    """
    Which counts are missing: ``no token counts`` (none at all) or ``no output token counts``.
    """
    if not counted:
        return "no token counts"
    return f"no {' and '.join(n for n in needed if n not in counted)} token counts"


def _slower(tail: ResidualTail | None, first: ResidualTail | None, than: str) -> str:
    """
    The residual tails found, in words: of the whole latency, of the first token, or both.
    """
    parts = []
    if tail is not None and tail.present:
        share = tail.share_interval
        parts.append(
            f"{percent(tail.share)} [{percent(share.low)}–{percent(share.high)}] of "
            f"calls are {number(tail.scale, 1)}× slower than {than}"
        )
    if first is not None and first.present:
        low, high = first.share_interval.low, first.share_interval.high
        parts.append(
            f"{percent(first.share)} [{percent(low)}–{percent(high)}] wait "
            f"{number(first.scale, 1)}× longer for their first token"
        )
    return " and ".join(parts)


def _not_ruled_out(explained: str, tail: ResidualTail, first: ResidualTail | None, n: int) -> str:
    """
    Why size explains the spread, yet the tail is not called work: what more calls would do.

    More calls are asked for only where they would tell: where the calls beyond the body are
    as rare as an interval from more calls would place under 1 %. Where they are not (1 % or
    more of calls, or already enough calls), the sentence says what they are instead.
    """
    blocking, what = tail, "calls"
    if tail.share_interval.high < WORK_SHARE_MAX and first is not None:
        blocking, what = first, "first tokens"
    share = blocking.share_interval
    found = f"{percent(blocking.share)} [{percent(share.low)}–{percent(share.high)}] of {what}"
    if blocking.skewed:
        return (
            f"can't tell: {explained}, but the body's slow side is heavier than a lognormal's "
            f"({found} lie beyond 3 body spreads), too many for a separate tail: whether a "
            f"fresh attempt escapes it needs {_NEEDED}"
        )
    needed = _calls_needed(blocking.share, share.level)
    if needed is not None and needed > n:
        rare = "no slow outlier" if blocking.share <= 0.0 else "slow outliers as rare as these"
        return (
            f"can't tell: {explained}, but {n:,} calls cannot rule out a transient tail of "
            f"up to {percent(share.high)} of {what} (about {needed:,} calls with {rare} would)"
        )
    return (
        f"can't tell: {explained}, but {found} lie beyond 3 body spreads of their size: too "
        f"many to call the tail work (under {percent(WORK_SHARE_MAX)}), too few or too close to "
        f"the body to call them a tail (the low end at least {percent(MIN_TAIL_SHARE)}, "
        f"significant): whether a fresh attempt escapes them needs {_NEEDED}"
    )


def _calls_needed(share: float, level: float) -> int | None:
    """
    About how many calls put a share's upper end under 1 %, at this share; ``None``: none do.

    With no call beyond, Clopper-Pearson's upper end is ``1 - (tail)^(1/n)``, about
    ``-log(tail) / n``; with a share ``p`` under 1 %, the normal interval's ``p + z sqrt(p / n)``.
    """
    tail = (1.0 - level) / 2.0
    floor = math.ceil(-math.log(tail) / WORK_SHARE_MAX)
    if share <= 0.0:
        return floor
    if share >= WORK_SHARE_MAX:
        return None
    z = float(stats.norm.ppf(1.0 - tail))
    return max(floor, math.ceil(z * z * share / (WORK_SHARE_MAX - share) ** 2))


_NEEDED = (
    "repeat attempts (hedged or retried calls of this route) or paired calls (the same job "
    "on other routes: a job_key)"
)


def _seen(name: str, evidence: HedgeEvidence) -> str:
    """
    What repeat attempts or paired calls showed, with the share's interval.
    """
    share = (
        f"{percent(evidence.share)} [{percent(evidence.interval.low)}–"
        f"{percent(evidence.interval.high)}]"
    )
    if name == REPEATS:
        what = "fresh attempts of slow calls finished fast"
    else:
        what = "slow calls' jobs finished fast on another route"
    return f"{evidence.escaped} of {evidence.pairs} {what} ({share})"


def _claim(hedges: HedgeEvidence | None, paired: HedgeEvidence | None) -> str:
    """
    Whether a fresh attempt escapes what looks transient: confirmed, or single calls only.
    """
    given = [(n, e) for n, e in ((REPEATS, hedges), (PAIRED, paired)) if e is not None]
    if any(e.says == "work" for _, e in given):
        return "looks transient in single calls"  # `_with_evidence` says what contradicts it
    for name, evidence in given:
        if evidence.says == "transient":
            return f"{_seen(name, evidence)}: {name} confirm a fresh attempt escapes it"
    weak = [(n, e) for n, e in given if e.pairs > 0]
    if weak:
        few = all(e.pairs < MIN_PAIRS for _, e in weak)
        why = f"too few ({MIN_PAIRS} needed)" if few else "too close to one half"
        return (
            f"looks transient in single calls; {' and '.join(_seen(*w) for w in weak)}: "
            f"{why} to confirm a fresh attempt escapes it"
        )
    return UNCONFIRMED


def _with_evidence(verdict: TailKind) -> TailKind:
    """
    Let repeat attempts and paired calls, the direct evidence, settle or qualify the verdict.

    Then, where slow calls come in spells, say that a retry on the same provider meets them.
    """
    kind, sentence = verdict.kind, verdict.sentence
    decisive = [
        (name, e)
        for name, e in ((REPEATS, verdict.hedges), (PAIRED, verdict.paired))
        if e is not None and e.says != "unknown"
    ]
    says = {e.says for _, e in decisive}
    if len(says) > 1:
        both = "; ".join(f"{_seen(n, e)}: {n} say {e.says}" for n, e in decisive)
        kind, sentence = "mixed", f"mixed: {both}; the latencies alone say {sentence}"
    elif says:
        name, evidence = decisive[0]
        seen = _seen(name, evidence)
        if evidence.says == "transient" and kind == "unknown":
            kind = "transient"
            sentence = (
                f"transient: {seen}: {name} confirm a fresh attempt escapes the tail; "
                f"the latencies alone {sentence}"
            )
        elif evidence.says == "transient" and kind == "work":
            kind = "mixed"
            sentence = (
                f"mixed: {seen}: {name} say a fresh attempt escapes, while the latencies "
                f"alone say {sentence}"
            )
        elif evidence.says == "work" and kind in ("unknown", "work"):
            rest = f"; {sentence.split(': ', 1)[1]}" if kind == "work" else ""
            kind, sentence = "work", f"work: {seen}: a fresh attempt is as slow{rest}"
        elif evidence.says == "work":
            kind = "mixed"
            sentence = (
                f"mixed: {seen}: a fresh attempt is as slow, while the latencies alone say "
                f"{sentence}"
            )
    if verdict.spells and kind in ("transient", "mixed"):
        if "come in spells" in sentence:
            sentence += f"; {SPELL_RETRY}"
        else:
            found = verdict.clustering.verdict if verdict.clustering else ""
            sentence += f"; slow calls come in spells ({found}): {SPELL_RETRY}"
    return dataclasses.replace(verdict, kind=kind, sentence=sentence)
