"""
Read ledgers into a throwaway store and observe a plan's runs and steps in SQL.

The ledgers are ingested as ``tailkit ingest`` would (any format it reads, ``--map`` /
``--set`` / ``--unit`` through `ScanOptions`) into an in-memory store. Three tables follow:
``ck_att``, one row per attempt of a step of the plan inside a run; ``ck_calls``, one row per
step call (a run and a step), with its start, its winner's end, the last instant it was seen
and its counts; and a per-run query over those. The intervals are computed in Python from the
few columns that come back (see `tailkit.check._estimate`).
"""

from __future__ import annotations

import os

from collections.abc import Iterable, Sequence
from typing import Any

from tailkit.check._estimate import LEVEL, quantiles, rate, ratio
from tailkit.check._observation import Observation, StepObservation
from tailkit.config import Plan, load_plan
from tailkit.errors import ConfigError, IngestError
from tailkit.formats import ScanOptions
from tailkit.ingest import ingest_paths
from tailkit.store import Store


Ledgers = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
"""One ledger path, or several (files, folders or glob patterns, as for ``tailkit ingest``)."""

# What the executor writes when it could not start the step's action: ``hedge_denied`` (newer
# ledgers) or, before it, the sentence in ``action_skipped``.
_DENIED = """lower(coalesce(c.attrs->>'hedge_denied', CASE
    WHEN c.attrs->>'action_skipped' = 'hedge budget spent' THEN 'budget'
    WHEN c.attrs->>'action_skipped' LIKE 'provider % throttled' THEN 'throttle' END))"""

_ATTEMPTS = f"""
CREATE TABLE ck_att AS
SELECT c.run_id, c.step, s.required, coalesce(c.attempt, 0) AS attempt, c.role, c.status,
    epoch_us(c.started_at) / 1e6 AS t0, c.total_s, c.censored_at_s,
    coalesce(lower(c.attrs->>'winner') = 'true', false) AS winner,
    c.attrs->>'cutoff' IS NOT NULL AS fired,
    c.attrs->>'started_by' AS started_by,
    c.attrs->>'action_skipped' IS NOT NULL OR c.attrs->>'hedge_denied' IS NOT NULL AS skipped,
    {_DENIED} AS denied
FROM calls c JOIN ck_steps s ON c.step = s.step
WHERE c.run_id IS NOT NULL AND c.started_at IS NOT NULL
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
    denied_budget, denied_throttle, first_s, first_cut_s, deadline_cut
FROM ck_calls
"""

_RUNS = """
SELECT run_id, min(start_at),
    count(*) FILTER (WHERE required AND won_at IS NOT NULL),
    max(won_at) FILTER (WHERE required OR ?), max(last_at), bool_or(deadline_cut)
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
    steps = [str(s) for (s,) in store.fetchall("SELECT step FROM ck_steps")]
    for f in read:
        if f.stored and not found.get(f.ingest_id):
            msg = (
                f"ledger {str(f.path)!r}: no run of this plan's steps ({', '.join(steps)}) in "
                f"its {f.stored:,} lines; pass the ledger of the executor that ran this plan, "
                "or name the columns with --map run_id=COLUMN --map step=COLUMN"
            )
            raise IngestError(msg)
    if not found:
        msg = (
            f"ledger {', '.join(paths)}: no run of this plan's steps ({', '.join(steps)}); "
            "pass the ledger of the executor that ran this plan"
        )
        raise IngestError(msg)
    return report.totals()["rejected"]


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
        msg = (
            f"{name}: {what}: calibrate it first "
            "(tailkit calibrate WORKFLOW --out PLAN fills in predicted and basis)"
        )
        raise ConfigError(msg)
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
        options: ``--map`` / ``--set`` / ``--unit``; ``None``: the columns as they are.
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
        msg = f"level must be a confidence level in (0, 1), e.g. 0.95, got {level!r}"
        raise ConfigError(msg)
    loaded, _ = resolve_plan(plan)
    paths = _paths(ledgers)
    with Store.open(":memory:") as store:
        store.execute("CREATE TABLE ck_steps (step VARCHAR, required BOOLEAN)")
        for name, step in loaded.steps.items():
            store.execute("INSERT INTO ck_steps VALUES (?, ?)", [name, step.required])
        rejected = _ingest(store, paths, format, options or ScanOptions())
        row = store.fetchone(
            "SELECT count(*) FROM calls JOIN ck_steps USING (step) "
            "WHERE run_id IS NOT NULL AND started_at IS NULL"
        )
        untimed = int(row[0]) if row else 0
        store.execute(_ATTEMPTS)
        store.execute(_CALLS)
        step_rows = store.fetchall(_STEP_ROWS)
        required = sum(1 for s in loaded.steps.values() if s.required)
        run_rows = store.fetchall(_RUNS, [required == 0])
    return _observation(
        loaded,
        paths,
        step_rows,
        run_rows,
        required=required,
        rejected=rejected,
        untimed=untimed,
        level=level,
    )


def _observation(
    plan: Plan,
    paths: list[str],
    step_rows: Sequence[tuple[Any, ...]],
    run_rows: Sequence[tuple[Any, ...]],
    *,
    required: int,
    rejected: int,
    untimed: int,
    level: float,
) -> Observation:
    finished: list[float] = []
    unfinished: list[float] = []
    late = failed = 0
    for _run, start, won, end, last, cut in run_rows:
        if won < required or end is None:
            failed += 1
            # cut at the deadline: still running, so longer; else it gave up then
            (unfinished if cut else finished).append(max(float(last) - start, 0.0))
            continue
        span = float(end) - start
        finished.append(span)
        late += span > plan.deadline_s
    p50, p99 = quantiles(finished, unfinished, (0.5, 0.99), level=level)
    by_step: dict[str, list[tuple[Any, ...]]] = {name: [] for name in plan.steps}
    for r in step_rows:
        by_step[r[0]].append(r)
    steps = tuple(_step(plan, name, by_step[name], level) for name in plan.order())
    firsts = sum(s.first_attempts for s in steps)
    notes = []
    if rejected:
        notes.append(
            f"{rejected:,} ledger lines were rejected; see why with tailkit ingest LEDGER "
            "and tailkit rejects"
        )
    if untimed:
        notes.append(f"{untimed:,} lines of plan steps have no started_at and were left out")
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
    )


def _step(plan: Plan, name: str, rows: list[tuple[Any, ...]], level: float) -> StepObservation:
    finished = [float(r[1]) for r in rows if r[1] is not None]
    finished += [max(float(r[2]), 0.0) for r in rows if r[1] is None and not r[10]]
    unfinished = [max(float(r[2]), 0.0) for r in rows if r[1] is None and r[10]]
    p50, p99 = quantiles(finished, unfinished, (0.5, 0.99), level=level)
    first_done = [float(r[8]) for r in rows if r[8] is not None]
    first_cut = [float(r[9]) for r in rows if r[8] is None and r[9] is not None]
    (first_p50,) = quantiles(first_done, first_cut, (0.5,), level=level)
    cutoff = sum(int(r[5]) for r in rows)
    return StepObservation(
        name=name,
        route=plan.steps[name].route,
        calls=len(rows),
        p50_s=p50,
        p99_s=p99,
        hedge_rate=rate(sum(1 for r in rows if r[5]), len(rows), level=level),
        first_attempt_p50_s=first_p50,
        first_attempts=sum(int(r[3]) for r in rows),
        extra_attempts=sum(int(r[4]) for r in rows),
        cutoff_attempts=cutoff,
        denied_budget=sum(int(r[6]) for r in rows),
        denied_throttle=sum(int(r[7]) for r in rows),
    )
