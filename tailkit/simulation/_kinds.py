"""
Each route's tail kind, for calibrate's choices and warnings.

A fresh attempt escapes a transient tail and meets a work-driven one again (a big call is
slow again); repeat attempts in ledgers and paired calls (the same job on other routes) say
which, where single calls can only suggest it. `route_tail_kinds`
tells the caller which routes are which, from the route's calls in the store (a seeded
sample of them on a large store).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import numpy as np
import numpy.typing as npt

from tailkit.config import Plan
from tailkit.fit import TailKind, tail_kind
from tailkit.fit.lowlevel import hedge_evidence
from tailkit.simulation._fetch import since_sql, within
from tailkit.store import Store
from tailkit.store.lowlevel import OK_CALL, group_sample_sql, paired_calls_sql, repeat_attempts_sql


__all__ = ["route_tail_kinds"]

MAX_CALLS = 200_000  # a route's verdict runs on a seeded sample of at most this many calls
_JUDGED = f"(({OK_CALL}) OR censored_at_s > 0)"  # finished or cut: what the verdict reads
_COLUMNS = (
    "CASE WHEN status = 'ok' THEN total_s END AS total_s, censored_at_s, output_tokens, "
    "input_tokens, epoch(started_at) AS started_s, "
    "CASE WHEN status = 'ok' THEN ttft_s END AS ttft_s"
)
_NAMES = ("total_s", "censored_at_s", "output_tokens", "input_tokens", "started_s", "ttft_s")


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def route_tail_kinds(
    store: Store,
    plan: Plan,
    routes: Iterable[str],
    *,
    sample_size: int = MAX_CALLS,
    since: datetime | None = None,
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
        since: Only calls started at or after this instant (a time-zone-aware datetime) are
            judged; the repeat attempts and paired calls that back the verdict are read from
            every call. ``None``: every call.
    """
    repeats = {
        (str(r[0]), str(r[1])): (int(r[2]), int(r[3]))
        for r in store.fetchall(repeat_attempts_sql("calls", ("provider", "model")))
    }
    paired = {  # the same job on other routes: whether a fresh attempt elsewhere escapes
        (str(r[0]), str(r[1])): (int(r[2]), int(r[3]))
        for r in store.fetchall(paired_calls_sql("calls", ("provider", "model")))
    }
    names = list(dict.fromkeys(routes))
    pairs = list(dict.fromkeys((plan.routes[n].provider, plan.routes[n].model) for n in names))
    scope = since_sql(since)
    columns = {pair: _columns(store, [pair], sample_size, scope)[pair] for pair in pairs}
    out: dict[str, TailKind] = {}
    for name in names:
        pair = (plan.routes[name].provider, plan.routes[name].model)
        column = columns[pair]
        counts, jobs = repeats.get(pair), paired.get(pair)
        evidence = hedge_evidence(*counts) if counts else None
        out[name] = tail_kind(
            column["total_s"], censored_at_s=column["censored_at_s"],
            output_tokens=column["output_tokens"], input_tokens=column["input_tokens"],
            started_at_s=column["started_s"], ttft_s=column["ttft_s"], hedges=evidence,
            paired=hedge_evidence(*jobs) if jobs else None,
        )  # fmt: skip
    return out


def _columns(
    store: Store, pairs: list[tuple[str, str]], sample_size: int, scope: str | None = None
) -> dict[tuple[str, str], dict[str, npt.NDArray[np.float64]]]:
    """
    Each route's calls as the verdict reads them: all of them, or a sample of ``sample_size``.

    One pass counts the routes; one query reads the small routes whole (in the store's
    order), one the sampled ones (in time order, ties sorted: the same whatever the store's).
    The caller passes one route at a time: DuckDB's memory grows with the routes sampled at
    once.
    """
    routes = [f"(provider = {_lit(p)} AND model = {_lit(m)})" for p, m in pairs]
    where = within(f"({' OR '.join(routes) or 'FALSE'}) AND {_JUDGED}", scope)
    sizes = {
        (str(r[0]), str(r[1])): int(r[2])
        for r in store.fetchall(
            f"SELECT provider, model, count(*) FROM calls WHERE {where} GROUP BY ALL"
        )
    }
    out = {pair: {c: np.zeros(0) for c in _NAMES} for pair in pairs}
    for sampled in (False, True):
        group = [i for i, pair in enumerate(pairs) if (sizes.get(pair, 0) > sample_size) == sampled]
        if not group:
            continue
        which = " ".join(f"WHEN {routes[i]} THEN {i}" for i in group)
        chosen = within(f"({' OR '.join(routes[i] for i in group)}) AND {_JUDGED}", scope)
        rows = f"SELECT * FROM calls WHERE {chosen}"
        order = ""
        if sampled:
            rows = group_sample_sql(
                "calls", ("provider", "model"), size=sample_size, seed=0, where=chosen
            )
            order = f" ORDER BY _route, {', '.join(('started_s', *_NAMES))}"
        table = store.arrow(f"SELECT CASE {which} END AS _route, {_COLUMNS} FROM ({rows}){order}")
        index = table.column("_route").to_numpy(zero_copy_only=False)
        values = {
            c: np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
            for c in _NAMES
        }
        for i in group:
            mask = index == i
            out[pairs[i]] = {c: v[mask] for c, v in values.items()}
    return out
