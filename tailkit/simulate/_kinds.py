"""
Each route's tail kind, as the simulator's independent draws need it.

The simulator draws a fresh attempt independently of the one it replaces: right for a
transient tail, wrong for a work-driven one (a big call is slow again). `route_tail_kinds`
tells the caller which routes are which, from every call of the route in the store.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tailkit.config import Plan
from tailkit.fit import TailKind, hedge_evidence, tail_kind
from tailkit.store import OK_CALL, Store, repeat_attempts_sql


__all__ = ["route_tail_kinds"]

MAX_CALLS = 200_000  # a route's verdict runs on a seeded sample of at most this many calls


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def route_tail_kinds(store: Store, plan: Plan, routes: Iterable[str]) -> dict[str, TailKind]:
    """
    The tail kind of each named route of ``plan`` (see `tailkit.fit.tail_kind`).

    Uses the finished and cut calls of the route, all token sizes (the verdict conditions on
    size itself; a seeded sample of 200,000 beyond that), and the repeat attempts of its slow
    calls.
    """
    out: dict[str, TailKind] = {}
    repeats = {
        (str(r[0]), str(r[1])): (int(r[2]), int(r[3]))
        for r in store.fetchall(repeat_attempts_sql("calls", ("provider", "model")))
    }
    for name in dict.fromkeys(routes):
        route = plan.routes[name]
        where = f"provider = {_lit(route.provider)} AND model = {_lit(route.model)}"
        table = store.arrow(
            "SELECT * FROM (SELECT CASE WHEN status = 'ok' THEN total_s END AS total_s, "
            "censored_at_s, output_tokens, input_tokens, epoch(started_at) AS started_s, "
            "CASE WHEN status = 'ok' THEN ttft_s END AS ttft_s FROM calls "
            f"WHERE {where} AND (({OK_CALL}) OR censored_at_s > 0)) "
            f"USING SAMPLE reservoir({MAX_CALLS} ROWS) REPEATABLE (0)"
        )
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
