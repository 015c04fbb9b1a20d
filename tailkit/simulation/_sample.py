"""
What the simulator draws from: one route's latency for one step's token bucket.

A `RouteSample` is an inverse CDF held as a sorted array. Drawing is indexing: a uniform
``u`` picks ``total_s[floor(u * n)]``, so the same ``u`` gives the same rank on every route
(common random numbers across candidate plans). The time to first token travels with its
call, so a TTFT cutoff and the total it implies stay consistent, and so does each call's
stall gap (`tailkit.simulation._stall`): each outcome knows when a stall cutoff would cut it
(`RouteSample.stall_cut`), and the step acts there as it does at its other cutoffs.
"""

from __future__ import annotations

import dataclasses
import math

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailkit.errors import ConfigError
from tailkit.fit import quantile
from tailkit.simulation._stall import Stalls, stall_gaps


Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.uint16]
_GRID = 100_000  # points of a fitted model's quantile grid: resolves quantiles to 1e-5
TABLE = 1 << 16  # outcomes per route table: one uint16 draw picks one
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # spreads invalid outcomes evenly over latency ranks


@dataclass(frozen=True, slots=True, eq=False)
class RouteSample:
    """
    One route's latency sample, ready to draw from.

    Drawing is one table lookup. The sample becomes a table of 65,536 outcomes: the first
    ``(1 - error_rate)`` of it is the latency quantile grid of the finished calls (each entry
    the call at that rank, its TTFT with it), the rest the error times. A uniform 16-bit draw
    picks an entry; entries past ``ok_entries`` are failures; ``invalid_rate`` of the latency
    entries, spread evenly over the ranks, are results that fail validation. Where the calls
    tell their stall gaps, each entry also has its gap (``gap_table``, 0 for an entry that did
    not stall and for a failure) and the age of its last chunk before the gap
    (``stall_start_table``, ``inf`` where it did not stall): `stall_cut` reads them.

    Args:
        total_s: Seconds from the start of an attempt to its last token, sorted ascending;
            finished calls, plus cut calls with their latency drawn from the fitted tail
            beyond the cut.
        ttft_s: Seconds to the first content token of the same calls (aligned with
            ``total_s``). For a call that did not stream, the whole answer is its first
            token, so it equals ``total_s``.
        error_rate: Share of attempts that fail (error, rate limited).
        error_s: Sorted seconds an attempt takes to fail, drawn like ``total_s``.
        invalid_rate: Share of finished attempts whose output fails validation.
        calls: Calls behind the sample (finished and cut).
        censored: Share of those calls that were cut.
        bucket: The token bucket the calls come from, e.g. ``"in 4k-16k / out 600-1200"``.
        streamed: Share of calls with a real first token (0: a TTFT cutoff cannot work).
        measured: The measured latencies and cut ages behind the sample, when it has cut
            calls (for a censoring-aware refit); ``None`` otherwise.
        gap_s: Each call's mid-stream stall gap in seconds (aligned with ``total_s``; 0 for
            a call that did not stall); ``None`` when the calls cannot tell (no output
            tokens or no TTFT, or a fitted model).
        stalls: What the calls show of stalls (``None``: not read).
        error_ttft_s: Time to first token of each failure (aligned with ``error_s``; a
            failure after its first token has one); ``None``: the failure's own time.
        stall_at: Where in a stalled call's normal generation its stall is taken to begin,
            as a share of it (0: right after the first token, 1: at its end). The record
            does not say: 0.5 where a stall is as likely anywhere; bootstrap replicates draw
            it anew, so the predictions' intervals span it.
    """

    total_s: Array
    ttft_s: Array
    error_rate: float = 0.0
    error_s: Array = field(default_factory=lambda: np.ones(1))
    invalid_rate: float = 0.0
    calls: int = 0
    censored: float = 0.0
    bucket: str = "all"
    streamed: float = 1.0
    measured: tuple[Array, Array] | None = None
    gap_s: Array | None = field(default=None, repr=False)
    stalls: Stalls | None = None
    error_ttft_s: Array | None = field(default=None, repr=False)
    stall_at: float = 0.5
    ok_entries: int = field(init=False, repr=False)
    end_table: Array = field(init=False, repr=False)
    good_table: Array = field(init=False, repr=False)
    ttft_table: Array = field(init=False, repr=False)
    invalid_table: npt.NDArray[np.bool_] = field(init=False, repr=False)
    gap_table: Array | None = field(init=False, repr=False)
    stall_start_table: Array | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.total_s.size == 0 or self.ttft_s.shape != self.total_s.shape:
            msg = "a route sample needs at least one latency, with one TTFT per latency"
            raise ConfigError(msg)
        if self.gap_s is not None and self.gap_s.shape != self.total_s.shape:
            msg = "a route sample's stall gaps need one gap per latency"
            raise ConfigError(msg)
        if self.error_ttft_s is not None and self.error_ttft_s.shape != self.error_s.shape:
            msg = "a route sample's failure TTFTs need one per failure time"
            raise ConfigError(msg)
        if not (0.0 <= self.error_rate < 1.0 and 0.0 <= self.invalid_rate <= 1.0):
            msg = "error_rate must be in [0, 1) and invalid_rate in [0, 1], got "
            msg += f"{self.error_rate!r} and {self.invalid_rate!r}"
            raise ConfigError(msg)
        ok = TABLE - round(self.error_rate * TABLE)
        rank = ((np.arange(ok) + 0.5) * (self.total_s.size / ok)).astype(np.intp)
        fails = np.arange(TABLE - ok)
        spread = self.error_s.size / max(fails.size, 1)
        picks = ((fails + 0.5) * spread).astype(np.intp)
        failed_s = self.error_s[picks]
        failed_ttft = failed_s if self.error_ttft_s is None else self.error_ttft_s[picks]
        end = np.concatenate([self.total_s[rank], failed_s])
        good = np.concatenate([end[:ok], np.full(fails.size, np.inf)])
        invalid = np.zeros(TABLE, dtype=np.bool_)
        invalid[:ok] = ((np.arange(ok) + 0.5) * _GOLDEN) % 1.0 < self.invalid_rate
        object.__setattr__(self, "ok_entries", ok)
        object.__setattr__(self, "end_table", end)
        object.__setattr__(self, "good_table", good)
        object.__setattr__(self, "ttft_table", np.concatenate([self.ttft_s[rank], failed_ttft]))
        object.__setattr__(self, "invalid_table", invalid)
        gap, stall = None, None
        if self.gap_s is not None and bool((self.gap_s > 0.0).any()):
            # each finished outcome's stall: its gap, and the age its last chunk before the
            # gap came (`stall_at` of its normal generation after the first token); failures
            # and streams that did not stall have a gap of 0
            first, last, gaps = self.ttft_s[rank], self.total_s[rank], self.gap_s[rank]
            gap = np.concatenate([gaps, np.zeros(fails.size)])
            before = first + self.stall_at * np.maximum(last - gaps - first, 0.0)
            stall = np.concatenate(
                [np.where(gaps > 0.0, before, np.inf), np.full(fails.size, np.inf)]
            )
        object.__setattr__(self, "gap_table", gap)
        object.__setattr__(self, "stall_start_table", stall)

    @classmethod
    def from_latencies(
        cls,
        total_s: npt.ArrayLike,
        *,
        ttft_s: npt.ArrayLike | None = None,
        censored_at_s: npt.ArrayLike | None = None,
        error_rate: float = 0.0,
        error_s: npt.ArrayLike | None = None,
        invalid_rate: float = 0.0,
        bucket: str = "all",
        seed: int = 0,
        output_tokens: npt.ArrayLike | None = None,
    ) -> RouteSample:
        """
        Build a sample from measured calls; cut calls get a latency beyond their cut.

        A cut call's latency is drawn from the lognormal fitted to all calls (censoring
        aware), conditioned on exceeding its cut: the empirical body stays as measured and
        the tail beyond the cap comes from the fit, never from dropping the cut calls.

        Args:
            total_s: Latency of each call in seconds; NaN for a call that was cut.
            ttft_s: Time to first token per call (NaN: not streamed, or unknown); ``None``
                when no call streamed.
            censored_at_s: Cut age per call, NaN for calls that finished; ``None``: none cut.
            error_rate: Share of attempts that fail.
            error_s: Seconds failed attempts took (``None``: 1 s each).
            invalid_rate: Share of finished attempts with invalid output.
            bucket: Label of the calls' token bucket.
            seed: Seed of the draws beyond the cut.
            output_tokens: Output tokens per call (NaN: unknown); ``None``: none known. With
                the TTFTs they tell which streams stalled mid-way (`stall_gaps`).

        Raises:
            ConfigError: Fewer than two finished calls.
        """
        total = np.asarray(total_s, dtype=np.float64)
        ttft = np.full(total.shape, np.nan) if ttft_s is None else np.asarray(ttft_s, float)
        cut = (
            np.full(total.shape, np.nan)
            if censored_at_s is None
            else np.asarray(censored_at_s, float)
        )
        is_cut = np.isfinite(cut) & (cut > 0)
        done = np.isfinite(total) & (total > 0) & ~is_cut
        if np.count_nonzero(done) < 2:
            msg = f"bucket {bucket}: a route sample needs at least 2 finished calls"
            raise ConfigError(msg)
        filled = total.copy()
        if is_cut.any():
            filled[is_cut] = _beyond_cut(total[done], cut[is_cut], seed=seed)
        keep = done | is_cut
        gaps, stalls = None, None
        if output_tokens is not None:
            tokens = np.asarray(output_tokens, dtype=np.float64)
            gaps, stalls = stall_gaps(np.where(done, total, np.nan), ttft, tokens)
        if gaps is None and output_tokens is None and np.isfinite(ttft).any():
            stalls = stall_gaps(total, ttft, np.full(total.shape, np.nan))[1]
        filled, first = filled[keep], ttft[keep]
        streamed = np.isfinite(first) & (first > 0)
        first = np.where(streamed, np.minimum(first, filled), filled)
        order = np.argsort(filled, kind="stable")
        errors = np.ones(1) if error_s is None else np.asarray(error_s, dtype=np.float64)
        errors = np.sort(errors[np.isfinite(errors) & (errors >= 0)])
        return cls(
            total_s=filled[order],
            ttft_s=first[order],
            error_rate=float(error_rate),
            error_s=errors if errors.size else np.ones(1),
            invalid_rate=float(invalid_rate),
            calls=int(keep.sum()),
            censored=float(is_cut[keep].mean()),
            bucket=bucket,
            streamed=float(streamed.mean()),
            measured=(total[keep], cut[keep]) if is_cut.any() else None,
            gap_s=None if gaps is None else gaps[keep][order],
            stalls=stalls,
        )

    @classmethod
    def lognormal(
        cls,
        median_s: float,
        sigma: float,
        *,
        ttft_share: float | None = None,
        error_rate: float = 0.0,
        invalid_rate: float = 0.0,
        points: int = _GRID,
    ) -> RouteSample:
        """
        A fitted lognormal as a quantile grid (a model instead of measured calls).

        Args:
            median_s: Median latency in seconds (``exp(mu)``).
            sigma: Standard deviation of log latency.
            ttft_share: TTFT as this share of each total; ``None``: not streamed.
            error_rate: Share of attempts that fail (after 1 s).
            invalid_rate: Share of finished attempts with invalid output.
            points: Grid size.
        """
        from scipy import special

        grid = (np.arange(points) + 0.5) / points
        total = median_s * np.exp(sigma * math.sqrt(2.0) * special.erfinv(2.0 * grid - 1.0))
        return cls.from_grid(
            total, ttft_share=ttft_share, error_rate=error_rate, invalid_rate=invalid_rate
        )

    @classmethod
    def from_grid(
        cls,
        total_s: npt.ArrayLike,
        *,
        ttft_share: float | None = None,
        error_rate: float = 0.0,
        invalid_rate: float = 0.0,
        bucket: str = "model",
    ) -> RouteSample:
        """
        A sample from latencies that are already a quantile grid or a large draw.
        """
        total = np.sort(np.asarray(total_s, dtype=np.float64))
        first = total if ttft_share is None else total * ttft_share
        return cls(
            total_s=total,
            ttft_s=first,
            error_rate=error_rate,
            invalid_rate=invalid_rate,
            calls=total.size,
            bucket=bucket,
            streamed=0.0 if ttft_share is None else 1.0,
        )

    def as_lognormal(self) -> RouteSample:
        """
        The same route as its fitted lognormal (cut calls right-censored in the fit).

        Error and invalid rates stay as measured; for a streamed route the TTFT is its
        median share of the total.
        """
        from tailkit.fit import fit_lognormal

        fit = fit_lognormal(self.total_s)
        if self.measured is not None:
            latency, cut = self.measured
            fit = fit_lognormal(latency, censored_at_s=cut)
        _check_fit(fit.note)
        share = None
        if self.streamed >= 0.5:
            share = float(np.median(self.ttft_s / self.total_s))
        model = RouteSample.lognormal(
            math.exp(fit.mu), fit.sigma, ttft_share=share,
            error_rate=self.error_rate, invalid_rate=self.invalid_rate,
        )  # fmt: skip
        return dataclasses.replace(
            model, error_s=self.error_s, calls=self.calls, censored=self.censored,
            bucket=f"{self.bucket} (lognormal fit)",
        )  # fmt: skip

    def stall_cut(self, index: Index, stall_cutoff_s: float) -> Array | None:
        """
        The age at which a stall cutoff of ``stall_cutoff_s`` cuts each drawn outcome.

        An outcome whose stream stalls longer than the cutoff goes ``stall_cutoff_s`` without
        a chunk after its last chunk before the gap (``ttft + stall_at x (total - gap -
        ttft)``, see `stall_at`): the executor's stall cutoff passes there, before the stream
        resumes, and the step acts as at any other cutoff. ``inf`` where it never passes (no
        stall that long, a failure); ``None`` when no outcome can be cut (the calls cannot
        tell, no gap that long, or no cutoff).

        Args:
            index: Table indexes of the outcomes drawn.
            stall_cutoff_s: The step's stall cutoff in seconds (``inf``: none).
        """
        gaps, before = self.gap_table, self.stall_start_table
        if gaps is None or before is None or not math.isfinite(stall_cutoff_s):
            return None
        gap = gaps[index]
        return np.where(gap > stall_cutoff_s, before[index] + stall_cutoff_s, np.inf)

    def generation_tail(self) -> float:
        """
        How heavy the tail of the generation (``total - ttft``) is: its p99 over its median.

        NaN when the route does not stream (no generation apart from the first token).
        """
        if self.streamed < 0.5:
            return math.nan
        gen = np.sort(self.total_s - self.ttft_s)
        middle = quantile(gen, 0.5, presorted=True)
        if middle <= 0.0:
            return math.nan
        return quantile(gen, 0.99, presorted=True) / middle

    def quantile(self, q: float, *, signal: str = "total") -> float:
        """
        The ``q`` quantile of the sample's total latency (or of its TTFT), in seconds.

        The type-7 sample quantile (`tailkit.fit.quantile`, ``"linear"``): the number
        ``tailkit stats`` prints for the same calls, so the optimizer's p95 cutoff is the p95
        of the tail table.
        """
        values = self.total_s if signal == "total" else np.sort(self.ttft_s)
        return quantile(values, q, presorted=True)

    @property
    def fails(self) -> bool:
        """
        Whether any attempt on this route fails.
        """
        return self.ok_entries < TABLE


def _beyond_cut(finished: Array, cuts: Array, *, seed: int) -> Array:
    """
    Latencies beyond each cut, from the censoring-aware lognormal fit of all the calls.
    """
    from scipy import special

    from tailkit.fit import fit_lognormal

    latency = np.concatenate([finished, np.full(cuts.size, np.nan)])
    censored = np.concatenate([np.full(finished.size, np.nan), cuts])
    fit = fit_lognormal(latency, censored_at_s=censored)
    _check_fit(fit.note)
    rng = np.random.default_rng(seed)
    # Inverse CDF above the cut: u' = F(cut) + u (1 - F(cut)).
    z_cut = (np.log(cuts) - fit.mu) / fit.sigma
    f_cut = 0.5 * special.erfc(-z_cut / math.sqrt(2.0))
    u = f_cut + rng.random(cuts.size) * (1.0 - f_cut)
    u = np.clip(u, 1e-12, 1.0 - 1e-12)
    z = math.sqrt(2.0) * special.erfinv(2.0 * u - 1.0)
    filled: Array = np.maximum(np.exp(fit.mu + fit.sigma * z), cuts)
    return filled


def _check_fit(note: str | None) -> None:
    """
    Refuse a route whose lognormal fit has no estimate (the fit says why).
    """
    if note is not None:
        msg = (
            f"this route's latency has no lognormal fit ({note}): ingest more finished calls "
            "of the route, or resample its calls ({field} 'empirical') with calls cut later"
        )
        raise ConfigError(
            msg,
            field="latency",
            value="lognormal",
            fix="ingest more finished calls of the route",
        )
