"""
Each route's tail kind, as the simulator's independent draws need it.

The simulator draws a fresh attempt independently of the one it replaces: right for a
transient tail, wrong for a work-driven one (a big call is slow again). `route_tail_kinds`
tells the caller which routes are which, from the route's calls in the store (a seeded
sample of them on a large store).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tailkit.config import Plan
from tailkit.fit import TailKind, hedge_evidence, tail_kind
from tailkit.store import OK_CALL, Store, group_sample_sql, repeat_attempts_sql


__all__ = ["route_tail_kinds"]

MAX_CALLS = 200_000  # a route's verdict runs on a seeded sample of at most this many calls
_JUDGED = f"(({OK_CALL}) OR censored_at_s > 0)"  # finished or cut: what the verdict reads
_COLUMNS = (
    "CASE WHEN status = 'ok' THEN total_s END AS total_s, censored_at_s, output_tokens, "
    "input_tokens, epoch(started_at) AS started_s, "
    "CASE WHEN status = 'ok' THEN ttft_s END AS ttft_s"
)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def route_tail_kinds(
    store: Store, plan: Plan, routes: Iterable[str], *, sample_size: int = MAX_CALLS
) -> dict[str, TailKind]:
    """
    The tail kind of each named route of ``plan`` (see `tailkit.fit.tail_kind`).

    Uses the finished and cut calls of the route, all token sizes (the verdict conditions on
    size itself), and the repeat attempts of its slow calls. A route with more than
    ``sample_size`` such calls is judged on a seeded sample of them drawn inside DuckDB
    (`tailkit.store.group_sample_sql`), so memory does not grow with the store.

    Args:
        store: An open store.
        plan: The workflow whose routes are named.
        routes: Route names of ``plan``.
        sample_size: Most calls a route's verdict reads.
    """
    out: dict[str, TailKind] = {}
    repeats = {
        (str(r[0]), str(r[1])): (int(r[2]), int(r[3]))
        for r in store.fetchall(repeat_attempts_sql("calls", ("provider", "model")))
    }
    for name in dict.fromkeys(routes):
        route = plan.routes[name]
        where = f"provider = {_lit(route.provider)} AND model = {_lit(route.model)} AND {_JUDGED}"
        counted = store.fetchone(f"SELECT count(*) FROM calls WHERE {where}")
        n = int(counted[0]) if counted else 0
        if n <= sample_size:
            rows = f"SELECT * FROM calls WHERE {where}"
            order = ""
        else:
            rows = group_sample_sql(
                "calls", ("provider", "model"), size=sample_size, seed=0, where=where
            )
            order = (
                " ORDER BY started_s, total_s, censored_at_s, ttft_s, input_tokens, output_tokens"
            )
        table = store.arrow(f"SELECT {_COLUMNS} FROM ({rows}){order}")
        column = {
            c: np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
            for c in table.column_names
        }
        pair = repeats.get((route.provider, route.model))
        evidence = hedge_evidence(*pair) if pair else None
        out[name] = tail_kind(
            column["total_s"], censored_at_s=column["censored_at_s"],
            output_tokens=column["output_tokens"], input_tokens=column["input_tokens"],
            started_at_s=column["started_s"], ttft_s=column["ttft_s"], hedges=evidence,
        )  # fmt: skip
    return out
