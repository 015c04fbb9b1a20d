"""
Repeat attempts of slow calls: the direct evidence on whether a fresh attempt escapes a tail.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailkit.store._summary import OK_CALL


__all__ = ["ESCAPE_RANK", "MIN_REFERENCE", "repeat_attempts_sql"]

ESCAPE_RANK = 0.75  # a fresh attempt "escaped" when it finished below its route's p75
MIN_REFERENCE = 50  # first attempts a route needs for its p75 to be a reference


def repeat_attempts_sql(source_sql: str, by: Sequence[str] = ()) -> str:
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
    """
    keys = "".join(f'f."{k}", ' for k in by)
    key = "coalesce(json_extract_string(attrs, '$.idempotency_key'), run_id || chr(31) || step)"
    # Only repeat attempts are few: find them first, then their first attempts and the
    # references of their routes, so a log without any costs one scan.
    return (
        f"WITH fresh AS (SELECT {key} AS _key, role, provider, model, step, "
        "CASE WHEN status = 'ok' THEN total_s END AS _total "
        f"FROM {source_sql} WHERE attempt > 0 AND role IN ('hedge', 'retry') "
        "AND (status = 'ok' OR censored_at_s > 0) "
        "QUALIFY row_number() OVER (PARTITION BY _key ORDER BY attempt) = 1), "
        f"f AS (SELECT *, {key} AS _key FROM {source_sql} WHERE attempt = 0 "
        f"AND {key} IN (SELECT _key FROM fresh)), "
        "ref AS (SELECT provider, model, step, "
        f"quantile_cont(total_s, {ESCAPE_RANK}) AS _p75 FROM {source_sql} "
        f"WHERE attempt = 0 AND {OK_CALL} "
        "AND (provider, model) IN (SELECT (provider, model) FROM fresh) GROUP BY ALL "
        f"HAVING count(*) >= {MIN_REFERENCE}) "
        f"SELECT {keys}count(*) AS pairs, "
        "count(*) FILTER (x._total < r._p75) AS escaped "
        "FROM f JOIN fresh AS x ON x._key = f._key "
        "JOIN ref AS r ON r.provider = x.provider AND r.model = x.model "
        "AND r.step IS NOT DISTINCT FROM x.step "
        "WHERE f.censored_at_s > 0 OR (x.role = 'hedge' AND f.status = 'ok') "
        f"{'GROUP BY ALL' if by else ''}"
    )
