"""
Join a caller's log with its callee's log of the same calls, and find the races between them.

Two hosts, two clocks. The caller (a harness) starts a call's budget when it sends; the callee
(a tool) when it receives. Both logs are ingested into a throwaway in-memory store, one after
the other (ingest drops a row whose call id is already stored, and the two logs may share call
ids), each side's rows tagged by the ingest that stored them. Everything after that is SQL over
one table of rows with times as epoch seconds.

Pairing is one-to-one and strongest first: by idempotency key (the k-th caller attempt of a key,
by attempt number then send time, with the k-th callee record of that key), then by call id,
then - for what is still unpaired, and reported as such - by time: a caller attempt and a callee
record of the same model are paired when each is the other's nearest, the callee receiving
within ``window_s`` after the caller sent (on the caller's clock, corrected by the skew the id
pairs give). The clock skew is estimated NTP-style (see `ClockSkew`) from the id pairs, or from
the time-window pairs when there are no others; every later comparison across the two logs
moves callee times onto the caller's clock by subtracting it.
"""

from __future__ import annotations

import math
import os

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tailkit.errors import ConfigError, IngestError
from tailkit.formats import ScanOptions
from tailkit.ingest import ingest_paths
from tailkit.races._report import (
    MATCHES,
    ClockSkew,
    Duplicate,
    LateCall,
    RaceReport,
    Replan,
    Spread,
)
from tailkit.store import Store


DEADLINE_GRACE_S = 0.001
"""A record that ends within this many seconds after its deadline still honoured it (rounding)."""

# One row per record of either side; times in epoch seconds on that side's own clock.
_ROWS = """
CREATE TABLE rk_rows AS
SELECT side, row_number() OVER (ORDER BY side, ingest_id, source_row) AS rid,
    call_id, run_id, step, model, status, coalesce(attempt, 0) AS attempt,
    epoch_us(started_at) / 1e6 AS t0,
    epoch_us(started_at) / 1e6 + coalesce(total_s, censored_at_s) AS t1,
    NULLIF(attrs->>'idempotency_key', '') AS ikey,
    epoch_us(TRY_CAST(attrs->>'deadline_at' AS TIMESTAMPTZ)) / 1e6 AS dl,
    TRY_CAST(attrs->>'remaining_s_at_receive' AS DOUBLE) AS remaining_s,
    lower(coalesce(attrs->>'idempotent', '')) = 'false' AS not_idempotent
FROM rk_side JOIN rk_calls USING (ingest_id)
"""

_BY_KEY = """
INSERT INTO rk_pairs
WITH c AS (
    SELECT rid, ikey, row_number() OVER (PARTITION BY ikey ORDER BY attempt, t0, rid) AS k
    FROM rk_rows WHERE side = 'caller' AND ikey IS NOT NULL
), e AS (
    SELECT rid, ikey, row_number() OVER (PARTITION BY ikey ORDER BY attempt, t0, rid) AS k
    FROM rk_rows WHERE side = 'callee' AND ikey IS NOT NULL
)
SELECT c.rid, e.rid, 'idempotency_key' FROM c JOIN e USING (ikey, k)
"""

_FREE = (
    "{a}.rid NOT IN (SELECT c_rid FROM rk_pairs) AND {b}.rid NOT IN (SELECT e_rid FROM rk_pairs)"
)

_BY_CALL_ID = f"""
INSERT INTO rk_pairs
SELECT c.rid, e.rid, 'call_id' FROM rk_rows c JOIN rk_rows e USING (call_id)
WHERE c.side = 'caller' AND e.side = 'callee' AND {_FREE.format(a="c", b="e")}
"""

_BY_WINDOW = f"""
INSERT INTO rk_pairs
WITH cand AS (
    SELECT c.rid AS c_rid, e.rid AS e_rid, (e.t0 - ?) - c.t0 AS gap
    FROM rk_rows c JOIN rk_rows e ON c.model IS NOT DISTINCT FROM e.model
    WHERE c.side = 'caller' AND e.side = 'callee' AND {_FREE.format(a="c", b="e")}
        AND (e.t0 - ?) - c.t0 BETWEEN 0 AND ?
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY c_rid ORDER BY gap, e_rid) AS rc,
        row_number() OVER (PARTITION BY e_rid ORDER BY gap, c_rid) AS re
    FROM cand
)
SELECT c_rid, e_rid, 'time_window' FROM ranked WHERE rc = 1 AND re = 1
"""

_JOINED = """
CREATE VIEW rk_joined AS
SELECT p.how, c.rid AS c_rid, c.call_id AS c_call_id, c.run_id AS c_run_id, c.step AS c_step,
    c.status AS c_status, c.t0 AS c_t0, c.t1 AS c_t1, c.ikey AS c_ikey, c.dl AS c_dl,
    c.not_idempotent AS c_not_idempotent,
    e.call_id AS e_call_id, e.status AS e_status, e.t0 AS e_t0, e.t1 AS e_t1, e.ikey AS e_ikey,
    e.dl AS e_dl, e.remaining_s AS e_remaining_s, e.not_idempotent AS e_not_idempotent
FROM rk_pairs p JOIN rk_rows c ON c.rid = p.c_rid JOIN rk_rows e ON e.rid = p.e_rid
"""

_SKEW = """
SELECT count(*), min(e_t0 - c_t0), min(c_t1 - e_t1) FROM rk_joined
WHERE c_status = 'ok' AND c_t1 IS NOT NULL AND e_t1 IS NOT NULL AND {where}
"""

# A caller that did not get its answer gave up when it stopped waiting, or at its deadline if
# that came first: a cut at the deadline is logged when the caller's loop got to it, which on a
# busy host is later. A callee success is abandoned when it ended after that instant
# (skew-corrected); one that ended before it was an answer in flight that the caller was too
# slow to take, not a late finish. Without the caller's times, a timed-out or cancelled caller
# is taken to have given up first.
_ABANDONED = """
WITH j AS (
    SELECT *, CASE WHEN c_status = 'ok' THEN c_t1 ELSE least(c_t1, c_dl) END AS c_gave_up
    FROM rk_joined
)
SELECT coalesce(e_ikey, c_ikey, e_call_id), c_step, (e_t1 - ?) - c_gave_up, c_status,
    c_not_idempotent OR e_not_idempotent
FROM j
WHERE e_status = 'ok' AND e_t1 IS NOT NULL
    AND CASE WHEN c_gave_up IS NULL THEN c_status IN ('timeout', 'cancelled')
        ELSE e_t1 - ? > c_gave_up END
ORDER BY 3 DESC NULLS LAST, 1
"""

_DUPLICATES = """
WITH steps AS (
    SELECT ikey, min(step) AS step FROM rk_rows WHERE side = 'caller' AND ikey IS NOT NULL
    GROUP BY ikey
)
SELECT e.ikey, count(*) AS n, any_value(steps.step)
FROM rk_rows e LEFT JOIN steps USING (ikey)
WHERE e.side = 'callee' AND e.ikey IS NOT NULL AND e.status <> 'rate_limited'
GROUP BY e.ikey HAVING count(*) > 1 ORDER BY n DESC, e.ikey
"""

_REPLANS = """
WITH ck AS (
    SELECT DISTINCT run_id, step, ikey FROM rk_rows
    WHERE side = 'caller' AND ikey IS NOT NULL AND step IS NOT NULL
), ex AS (
    SELECT DISTINCT ikey FROM rk_rows
    WHERE side = 'callee' AND ikey IS NOT NULL AND status <> 'rate_limited'
)
SELECT ck.run_id, ck.step, count(*) AS keys, count(ex.ikey) AS executed
FROM ck LEFT JOIN ex USING (ikey)
GROUP BY ck.run_id, ck.step HAVING count(*) > 1 ORDER BY keys DESC, ck.run_id, ck.step
"""

_DEADLINE = f"""
SELECT count(*), count(*) FILTER (WHERE t1 <= dl + {DEADLINE_GRACE_S})
FROM rk_rows WHERE side = 'callee' AND dl IS NOT NULL AND t1 IS NOT NULL
"""


def _ingest(store: Store, path: str | os.PathLike[str], options: ScanOptions, side: str) -> None:
    try:
        report = ingest_paths(store, [Path(path)], options=options)
    except IngestError as exc:
        raise _on_side(exc, side) from None
    if report.errors:
        raise _on_side(report.errors[0], side)
    ids = [f.ingest_id for f in report.files if f.ingest_id is not None]
    if not ids:
        msg = f"{side} log {str(path)!r}: nothing was read from it; check the path"
        raise IngestError(msg)
    for ingest_id in ids:
        store.execute("INSERT INTO rk_side VALUES (?, ?)", [ingest_id, side])
    # The rows move out of ``calls`` so that the other log's rows with the same call ids are
    # stored too instead of being dropped as duplicates; the same holds for the file's hash.
    store.execute("INSERT INTO rk_calls SELECT * FROM calls")
    store.execute("DELETE FROM calls")
    store.execute("DELETE FROM ingests")


def _spread(store: Store, expr: str, where: str, params: list[Any]) -> Spread:
    row = store.fetchone(
        f"SELECT count(x), quantile_cont(x, [0.5, 0.9, 0.99]), max(x) FROM "
        f"(SELECT {expr} AS x FROM rk_joined WHERE {where}) WHERE x IS NOT NULL",
        params,
    )
    assert row is not None  # noqa: S101 - an aggregate always returns one row
    n, qs, top = row
    if not n:
        return Spread(0)
    return Spread(int(n), float(qs[0]), float(qs[1]), float(qs[2]), float(top))


def _skew(store: Store, where: str, matched_by: str) -> ClockSkew | None:
    row = store.fetchone(_SKEW.format(where=where))
    assert row is not None  # noqa: S101 - an aggregate always returns one row
    n, gap_in, gap_out = row
    if not n:
        return None
    return ClockSkew(
        skew_s=(gap_in - gap_out) / 2,
        low_s=-gap_out,
        high_s=gap_in,
        pairs=int(n),
        matched_by=matched_by,
    )


def _on_side(error: IngestError, side: str) -> IngestError:
    """
    ``error`` about one of the scan options, as about that option of this side's log.

    Ingest names the option (``unit``); here each log has its own (``caller_options.unit``).
    """
    if error.field is None or type(error).__init__ is not IngestError.__init__:
        return error
    field = f"{side}_options.{error.field}"
    return type(error)(error.template, field=field, value=error.value, fix=error.fix)


def find_races(
    caller_path: str | os.PathLike[str],
    callee_path: str | os.PathLike[str],
    *,
    caller_options: ScanOptions | None = None,
    callee_options: ScanOptions | None = None,
    window_s: float = 1.0,
    side_effecting: Iterable[str] = (),
) -> RaceReport:
    """
    Pair a caller's attempts with its callee's records of the same calls and report the races.

    Args:
        caller_path: The caller's log (e.g. the executor's ledger), any format tailkit reads.
        callee_path: The callee's log (e.g. ``tailkit serve``'s access log).
        caller_options: How to read the caller's log (mapping, sets, unit);
            ``None``: as detected.
        callee_options: The same for the callee's log.
        window_s: Seconds after a caller's send in which a callee receive may be paired with
            it when neither the idempotency key nor the call id pairs them.
        side_effecting: Caller steps whose calls are not idempotent (besides those whose
            records say ``idempotent: false``).

    Returns:
        The counts, skew, t-zero gap, abandoned successes, duplicates, re-plans, deadline
        honouring and effective budgets.

    Raises:
        ConfigError: ``window_s`` is not a positive finite number.
        IngestError: A log cannot be read (missing, unknown format, a bad mapping); an error
            about one of the options has ``field`` ``caller_options.unit`` and the like.
    """
    if not (math.isfinite(window_s) and window_s > 0):
        msg = f"{{field}} must be a positive number of seconds, got {window_s:g}"
        raise ConfigError(msg, field="window_s", value=window_s)
    steps = frozenset(side_effecting)
    with Store.open(":memory:") as store:
        store.execute("CREATE TABLE rk_side (ingest_id BIGINT, side VARCHAR)")
        store.execute("CREATE TABLE rk_calls AS SELECT * FROM calls LIMIT 0")
        _ingest(store, caller_path, caller_options or ScanOptions(), "caller")
        _ingest(store, callee_path, callee_options or ScanOptions(), "callee")
        store.execute(_ROWS)
        store.execute("CREATE TABLE rk_pairs (c_rid BIGINT, e_rid BIGINT, how VARCHAR)")
        store.execute(_JOINED)
        store.execute(_BY_KEY)
        store.execute(_BY_CALL_ID)
        by_id = _skew(store, "how <> 'time_window'", "id")
        first = 0.0 if by_id is None else by_id.skew_s
        store.execute(_BY_WINDOW, [first, first, window_s])
        skew = by_id or _skew(store, "how = 'time_window'", "time_window")
        s = 0.0 if skew is None else skew.skew_s
        return _report(store, skew, s, window_s, steps)


def _report(
    store: Store, skew: ClockSkew | None, s: float, window_s: float, steps: frozenset[str]
) -> RaceReport:
    counts = dict(store.fetchall("SELECT side, count(*) FROM rk_rows GROUP BY side"))
    how = dict(store.fetchall("SELECT how, count(*) FROM rk_pairs GROUP BY how"))
    matched_by = {name: int(how.get(name, 0)) for name in MATCHES}
    paired = sum(matched_by.values())
    abandoned = tuple(
        LateCall(
            key=str(key),
            step=step,
            late_s=late,
            caller_status=str(status),
            side_effecting=bool(flag) or step in steps,
        )
        for key, step, late, status, flag in store.fetchall(_ABANDONED, [s, s])
    )
    carried, honoured = store.fetchone(_DEADLINE) or (0, 0)
    return RaceReport(
        caller_attempts=int(counts.get("caller", 0)),
        callee_records=int(counts.get("callee", 0)),
        matched_by=matched_by,
        unmatched_caller=int(counts.get("caller", 0)) - paired,
        unmatched_callee=int(counts.get("callee", 0)) - paired,
        window_s=window_s,
        skew=skew,
        t_zero_gap=_spread(store, "(e_t0 - ?) - c_t0", "true", [s]),
        budget_share=_spread(store, "((e_t0 - ?) - c_t0) / (c_dl - c_t0)", "c_dl > c_t0", [s]),
        abandoned=abandoned,
        duplicates=tuple(
            Duplicate(key=str(k), executions=int(n), step=step)
            for k, n, step in store.fetchall(_DUPLICATES)
        ),
        replans=tuple(
            Replan(run_id=run, step=str(step), keys=int(k), executed=int(x))
            for run, step, k, x in store.fetchall(_REPLANS)
        ),
        deadline_carried=int(carried),
        deadline_honoured=int(honoured),
        budget_real=_spread(store, "c_dl - (e_t0 - ?)", "true", [s]),
        budget_believed=_spread(store, "coalesce(e_dl - e_t0, e_remaining_s)", "true", []),
    )
