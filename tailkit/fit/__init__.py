"""
Pure numerics for latency tails: arrays in, frozen results out.

Every estimate carries its sample size and an interval (`tailkit.estimate.Estimate`); cut
calls (``censored_at_s``) are right-censored observations, never dropped. `quantile` is the
one sample-quantile function of tailkit (type 7 unless a method is named). The pieces the fits
are made of are in `tailkit.fit.lowlevel`.
"""

from tailkit.fit._gof import GoodnessOfFit as GoodnessOfFit
from tailkit.fit._gof import goodness_of_fit as goodness_of_fit
from tailkit.fit._lognormal import LognormalFit as LognormalFit
from tailkit.fit._lognormal import fit_lognormal as fit_lognormal
from tailkit.fit._mixture import TransientTailFit as TransientTailFit
from tailkit.fit._mixture import fit_transient_tail as fit_transient_tail
from tailkit.fit._phase import PhaseSplit as PhaseSplit
from tailkit.fit._phase import phase_split as phase_split
from tailkit.fit._phase import project_finish_s as project_finish_s
from tailkit.fit._quantiles import QUANTILE_METHODS as QUANTILE_METHODS
from tailkit.fit._quantiles import QuantileEstimate as QuantileEstimate
from tailkit.fit._quantiles import empirical_quantiles as empirical_quantiles
from tailkit.fit._quantiles import min_calls_for_quantile as min_calls_for_quantile
from tailkit.fit._quantiles import quantile as quantile
from tailkit.fit._tail_warning import tail_warning as tail_warning
from tailkit.fit._tailkind import TAIL_KINDS as TAIL_KINDS
from tailkit.fit._tailkind import TailKind as TailKind
from tailkit.fit._tailkind import tail_kind as tail_kind


__all__ = [
    "QUANTILE_METHODS",
    "TAIL_KINDS",
    "GoodnessOfFit",
    "LognormalFit",
    "PhaseSplit",
    "QuantileEstimate",
    "TailKind",
    "TransientTailFit",
    "empirical_quantiles",
    "fit_lognormal",
    "fit_transient_tail",
    "goodness_of_fit",
    "min_calls_for_quantile",
    "phase_split",
    "project_finish_s",
    "quantile",
    "tail_kind",
    "tail_warning",
]
