"""
An exact quantile read from a narrow band of values, for quantiles DuckDB cannot hold in memory.
"""

from __future__ import annotations


def band_quantile_sql(n: str, below: str, inside: str, q: float) -> str:
    """
    SQL for the type-7 ``q``-quantile of ``n`` values, or NULL when the band misses it.

    ``below`` counts the values under the band, ``inside`` lists those in it, sorted (SQL
    expressions, e.g. columns). The quantile interpolates the ``floor(rn)``-th and
    ``ceil(rn)``-th values (0-based, ``rn = (n - 1) q``) as ``lo + (hi - lo) * (rn - floor(rn))``,
    numpy's default and DuckDB's ``quantile_cont`` (up to the last bit); it is exact whenever
    both lie inside the band, which a band drawn around a t-digest estimate nearly always holds.
    """
    rn = f"(({n}) - 1) * {float(q)!r}"
    lo = f"(floor({rn})::BIGINT - ({below}) + 1)"
    hi = f"(ceil({rn})::BIGINT - ({below}) + 1)"
    return (
        f"CASE WHEN {lo} >= 1 AND {hi} <= len({inside}) "
        f"THEN {inside}[{lo}] + ({inside}[{hi}] - {inside}[{lo}]) * ({rn} - floor({rn})) END"
    )
