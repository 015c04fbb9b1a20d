"""
Pure numerics for latency tails: arrays in, frozen results out.

Every estimate carries its sample size and an interval; cut calls (``censored_at_s``) are
right-censored observations, never dropped.
"""

from tailkit.fit._gof import FamilyFit as FamilyFit
from tailkit.fit._gof import GoodnessOfFit as GoodnessOfFit
from tailkit.fit._gof import goodness_of_fit as goodness_of_fit
from tailkit.fit._gof import goodness_of_fit_many as goodness_of_fit_many
from tailkit.fit._km_stream import KaplanMeierStream as KaplanMeierStream
from tailkit.fit._lognormal import LognormalFit as LognormalFit
from tailkit.fit._lognormal import fit_lognormal as fit_lognormal
from tailkit.fit._lognormal import fit_lognormal_moments as fit_lognormal_moments
from tailkit.fit._mixture import TransientTailFit as TransientTailFit
from tailkit.fit._mixture import fit_transient_tail as fit_transient_tail
from tailkit.fit._mixture import fit_transient_tails as fit_transient_tails
from tailkit.fit._phase import PhaseSplit as PhaseSplit
from tailkit.fit._phase import TokenRate as TokenRate
from tailkit.fit._phase import phase_split as phase_split
from tailkit.fit._phase import project_finish_s as project_finish_s
from tailkit.fit._phase import token_rate as token_rate
from tailkit.fit._quantiles import QUANTILE_METHODS as QUANTILE_METHODS
from tailkit.fit._quantiles import OrderStatisticRanks as OrderStatisticRanks
from tailkit.fit._quantiles import QuantileEstimate as QuantileEstimate
from tailkit.fit._quantiles import empirical_quantiles as empirical_quantiles
from tailkit.fit._quantiles import min_calls_for_quantile as min_calls_for_quantile
from tailkit.fit._quantiles import quantile as quantile
from tailkit.fit._quantiles import quantile_warning as quantile_warning
from tailkit.fit._quantiles import sorted_quantiles as sorted_quantiles
from tailkit.fit._size import ResidualTail as ResidualTail
from tailkit.fit._size import SizeModel as SizeModel
from tailkit.fit._size import residual_tail as residual_tail
from tailkit.fit._size import size_model as size_model
from tailkit.fit._tail_warning import tail_warning as tail_warning
from tailkit.fit._tailkind import TAIL_KINDS as TAIL_KINDS
from tailkit.fit._tailkind import HedgeEvidence as HedgeEvidence
from tailkit.fit._tailkind import TailKind as TailKind
from tailkit.fit._tailkind import hedge_evidence as hedge_evidence
from tailkit.fit._tailkind import tail_kind as tail_kind
from tailkit.fit._trend import TailGrowth as TailGrowth
from tailkit.fit._trend import TimeClustering as TimeClustering
from tailkit.fit._trend import tail_growth as tail_growth
from tailkit.fit._trend import time_clustering as time_clustering


__all__ = [
    "QUANTILE_METHODS",
    "TAIL_KINDS",
    "FamilyFit",
    "GoodnessOfFit",
    "HedgeEvidence",
    "KaplanMeierStream",
    "LognormalFit",
    "OrderStatisticRanks",
    "PhaseSplit",
    "QuantileEstimate",
    "ResidualTail",
    "SizeModel",
    "TailGrowth",
    "TailKind",
    "TimeClustering",
    "TokenRate",
    "TransientTailFit",
    "empirical_quantiles",
    "fit_lognormal",
    "fit_lognormal_moments",
    "fit_transient_tail",
    "fit_transient_tails",
    "goodness_of_fit",
    "goodness_of_fit_many",
    "hedge_evidence",
    "min_calls_for_quantile",
    "phase_split",
    "project_finish_s",
    "quantile",
    "quantile_warning",
    "residual_tail",
    "size_model",
    "sorted_quantiles",
    "tail_growth",
    "tail_kind",
    "tail_warning",
    "time_clustering",
    "token_rate",
]
