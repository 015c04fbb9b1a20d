"""
Read ledgers into a throwaway store and observe a plan's runs and steps in SQL.

The ledgers are ingested as ``tailkit ingest`` would (any format it reads, mapped through
`ScanOptions`) into an in-memory store. Three tables follow:
``ck_att``, one row per attempt of a step of the plan inside a run; ``ck_calls``, one row per
step call (a run and a step), with its start, its winner's end, the last instant it was seen
and its counts; and a per-run query over those. The intervals are computed in Python from the
few columns that come back (see `tailkit.check._estimate`).
"""

from __future__ import annotations

import os

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from tailkit import text
from tailkit.check._estimate import Durations, observed_quantiles, rate, ratio
from tailkit.check._live import live_notes, observe_live
from tailkit.check._observation import (
    LiveObservation,
    Observation,
    RouteAttempts,
    StepObservation,
)
from tailkit.check._screen import Screened, screen
from tailkit.config import Plan, load_plan
from tailkit.errors import ConfigError, IngestError
from tailkit.estimate import LEVEL
from tailkit.formats import ScanOptions
from tailkit.ingest import ingest_paths
from tailkit.store import Store


Ledgers = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
"""One ledger path, or several (files, folders or glob patterns, as for ``tailkit ingest``)."""

# What the executor writes when it could not start an extra attempt: ``hedge_denied`` for the
# action at a cutoff, ``retry_denied`` / ``upgrade_denied`` for a retry after an error or an
# upgrade after invalid output (newer ledgers), or, before them, the sentence in
# ``action_skipped``.
_DENIED = """lower(coalesce(c.attrs->>'hedge_denied', c.attrs->>'retry_denied',
    c.attrs->>'upgrade_denied', CASE
    WHEN c.attrs->>'action_skipped' = 'hedge budget spent' THEN 'budget'
    WHEN c.attrs->>'action_skipped' LIKE 'provider % throttled' THEN 'throttle' END))"""

# A failed attempt: an error, a timeout the provider gave (a deadline's cut is censored, not
# failed), or a 5xx. A refused one: rate limited (429).
_FAILED = """(c.status = 'error' OR (c.status = 'timeout' AND c.censored_at_s IS NULL)
    OR (coalesce(c.http_status, 0) >= 500 AND c.status <> 'rate_limited'))"""
_REFUSED = "(c.status = 'rate_limited' OR coalesce(c.http_status, 0) = 429)"

_ATTEMPTS = f"""
CREATE TABLE ck_att AS
SELECT c.run_id, c.step, s.required, coalesce(c.attempt, 0) AS attempt, c.role, c.status,
    epoch_us(c.started_at) / 1e6 AS t0, c.total_s, c.censored_at_s,
    coalesce(lower(c.attrs->>'winner') = 'true', false) AS winner,
    c.attrs->>'cutoff' IS NOT NULL AS fired,
    c.attrs->>'started_by' AS started_by,
    c.attrs->>'action_skipped' IS NOT NULL OR c.attrs->>'hedge_denied' IS NOT NULL AS skipped,
    {_DENIED} AS denied,
    c.provider || '/' || c.model AS route, {_FAILED} AS failed, {_REFUSED} AS refused,
    lower(c.provider) AS provider, lower(c.model) AS model, c.source_file, c.source_row,
    c.attrs->>'live' AS live, TRY_CAST(c.attrs->>'live_cutoff_s' AS DOUBLE) AS live_cutoff_s,
    c.attrs->>'rerouted' IS NOT NULL AS rerouted
FROM calls c JOIN ck_steps s ON c.step = s.step
WHERE c.run_id IS NOT NULL AND c.started_at IS NOT NULL
    AND c.run_id NOT IN (SELECT run_id FROM ck_out)
"""

# An extra attempt says what started it (``attrs.started_by``: cutoff, error, invalid) in newer
# ledgers. In older ones, hedges and downgrades start only at cutoffs, and a retry counts as
# started at a cutoff when the first attempt was cut by the executor (its ``cutoff`` fired, or
# it was cancelled and censored) and no action was refused; an error's retry follows a first
# attempt that ended on its own.
_CALLS = """
CREATE TABLE ck_calls AS
SELECT run_id, step, any_value(required) AS required,
    min(t0) AS start_at,
    max(t0 + total_s) FILTER (WHERE winner) AS won_at,
    max(t0 + coalesce(total_s, censored_at_s, 0.0)) AS last_at,
    count(*) FILTER (WHERE attempt = 0) AS firsts,
    count(*) FILTER (WHERE attempt > 0) AS extras,
    count(*) FILTER (WHERE attempt > 0 AND role IN ('hedge', 'downgrade')) AS actions,
    count(*) FILTER (WHERE attempt > 0 AND role = 'retry') AS retries,
    count(*) FILTER (WHERE attempt > 0 AND started_by = 'cutoff') AS by_cutoff,
    count(*) FILTER (WHERE attempt > 0 AND started_by IS NOT NULL) AS labelled,
    coalesce(bool_or(attempt = 0 AND (fired OR (censored_at_s IS NOT NULL
        AND status = 'cancelled'))), false) AS first_cut,
    coalesce(bool_or(attempt = 0 AND skipped), false) AS first_skipped,
    count(*) FILTER (WHERE denied = 'budget') AS denied_budget,
    count(*) FILTER (WHERE denied = 'throttle') AS denied_throttle,
    count(*) FILTER (WHERE refused) AS refused,
    min(total_s) FILTER (WHERE attempt = 0 AND status = 'ok' AND censored_at_s IS NULL)
        AS first_s,
    min(censored_at_s) FILTER (WHERE attempt = 0 AND censored_at_s IS NOT NULL) AS first_cut_s,
    coalesce(bool_or(status = 'timeout' AND censored_at_s IS NOT NULL), false) AS deadline_cut
FROM ck_att GROUP BY run_id, step
"""

_CUTOFF_EXTRAS = (
    "CASE WHEN labelled > 0 THEN by_cutoff WHEN actions > 0 THEN actions "
    "WHEN retries > 0 AND first_cut AND NOT first_skipped THEN 1 ELSE 0 END"
)

_STEP_ROWS = f"""
SELECT step, won_at - start_at, last_at - start_at, firsts, extras, {_CUTOFF_EXTRAS},
    denied_budget, denied_throttle, first_s, first_cut_s, deadline_cut, refused
FROM ck_calls
"""

_ROUTE_ROWS = """
SELECT step, route, count(*), count(*) FILTER (WHERE failed), count(*) FILTER (WHERE refused)
FROM ck_att GROUP BY step, route ORDER BY step, count(*) DESC, route
"""

_RUNS = """
SELECT run_id, min(start_at),
    count(*) FILTER (WHERE required AND won_at IS NOT NULL),
    max(won_at) FILTER (WHERE required OR ?), max(last_at), bool_or(deadline_cut),
    max(coalesce(won_at, last_at)) FILTER (WHERE NOT required)
FROM ck_calls GROUP BY run_id
"""


def _ingest(store: Store, paths: list[str], format: str, options: ScanOptions) -> int:
    report = ingest_paths(store, paths, format=format, options=options)
    if report.errors:
        raise report.errors[0]
    read = [f for f in report.files if not f.skipped]
    if not read:
        msg = (
            f"ledger {', '.join(paths)}: no file with call records there; pass the JSON-lines "
            "ledger the executor wrote (JsonlSink), or a log tailkit ingest reads"
        )
        raise IngestError(msg)
    found = dict(
        store.fetchall(
            "SELECT ingest_id, count(DISTINCT run_id) FROM calls JOIN ck_steps USING (step) "
            "WHERE run_id IS NOT NULL GROUP BY ingest_id"
        )
    )
    for f in read:
        if (f.stored or f.rejected) and not found.get(f.ingest_id):
            said = _no_run(store, str(f.path), f.ingest_id, f.stored, f.rejected)
            raise IngestError(said, field="mapping", value=dict(options.mapping), fix=_MAP_FIX)
    if not found:
        said = _no_run(store, ", ".join(paths), None, 0, 0)
        raise IngestError(said, field="mapping", value=dict(options.mapping), fix=_MAP_FIX)
    return report.totals()["rejected"]


def _no_run(store: Store, name: str, ingest_id: int | None, stored: int, rejected: int) -> str:
    names = [text.printable(s) for (s,) in store.fetchall("SELECT step FROM ck_steps")]
    steps = ", ".join(names[:_NAMED]) + (", …" if len(names) > _NAMED else "")
    seen = [
        text.printable(s)
        for (s,) in store.fetchall(
            "SELECT DISTINCT step FROM calls WHERE ingest_id = ? AND step IS NOT NULL "
            "ORDER BY step LIMIT 6",
            [ingest_id],
        )
    ]
    what = f"its {stored:,} stored lines" if stored else "it"
    if seen:
        what += f" name steps {', '.join(seen[:5])}{', …' if len(seen) > 5 else ''}"
    if rejected:
        what += f" ({rejected:,} lines rejected: see why with tailkit ingest and tailkit rejects)"
    return (
        f"ledger {name!r}: no run of this plan's steps ({steps}): {what}; if its run and "
        "step columns have other names, map them with {field} (run_id=COLUMN, step=COLUMN)."
    )


_MAP_FIX = "Pass the ledger of the executor that ran this plan."
_NAMED = 5  # step names a note or a message shows


def resolve_plan(plan: Plan | str | os.PathLike[str]) -> tuple[Plan, str]:
    """
    The plan (loaded when given as a path) and how to name it in messages.

    Raises:
        ConfigError: The file cannot be read, is not a valid plan, or has no predictions.
    """
    if isinstance(plan, Plan):
        loaded, name = plan, f"plan {plan.workflow!r}"
    else:
        loaded, name = load_plan(plan), str(plan)
    missing = [n for n, s in loaded.steps.items() if s.predicted is None]
    if loaded.predicted is None or missing:
        what = (
            "no predictions"
            if loaded.predicted is None
            else f"no prediction for step(s) {', '.join(missing)}"
        )
        msg = f"{name}: {what}: calibrate it first."
        raise ConfigError(
            msg,
            field="plan",
            value=name,
            fix="Calibrating the workflow writes a plan with predicted and basis.",
        )
    return loaded, name


def _paths(ledgers: Ledgers) -> list[str]:
    if isinstance(ledgers, str | os.PathLike):
        return [os.fspath(ledgers)]
    out = [os.fspath(p) for p in ledgers]
    if not out:
        msg = "no ledger given: pass the JSON-lines ledger(s) the executor wrote for this plan"
        raise IngestError(msg)
    return out


def observe(
    plan: Plan | str | os.PathLike[str],
    ledgers: Ledgers,
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    level: float = LEVEL,
) -> Observation:
    """
    What the ledgers show the plan's workflow did, each figure with its 95 % interval.

    Args:
        plan: A calibrated plan, or the path of its YAML file.
        ledgers: The executor's JSON-lines ledger(s), or any log ``tailkit ingest`` reads
            (files, folders or glob patterns); durations in seconds, ``started_at`` instants.
        format: ``auto`` (detected per file) or a format name, as for ``tailkit ingest``.
        options: How to read the ledgers' columns (`ScanOptions`: ``mapping``, ``sets``,
            ``unit``); ``None``: the columns as they are.
        level: Confidence level of every interval (0.95).

    Returns:
        The runs, misses, latency quantiles and extra attempts of the workflow, and per step
        its latency quantiles, hedge rate, first-attempt median and refused hedges.

    Raises:
        ConfigError: The plan cannot be read or has no predictions ("calibrate it first"), or
            ``level`` is not in (0, 1).
        IngestError: A ledger cannot be read, or holds no run of the plan's steps.
    """
    if not 0.0 < level < 1.0:
        msg = f"{{field}} must be a confidence level in (0, 1), e.g. 0.95, got {level!r}."
        raise ConfigError(
            msg,
            field="level",
            value=level,
            fix="Pass a share, not a percentage (0.95, not 95).",
        )
    loaded, _ = resolve_plan(plan)
    paths = _paths(ledgers)
    with Store.open(":memory:") as store:
        store.execute("CREATE TABLE ck_steps (step VARCHAR, required BOOLEAN)")
        for name, step in loaded.steps.items():
            store.execute("INSERT INTO ck_steps VALUES (?, ?)", [name, step.required])
        options = options or ScanOptions()
        rejected = _ingest(store, paths, format, options)
        screened = screen(
            store,
            loaded,
            run_column=options.mapping.get("run_id", "run_id"),
            ledgers=", ".join(paths),
        )
        row = store.fetchone(
            "SELECT count(*) FROM calls JOIN ck_steps USING (step) "
            "WHERE run_id IS NOT NULL AND started_at IS NULL"
        )
        untimed = int(row[0]) if row else 0
        others = store.fetchall(
            "SELECT step, count(*) FROM calls WHERE run_id IN (SELECT run_id FROM calls "
            "JOIN ck_steps USING (step)) AND step NOT IN (SELECT step FROM ck_steps) "
            "GROUP BY step ORDER BY count(*) DESC, step LIMIT ?",
            [_NAMED + 1],
        )
        row = store.fetchone(
            "SELECT count(DISTINCT run_id), list(DISTINCT step ORDER BY step)[:?] FROM calls "
            "WHERE run_id IS NOT NULL AND run_id NOT IN (SELECT run_id FROM calls JOIN "
            "ck_steps USING (step) WHERE run_id IS NOT NULL)",
            [_NAMED + 1],
        )
        strangers = (int(row[0]), list(row[1] or [])) if row else (0, [])
        store.execute(_ATTEMPTS)
        store.execute(_CALLS)
        step_rows = store.fetchall(_STEP_ROWS)
        route_rows = store.fetchall(_ROUTE_ROWS)
        required = sum(1 for s in loaded.steps.values() if s.required)
        run_rows = store.fetchall(_RUNS, [required == 0])
        live = observe_live(store, loaded, level=level)
    return _observation(
        loaded,
        paths,
        step_rows,
        run_rows,
        route_rows,
        required=required,
        rejected=rejected,
        untimed=untimed,
        others={str(step): int(n) for step, n in others},
        strangers=strangers,
        screened=screened,
        level=level,
        live=live,
    )


def _observation(
    plan: Plan,
    paths: list[str],
    step_rows: Sequence[tuple[Any, ...]],
    run_rows: Sequence[tuple[Any, ...]],
    route_rows: Sequence[tuple[Any, ...]],
    *,
    required: int,
    rejected: int,
    untimed: int,
    others: dict[str, int],
    strangers: tuple[int, list[Any]],
    screened: Screened,
    level: float,
    live: dict[str, LiveObservation],
) -> Observation:
    finished: list[float] = []
    unfinished: list[float] = []
    late = failed = 0
    for _run, start, won, end, last, _cut, optional in run_rows:
        if won < required or end is None:
            failed += 1
            # it never delivered, cut by the deadline or failed: more than it was seen, never
            # a fast run
            unfinished.append(max(float(last) - start, 0.0))
            continue
        span = float(end) - start
        if optional is not None:
            # an optional step ends the run too, as the executor and the simulator count it:
            # when it ended or gave up, or at the deadline that cut it
            span = max(span, min(float(optional) - start, plan.deadline_s))
        finished.append(span)
        late += span > plan.deadline_s
    p50, p99 = observed_quantiles(finished, unfinished, (0.5, 0.99), level=level)
    by_step: dict[str, list[tuple[Any, ...]]] = {name: [] for name in plan.steps}
    for r in step_rows:
        by_step[r[0]].append(r)
    routes: dict[str, list[RouteAttempts]] = {name: [] for name in plan.steps}
    for step, route, attempts, bad, refused in route_rows:
        routes[step].append(RouteAttempts(str(route), int(attempts), int(bad), int(refused)))
    steps = tuple(
        _step(plan, name, by_step[name], tuple(routes[name]), level, live=live.get(name))
        for name in plan.order()
    )
    firsts = sum(s.first_attempts for s in steps)
    notes = []
    if rejected:
        notes.append(
            f"{rejected:,} ledger lines were rejected; see why with tailkit ingest LEDGER "
            "and tailkit rejects"
        )
    if untimed:
        notes.append(f"{untimed:,} lines of plan steps have no started_at and were left out")
    if others:
        names = ", ".join(f"{text.printable(s)} ({n:,})" for s, n in list(others.items())[:_NAMED])
        more = ", …" if len(others) > _NAMED else ""
        notes.append(f"lines of steps the plan does not have were left out: {names}{more}")
    other_runs, other_steps = strangers
    notes.extend(live_notes(live))
    if other_runs:
        names = ", ".join(text.printable(s) for s in other_steps[:_NAMED])
        more = ", …" if len(other_steps) > _NAMED else ""
        notes.append(
            f"{other_runs:,} runs with no step of the plan (another workflow's: steps "
            f"{names}{more}) were left out"
        )
    return Observation(
        workflow=plan.workflow,
        deadline_s=plan.deadline_s,
        ledgers=tuple(paths),
        runs=len(run_rows),
        missed_late=late,
        missed_failed=failed,
        level=level,
        miss_rate=rate(late + failed, len(run_rows), level=level),
        p50_s=p50,
        p99_s=p99,
        extra_attempts=ratio(sum(s.extra_attempts for s in steps), firsts, level=level),
        cutoff_attempts=ratio(sum(s.cutoff_attempts for s in steps), firsts, level=level),
        steps=steps,
        rejected=rejected,
        untimed=untimed,
        notes=tuple(notes),
        left_out_clock=screened.clock,
        left_out_route=screened.route,
        left_out_partial=screened.partial,
        left_out_refused=screened.refused,
        left_out=screened.left_out,
        warnings=screened.warnings,
        durations=Durations(tuple(finished), tuple(unfinished)),
    )


class _Call(NamedTuple):
    """
    One step call as `_STEP_ROWS` returns it (seconds from the call's first start).
    """

    step: str
    won_s: float | None  # the winner's end; None without a winner
    last_s: float  # the last instant any attempt was seen
    firsts: int
    extras: int
    cutoff_extras: int
    denied_budget: int
    denied_throttle: int
    first_s: float | None  # the first attempt's latency, when it finished uncut
    first_cut_s: float | None  # the age it was cut at, when it was cut
    deadline_cut: bool
    refused: int  # attempts a provider refused (429)


def _step(
    plan: Plan,
    name: str,
    rows: list[tuple[Any, ...]],
    routes: tuple[RouteAttempts, ...],
    level: float,
    *,
    live: LiveObservation | None,
) -> StepObservation:
    calls = [_Call(*row) for row in rows]
    finished = [c.won_s for c in calls if c.won_s is not None]
    # no winner (gave up, every attempt failed, cut by the deadline): it never delivered, so
    # its latency is more than it was seen running, never a fast call
    unfinished = [max(c.last_s, 0.0) for c in calls if c.won_s is None]
    p50, p99 = observed_quantiles(finished, unfinished, (0.5, 0.99), level=level)
    first_done = [c.first_s for c in calls if c.first_s is not None]
    first_cut = [c.first_cut_s for c in calls if c.first_s is None and c.first_cut_s is not None]
    (first_p50,) = observed_quantiles(first_done, first_cut, (0.5,), level=level)
    return StepObservation(
        name=name,
        route=plan.steps[name].route,
        calls=len(calls),
        p50_s=p50,
        p99_s=p99,
        hedge_rate=rate(sum(1 for c in calls if c.cutoff_extras), len(calls), level=level),
        first_attempt_p50_s=first_p50,
        first_attempts=sum(c.firsts for c in calls),
        extra_attempts=sum(c.extras for c in calls),
        cutoff_attempts=sum(c.cutoff_extras for c in calls),
        denied_budget=sum(c.denied_budget for c in calls),
        denied_throttle=sum(c.denied_throttle for c in calls),
        failed_calls=len(unfinished),
        rate_limited=sum(c.refused for c in calls),
        routes=routes,
        durations=Durations(tuple(finished), tuple(unfinished)),
        first_durations=Durations(tuple(first_done), tuple(first_cut)),
        live=live,
    )
