"""
Repeat attempts of slow calls: the direct evidence on whether a fresh attempt escapes a tail.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailkit.store._band import band_quantile_sql
from tailkit.store._summary import OK_CALL


__all__ = [
    "ATTEMPT_KEY",
    "ESCAPE_RANK",
    "MIN_REFERENCE",
    "SLOW_RANK",
    "paired_calls_sql",
    "repeat_attempts_sql",
]

ATTEMPT_KEY = "coalesce(json_extract_string(attrs, '$.idempotency_key'), run_id || chr(31) || step)"
"""SQL of what links the attempts of one call: the executor's idempotency key, else run and step."""

ESCAPE_RANK = 0.75  # a fresh attempt "escaped" when it finished below its route's p75
MIN_REFERENCE = 50  # first attempts a route needs for its p75 to be a reference
SLOW_RANK = 0.95  # a paired call is slow beyond its route's p95 (or cut)


def repeat_attempts_sql(
    source_sql: str, by: Sequence[str] = (), *, pairs_only: bool = False
) -> str:
    """
    Slow calls retried or hedged, and how many of those fresh attempts finished fast.

    Grouped by the ``by`` columns of the first attempt (one row without them); ``source_sql``
    is what to select calls from (a table, or a parenthesised query with an alias).
    Attempts of one call share the executor's idempotency key (``attrs``), else their run
    and step. A first attempt counts when it was slow: it was cut, or a hedge raced it (a
    first attempt that failed fast or failed validation says nothing about its latency).
    Its fresh attempt is the next one, a hedge or a retry that finished or was cut. It
    escaped when it finished below the p75 of first attempts on its own route (provider and
    model) for the same step: an independent draw does so 75 % of the time, a call as big as
    the slow one rarely. Pairs whose fresh route has fewer than 50 such first attempts have
    no reference and are left out. Columns: the ``by`` columns, ``pairs`` and ``escaped``.

    With ``pairs_only`` the pairs are counted before any reference: per ``by`` columns and
    fresh attempt's ``_provider``, ``_model``, ``_step`` and latency ``_total`` (NULL: cut),
    ``n`` pairs; a part of a log judges them later by the references of the whole.
    """
    keys = "".join(f'f."{k}", ' for k in by)
    key = ATTEMPT_KEY
    # Only repeat attempts are few: find them first, then their first attempts and the
    # references of their routes, so a log without any costs one scan.
    slow = "WHERE f.censored_at_s > 0 OR (x.role = 'hedge' AND f.status = 'ok')"
    found = (
        f"WITH fresh AS (SELECT {key} AS _key, role, provider, model, step, "
        "CASE WHEN status = 'ok' THEN total_s END AS _total "
        f"FROM {source_sql} WHERE attempt > 0 AND role IN ('hedge', 'retry') "
        "AND (status = 'ok' OR censored_at_s > 0) "
        # the first repeat; attempts numbered alike (a hedge and a retry) in a fixed order
        "QUALIFY row_number() OVER (PARTITION BY _key ORDER BY attempt, started_at, call_id, "
        "role, total_s) = 1), "
        f"f AS (SELECT *, {key} AS _key FROM {source_sql} WHERE attempt = 0 "
        f"AND {key} IN (SELECT _key FROM fresh)) "
    )
    if pairs_only:
        return (
            f"{found}SELECT {keys}x.provider AS _provider, x.model AS _model, x.step AS _step, "
            f"x._total AS _total, count(*) AS n FROM f JOIN fresh AS x ON x._key = f._key "
            f"{slow} GROUP BY ALL"
        )
    return (
        f"{found}, {_reference_sql(source_sql)}"
        f"SELECT {keys}count(*) AS pairs, "
        "count(*) FILTER (x._total < r._p75) AS escaped "
        "FROM f JOIN fresh AS x ON x._key = f._key "
        "JOIN ref AS r ON r.provider = x.provider AND r.model = x.model "
        f"AND r.step IS NOT DISTINCT FROM x.step {slow} "
        f"{'GROUP BY ALL' if by else ''}"
    )


_BAND = 0.005  # each side of ESCAPE_RANK, in rank, around the t-digest's estimate


def _reference_sql(source_sql: str) -> str:
    """
    The CTEs ending in ``ref``: each route and step's exact p75 of first attempts (``_p75``).

    DuckDB's ``quantile_cont`` would hold every first attempt in memory, unable to spill; so
    a t-digest (``approx_quantile``, fixed size) brackets the p75 at ±0.5 % in rank, one scan
    lists the latencies inside the bracket and counts those below it, and the p75 is read from
    the list (`band_quantile_sql`). A bracket that missed (a t-digest is far
    closer) falls back to ``quantile_cont`` for its route alone.
    """
    lo, hi = ESCAPE_RANK - _BAND, ESCAPE_RANK + _BAND
    route = "r.provider = e.provider AND r.model = e.model AND r.step IS NOT DISTINCT FROM e.step"
    return (
        "firsts AS (SELECT provider, model, step, total_s "
        f"FROM {source_sql} WHERE attempt = 0 AND {OK_CALL} "
        "AND (provider, model) IN (SELECT (provider, model) FROM fresh)), "
        "est AS (SELECT provider, model, step, count(*) AS _n, "
        f"approx_quantile(total_s, [{lo}, {hi}]) AS _e FROM firsts GROUP BY ALL "
        f"HAVING count(*) >= {MIN_REFERENCE}), "
        "band AS (SELECT e.provider, e.model, e.step, e._n, "
        "count(*) FILTER (r.total_s < e._e[1]) AS _below, "
        "list_sort(list(r.total_s) FILTER (r.total_s >= e._e[1] AND r.total_s <= e._e[2])) "
        f"AS _in FROM firsts AS r JOIN est AS e ON {route} "
        "GROUP BY e.provider, e.model, e.step, e._n), "
        "banded AS (SELECT provider, model, step, "
        f"{band_quantile_sql('_n', '_below', '_in', ESCAPE_RANK)} AS _p75 FROM band), "
        "missed AS (SELECT e.provider, e.model, e.step, "
        f"quantile_cont(r.total_s, {ESCAPE_RANK}) AS _p75 FROM firsts AS r "
        f"JOIN (SELECT * FROM banded WHERE _p75 IS NULL) AS e ON {route} GROUP BY ALL), "
        "ref AS (SELECT * FROM banded WHERE _p75 IS NOT NULL UNION ALL SELECT * FROM missed) "
    )


def paired_calls_sql(source_sql: str, by: Sequence[str] = ()) -> str:
    """
    Slow calls whose job also ran on another route, and how often it finished fast there.

    The paired-call twin of `tailkit.store.repeat_attempts_sql`, over first attempts that
    carry a ``job_key`` (the same prompt or task; `docs/call-record.md`) and whose job ran on
    more than one route (provider and model). A call is slow when it was cut or finished
    beyond the p95 of its route and step; its partner is one call of the same job on another
    route, drawn by a hash of both call ids (so each slow call counts once: the pairs stay
    independent however many routes a job ran on). It escaped when the partner finished below
    the p75 of its own route and step: an independent draw does so 75 % of the time, a job
    whose slowness is its own (hidden reasoning, a slow tool) rarely. Routes and steps need
    `MIN_REFERENCE` finished calls with a job key for a p95 or p75. Grouped by the ``by``
    columns of the slow call; columns: those, ``pairs`` and ``escaped``.
    """
    keys = "".join(f's."{k}", ' for k in by)
    outer = "".join(f'"{k}", ' for k in by)
    carried = "".join(f'"{k}", ' for k in by if k not in _PAIR_COLUMNS)
    route = (
        "r.provider = {t}.provider AND r.model = {t}.model AND r.step IS NOT DISTINCT FROM {t}.step"
    )
    return (
        f"WITH j AS (SELECT {carried}{', '.join(_PAIR_COLUMNS)} FROM {source_sql} "
        "WHERE attempt = 0 AND job_key IS NOT NULL "
        f"AND (({OK_CALL}) OR censored_at_s > 0)), "
        "jj AS (SELECT * FROM j WHERE job_key IN (SELECT job_key FROM j GROUP BY job_key "
        "HAVING count(DISTINCT (provider, model)) > 1)), "
        "ref AS (SELECT provider, model, step, "
        f"quantile_cont(total_s, {SLOW_RANK}) AS _slow, "
        f"quantile_cont(total_s, {ESCAPE_RANK}) AS _fast FROM jj WHERE {OK_CALL} "
        f"GROUP BY ALL HAVING count(*) >= {MIN_REFERENCE}), "
        "slow AS (SELECT s.* FROM jj AS s JOIN ref AS r ON "
        f"{route.format(t='s')} "
        "WHERE s.censored_at_s > 0 OR s.total_s > r._slow), "
        f"pair AS (SELECT {keys}p.status = 'ok' AND p.total_s < r._fast AS _escaped "
        "FROM slow AS s JOIN jj AS p ON p.job_key = s.job_key "
        "AND (p.provider <> s.provider OR p.model <> s.model) "
        f"JOIN ref AS r ON {route.format(t='p')} "
        "QUALIFY row_number() OVER (PARTITION BY s.call_id "
        "ORDER BY md5(s.call_id || chr(31) || p.call_id), p.call_id) = 1) "
        f"SELECT {outer}count(*) AS pairs, "
        "count(*) FILTER (_escaped) AS escaped FROM pair "
        f"{'GROUP BY ALL' if by else ''}"
    )


_PAIR_COLUMNS = ("call_id", "job_key", "provider", "model", "step", "status", "total_s",
                 "censored_at_s")  # fmt: skip
