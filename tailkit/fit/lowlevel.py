"""
The fits' building blocks, for the tail table, the simulator, extensions and tests; they may change.

The order-statistic ranks and sorted-sample quantiles the tail table reads many groups with at
once (`OrderStatisticRanks`, `sorted_quantiles`), the streaming Kaplan-Meier curve
(`KaplanMeierStream`), the batch forms of the public fits (`fit_transient_tails`,
`goodness_of_fit_many`, `fit_lognormal_moments`), and the pieces `tail_kind` is made of: the
size regression, the residual tail, a second (slower) mode, time clustering and growth, the
token rate and the hedge evidence. Code written against `tailkit.fit` needs none of them.
"""

from tailkit.fit._gof import FamilyFit, goodness_of_fit_many
from tailkit.fit._km_stream import KaplanMeierStream
from tailkit.fit._lognormal import fit_lognormal_moments
from tailkit.fit._mixture import fit_transient_tails
from tailkit.fit._modes import SlowMode, slow_mode
from tailkit.fit._phase import TokenRate, token_rate
from tailkit.fit._quantiles import OrderStatisticRanks, quantile_warning, sorted_quantiles
from tailkit.fit._size import ResidualTail, SizeModel, residual_tail, size_model
from tailkit.fit._tailkind import HedgeEvidence, hedge_evidence
from tailkit.fit._trend import TailGrowth, TimeClustering, tail_growth, time_clustering


__all__ = [
    "FamilyFit",
    "HedgeEvidence",
    "KaplanMeierStream",
    "OrderStatisticRanks",
    "ResidualTail",
    "SizeModel",
    "SlowMode",
    "TailGrowth",
    "TimeClustering",
    "TokenRate",
    "fit_lognormal_moments",
    "fit_transient_tails",
    "goodness_of_fit_many",
    "hedge_evidence",
    "quantile_warning",
    "residual_tail",
    "size_model",
    "slow_mode",
    "sorted_quantiles",
    "tail_growth",
    "time_clustering",
    "token_rate",
]
