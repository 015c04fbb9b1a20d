"""
The SQL side of the tail table: counts and aggregates per group, sorted times, samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tailkit.errors import ConfigError
from tailkit.record import CALL_COLUMNS, Buckets
from tailkit.store.lowlevel import (
    OK_CALL,
    calls_with_buckets_sql,
    checked_where,
    repeat_attempts_sql,
    sample_hash_sql,
)


QUANTILES = (0.5, 0.9, 0.95, 0.99)
_BUCKETS = {"input": "input_bucket", "output": "output_bucket"}
_GROUPABLE = tuple(c.name for c in CALL_COLUMNS if c.kind in ("text", "int", "bool"))
_FAILED = "('error', 'rate_limited', 'invalid', 'cancelled')"


@dataclass(frozen=True, slots=True)
class TableQuery:
    """
    What to group by and which calls to include.

    Args:
        by: Call-record columns to group by, e.g. ``("provider", "model")``.
        bucket: Token buckets to split groups by: any of ``"input"``, ``"output"``.
        where: An SQL filter on call-record columns, e.g. ``"step = 'extract'"``: column
            references, constants, operators and pure scalar functions only (`checked_where`).
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
    """

    by: tuple[str, ...] = ("provider", "model")
    bucket: tuple[str, ...] = ("input", "output")
    where: str | None = None
    buckets: Buckets | None = None

    def __post_init__(self) -> None:
        if self.where:
            checked_where(self.where)  # before any SQL: a filter may not read files or settings
        for name in self.by:
            if name not in _GROUPABLE:
                fix = f"use {', '.join(_GROUPABLE)}"
                msg = f"{{field}} {name!r} is not a call-record column to group by; {fix}"
                raise ConfigError(
                    msg,
                    field="by",
                    value=name,
                    fix=fix,
                )
        for name in self.bucket:
            if name not in _BUCKETS:
                msg = f"{{field}} {name!r} must be input, output, or none."
                raise ConfigError(
                    msg,
                    field="bucket",
                    value=name,
                    fix="Pass input, output, both, or none.",
                )
        if not self.by and not self.bucket:
            msg = "group by at least one column or bucket ({field} provider,model)."
            raise ConfigError(
                msg,
                field="by",
                value=(),
                fix="Pass a column such as provider.",
            )

    @property
    def keys(self) -> tuple[str, ...]:
        """
        The grouping columns, buckets last.
        """
        return (*self.by, *(_BUCKETS[b] for b in self.bucket))

    def source_sql(self) -> str:
        """
        Calls with their buckets, filtered.
        """
        return f"({calls_with_buckets_sql(self.buckets, where=self.where)}) AS c"


def _keys_sql(keys: Sequence[str]) -> str:
    return ", ".join(f'"{k}"' for k in keys)


ORDER_PREFIX = "_order_"  # columns of `groups_sql` that only sort the groups


def order_columns(query: TableQuery) -> list[str]:
    """
    The columns that sort the groups: the ``by`` columns, then each bucket by its token range.
    """
    # Buckets sort by their smallest token count (labels would sort "2400+" before "256-600").
    return [*query.by, *(f"{ORDER_PREFIX}{b}" for b in query.bucket)]


# Which calls the statistics use, as SQL on one call. Listed: finished (`OK_CALL`) or cut. Of
# those, an event is a finished latency (``total_s`` of an ``ok`` call) and a cut a finite
# cut age: the Kaplan-Meier input. A phase call streamed: 0 <= ttft_s < total_s.
LISTED = f"(({OK_CALL}) OR censored_at_s > 0)"
EVENT = f"({LISTED} AND status = 'ok' AND total_s IS NOT NULL AND NOT isnan(total_s))"
CUT = f"({LISTED} AND isfinite(censored_at_s))"
PHASE = (
    f"({LISTED} AND status = 'ok' AND isfinite(ttft_s) AND isfinite(total_s) "
    "AND ttft_s >= 0 AND ttft_s < total_s)"
)
SPEED = f"({OK_CALL} AND output_tokens >= 2 AND total_s > ttft_s)"
"""A call whose generation speed counts: finished, 2+ output tokens, time after the first."""
_QUANTILES = (
    ", {f}(CASE WHEN _phase THEN ttft_s END, [0.5, 0.99]) AS ttft_q, "
    "{f}(CASE WHEN _phase THEN total_s - ttft_s END, [0.5, 0.99]) AS gen_q, "
    f"{{f}}(CASE WHEN {SPEED} THEN (output_tokens - 1) / (total_s - ttft_s) END, "
    "[0.5, 0.1]) AS speed_q"
)
GROUP_ID = "_gid"  # a 64-bit hash of a group's key, the same in every query of one table
ROUTE_ID = "_rid"  # the same of its route's key (the ``by`` columns)


def group_id_sql(keys: Sequence[str]) -> str:
    """
    SQL for the group id of a call: the hash of its key columns.
    """
    return f"hash({_keys_sql(keys)})"


def groups_sql(query: TableQuery, *, approx: bool = False, phase_columns: str | None = None) -> str:
    """
    One pass over the calls: per group, its counts and the statistics that aggregate.

    A cut call counts in ``n`` and ``n_censored``, a failed one in ``n`` and ``n_failed``;
    ``n_ok`` counts finished calls (`OK_CALL`: ``status = 'ok'`` and ``total_s > 0``).
    ``n_listed`` counts the finished and the cut calls, ``n_events`` and ``n_cuts`` the
    Kaplan-Meier input (`EVENT`, `CUT`). ``log_mean`` and ``log_sd`` are the mean and the
    population sd of log latency (over ``n_log`` calls); ``n_phase`` counts the streamed calls
    (`PHASE`), ``n_speed`` those whose speed counts (`SPEED`); ``ttft_q``, ``gen_q`` and
    ``speed_q`` are their p50 and p99 (speed: p50 and p10), DuckDB's ``quantile_cont``
    (``approx_quantile``, a t-digest, with ``approx``), unless ``phase_columns`` (SQL columns,
    see `_bands.py`) take their place.
    Groups come in no particular order.
    """
    keys = _keys_sql(query.keys)
    quantiles = phase_columns or _QUANTILES.format(
        f="approx_quantile" if approx else "quantile_cont"
    )
    order = ", ".join(f"min({b}_tokens) AS {ORDER_PREFIX}{b}" for b in query.bucket)
    # the ids hash the aggregated keys: as part of the grouping they would slow it down
    route = group_id_sql(query.by) if query.by else "hash(0)"
    ids = f"{group_id_sql(query.keys)} AS {GROUP_ID}, {route} AS {ROUTE_ID}"
    # Each call's flags once (`OK_CALL`: the summary's definition, so that every command
    # counts the same calls), then aggregates that filter on them. DuckDB's quantile_cont
    # holds every value of a group in memory and cannot spill (24 bytes a call for the three
    # here); `times_sql` can sort them out of core instead (`sorted_statistics`'s ``phase``
    # and ``speed``), at about 1.4 times the time of the whole table at 20 M calls.
    columns = ("status", "total_s", "ttft_s", "censored_at_s", "input_tokens", "output_tokens")
    flags = (
        f"SELECT {keys}, {', '.join(c for c in columns if c not in query.keys)}, "
        f"coalesce({OK_CALL}, false) AS _ok, "
        f"coalesce(status IN {_FAILED}, false) AS _failed, coalesce({LISTED}, false) AS _listed, "
        f"coalesce({EVENT}, false) AS _event, coalesce({CUT}, false) AS _cut, "
        f"coalesce({PHASE}, false) AS _phase FROM {query.source_sql()}"
    )
    return (
        f"SELECT *, {ids} FROM (SELECT {keys}, count(*) AS n, "
        f"count(*) FILTER ({OK_CALL}) AS n_ok, count(censored_at_s) AS n_censored, "
        "count(*) FILTER (_failed) AS n_failed, "
        f"{order}{', ' if order else ''}"
        f"count(*) FILTER ({SPEED}) AS n_speed, count(*) FILTER (_phase) AS n_phase, "
        "count(*) FILTER (_listed) AS n_listed, count(*) FILTER (_event) AS n_events, "
        "count(*) FILTER (_cut) AS n_cuts, "
        "min(total_s) FILTER (_event) AS event_min, max(total_s) FILTER (_event) AS event_max, "
        "count(*) FILTER (_event AND total_s > 0) AS n_log, "
        "avg(ln(total_s)) FILTER (_event AND total_s > 0) AS log_mean, "
        "stddev_pop(ln(total_s)) FILTER (_event AND total_s > 0) AS log_sd"
        f"{quantiles} "
        f"FROM ({flags}) GROUP BY ALL)"
    )


SERIES = ("latency", "ttft", "gen", "speed")  # the sorted series of `times_sql`, by number
TIME_SERIES = (
    (0, "total_s", 1, EVENT),
    (0, "censored_at_s", 0, CUT),
    (1, "ttft_s", 1, PHASE),
    (2, "total_s - ttft_s", 1, PHASE),
    (3, "(output_tokens - 1) / (total_s - ttft_s)", 1, SPEED),
)
"""Each series' values: (series, value SQL, 1 for a finished call or 0 for a cut, which calls)."""


def times_sql(
    query: TableQuery, latency: Sequence[int], phase: Sequence[int], speed: Sequence[int]
) -> str:
    """
    Each group's sorted values, distinct, with their counts, to be read in chunks.

    Series 0 holds the finished latencies and cut ages (the order statistics' and the
    Kaplan-Meier curve's input), 1 and 2 the TTFT and generation time of streamed calls
    (`PHASE`), 3 the generation speed (`SPEED`, tokens per second); series 0 for the groups
    ``latency``, 1 and 2 for ``phase``, 3 for ``speed`` (group ids). DuckDB sorts them out
    of core.

    Columns ``_gid``, ``s`` (the series), ``t`` (the value), ``d`` (calls that finished at
    ``t``) and ``c`` (calls cut at ``t``, series 0 only), ordered by ``_gid``, ``s``, ``t``.
    """
    gid, src = group_id_sql(query.keys), query.source_sql()
    parts = list(TIME_SERIES)
    rows = " UNION ALL ".join(
        f"SELECT {gid} AS {GROUP_ID}, {series} AS s, ({value})::DOUBLE AS t, {e} AS e "
        f"FROM {src} WHERE {where}"
        for series, value, e, where in parts
    )
    wanted = (
        " OR ".join(
            f"(s IN {series} AND {GROUP_ID} IN (SELECT unnest({_ubigints(gids)})))"
            for series, gids in (("(0)", latency), ("(1, 2)", phase), ("(3)", speed))
            if gids
        )
        or "FALSE"
    )
    parts = [p for p in parts if (p[0] == 0 and latency) or (p[0] in (1, 2) and phase)
             or (p[0] == 3 and speed)]  # fmt: skip
    if not parts:
        parts = [(0, "total_s", 1, "FALSE")]
    return (
        f"SELECT {GROUP_ID}, s, t, sum(e)::BIGINT AS d, (count(*) - sum(e))::BIGINT AS c "
        f"FROM ({rows}) WHERE {wanted} GROUP BY ALL ORDER BY {GROUP_ID}, s, t"
    )


def _ubigints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]::UBIGINT[]"


_CALL_FIELDS = (
    "CASE WHEN status = 'ok' THEN coalesce(total_s, 'NaN') ELSE 'NaN' END AS total_s, "
    "coalesce(censored_at_s, 'NaN') AS cut_s, "
    "CASE WHEN status = 'ok' THEN coalesce(ttft_s, 'NaN') ELSE 'NaN' END AS ttft_s, "
    "coalesce(epoch(started_at), 'NaN') AS started_s, "
    "coalesce(output_tokens::DOUBLE, 'NaN') AS output_tokens, "
    "coalesce(input_tokens::DOUBLE, 'NaN') AS input_tokens"
)
"""The columns the fits take, NaN where unknown (``total_s`` NaN unless finished)."""


def samples_sql(
    query: TableQuery,
    groups: Mapping[int, float],
    routes: Mapping[int, float],
    *,
    group_size: int,
    route_size: int,
) -> str:
    """
    Both seeded samples in one scan: per table group, and per route (the ``by`` columns).

    A sample holds the ``size`` finished or cut calls with the smallest draws
    (`sample_hash_sql`, seed 0) of its group or route: the rows `group_sample_sql` gives for
    the same keys. The counts are known (`groups_sql`), so the thresholds of the pre-filter
    (`keep_threshold`) come in as ``groups`` and ``routes`` (by group id / route id), and a
    group or route missing there is not sampled. Columns ``_gid``, ``_rid``, ``_h`` (the
    draw), ``in_group``, ``in_route``, then `_CALL_FIELDS`, in no particular order.
    """
    src, gid = query.source_sql(), group_id_sql(query.keys)
    rid = group_id_sql(query.by) if query.by else "hash(0)"
    draw = sample_hash_sql(0)
    raw = "status, total_s, censored_at_s, ttft_s, started_at, output_tokens, input_tokens"
    rows = (
        f"SELECT {gid} AS {GROUP_ID}, {rid} AS {ROUTE_ID}, {draw} AS _h, {raw} "
        f"FROM {src} WHERE {LISTED}"
    )
    g_table = _thresholds(groups, GROUP_ID, "_tg")
    r_table = _thresholds(routes, ROUTE_ID, "_tr")
    kept = (
        f"SELECT s.*, s._h::DOUBLE < g._tg AS _ig, s._h::DOUBLE < r._tr AS _ir "
        f"FROM ({rows}) AS s JOIN ({g_table}) AS g USING ({GROUP_ID}) "
        f"JOIN ({r_table}) AS r USING ({ROUTE_ID}) "
        "WHERE s._h::DOUBLE < g._tg OR s._h::DOUBLE < r._tr"
    )
    ranked = (
        f"SELECT *, _ig AND row_number() OVER (PARTITION BY {GROUP_ID}, _ig ORDER BY _h) "
        f"<= {int(group_size)} AS in_group, "
        f"_ir AND row_number() OVER (PARTITION BY {ROUTE_ID}, _ir ORDER BY _h) "
        f"<= {int(route_size)} AS in_route FROM ({kept})"
    )
    return (
        f"SELECT {GROUP_ID}, {ROUTE_ID}, _h, in_group, in_route, {_CALL_FIELDS} "
        f"FROM ({ranked}) WHERE in_group OR in_route"
    )


def _thresholds(thresholds: Mapping[int, float], name: str, column: str) -> str:
    ids = _ubigints(list(thresholds))
    values = "[" + ", ".join(repr(float(v)) for v in thresholds.values()) + "]::DOUBLE[]"
    return f"SELECT unnest({ids}) AS {name}, unnest({values}) AS {column}"


def calls_sql(query: TableQuery, gid: int) -> str:
    """
    Every finished or cut call of one group (`_CALL_FIELDS`), for a warning that needs them.
    """
    return (
        f"SELECT {_CALL_FIELDS} FROM {query.source_sql()} "
        f"WHERE {LISTED} AND {group_id_sql(query.keys)} = {int(gid)}::UBIGINT"
    )


def hedges_sql(query: TableQuery) -> str:
    """
    Per route (the ``by`` columns): slow calls retried or hedged, and how many escaped.

    See `repeat_attempts_sql`; columns: the ``by`` columns, ``pairs`` and ``escaped``.
    """
    return repeat_attempts_sql(query.source_sql(), query.by)
