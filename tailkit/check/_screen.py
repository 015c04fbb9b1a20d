"""
Which runs a plan may be judged on: runs on its routes, timed by clocks that can be true.

A check reads a ledger as the record of the plan's own runs. Two things make that false, and
neither is visible in the figures: the attempts went to routes the plan does not have for their
step (another plan's ledger, a route swapped in code since calibration, two ledgers mixed), or
a clock was wrong (a host's clock off by hours or years, an end before its start). The first
would judge a plan on calls it never predicted; the second turns each bad line into a miss and
a p99 bound of years. So before anything is measured, every run of the plan's steps is screened:

- **routes**: an attempt is the plan's when its provider and model (case aside; a provider the
  ingest could not tell, ``unknown``, matches on the model) are those of one of its step's
  routes: ``route``, its ``candidates`` (where a live step's first attempt may go, and a
  live step's hedge when it would have gone to the first attempt's own route),
  ``hedge_route``, ``downgrade_route`` or ``upgrade_route``. When more than
  `OFF_PLAN_SHARE` of the runs have an attempt elsewhere, the ledger is not this plan's and
  the check refuses it, naming the step, both sets of routes and the fix. Below that, those
  runs are left out and named: a fallback written into the code path is seldom random, so a
  run that went elsewhere is judged on nothing.
- **clocks**: a run is left out, named, and never counted as a miss when a line of it was
  refused for an impossible time (a negative, infinite or week-long duration, a timestamp
  before 1970 or after 2200: ingest's checks), when one of its attempts lasted more than
  `FAR` times the plan's deadline, or its attempts spread over more than that (the executor
  cuts every attempt at the deadline, so neither happens to a run it made), or when the run
  starts more than a year (or `FAR` times the spread of the middle half of the runs) away
  from the ledger's others;
- **refused lines**: a run is left out when ingest refused any other line of it (a value it
  cannot read, a call id another line holds with other values: two ledgers whose ids collide);
- **missing steps**: a run is left out when a required step has no line although every step
  it waits on won in time and every step of the run that started won. The executor starts a
  step as soon as its dependencies finish, so the run is another workflow's that shares step
  names (one ledger for several workflows), or its lines were lost.

A run is left out whole: keeping the rest of it would read it as a run that lost a step. It
is counted by reason and named with the line that shows why; a ledger with every run left
out is refused with the fix of the commonest reason. A clock off by less than `FAR` deadlines
is not told from a late run, and counts as the miss it reads as.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailkit import text
from tailkit.check._observation import CLOCK, PARTIAL, REFUSED, ROUTE, LeftOut, Observation
from tailkit.config import Plan
from tailkit.errors import IngestError
from tailkit.record import CALL_COLUMNS
from tailkit.store import Store


FAR = 10.0
"""An attempt, or a run's spread of attempts, longer than this many deadlines: a wrong clock."""

OFF_PLAN_SHARE = 0.1
"""More runs than this share on routes the plan lacks for their step: not this plan's ledger."""

YEAR_S = 365.0 * 86400.0
"""A run starting more than this (or `FAR` times the middle half's spread) from the others."""

KEPT = 100
"""How many left-out runs an observation keeps by name (all are counted)."""

_SHOWN = 5  # runs a warning names

# Lines ingest refused for a time that cannot be: a bad duration or timestamp, a first token
# after the end, a finished call that took no time.
_TIME_REASONS = " OR ".join(
    [
        *(
            f"starts_with(reason, '{c.name}_')"
            for c in CALL_COLUMNS
            if c.kind in ("duration", "timestamp")
        ),
        "reason IN ('ttft_after_total', 'ok_with_zero_total')",
    ]
)


@dataclass(frozen=True, slots=True)
class Screened:
    """
    What the screen left out: counts by reason, the first `KEPT` runs by name, warnings.
    """

    clock: int = 0
    route: int = 0
    partial: int = 0
    refused: int = 0
    left_out: tuple[LeftOut, ...] = ()
    warnings: tuple[str, ...] = ()


def _span(seconds: float) -> str:
    """
    A long time for people: ``159 years``, ``10 hours``, ``-5.0 s``.
    """
    size = abs(seconds)
    for unit, length in (("years", YEAR_S), ("days", 86400.0), ("hours", 3600.0)):
        if size >= 2 * length:
            return f"{seconds / length:,.0f} {unit}"
    return text.seconds(seconds)


def _where(source: object, row: object) -> str:
    return f"{text.printable(source)} line {row}" if row is not None else text.printable(source)


_LINES = """
CREATE VIEW ck_lines AS
SELECT c.run_id, c.step, lower(c.provider) AS provider, lower(c.model) AS model,
    c.provider || '/' || c.model AS route,
    epoch_us(c.started_at) / 1e6 AS t0, c.total_s, c.censored_at_s, c.ttft_s,
    c.source_file, c.source_row,
    coalesce(lower(c.attrs->>'winner') = 'true', false) AS winner
FROM calls c JOIN ck_steps s ON c.step = s.step
WHERE c.run_id IS NOT NULL AND c.started_at IS NOT NULL
"""

_OFF_PLAN = """
CREATE VIEW ck_off AS
SELECT * FROM ck_lines l WHERE NOT EXISTS (
    SELECT 1 FROM ck_routes r WHERE r.step = l.step AND r.model = l.model
        AND (r.provider = l.provider OR l.provider = 'unknown'))
"""

# Each clock rule yields (run_id, detail, source_file, source_row), the first line it blames. A
# refused line keeps its source row as JSON: the file's own line, or (from a CSV or Parquet
# file) the call record's fields, so its run id is under the mapped column or ``run_id``.
_REJECTED = """
SELECT run_id, detail, source_file, source_row, timed FROM (
    SELECT CASE WHEN json_valid(raw) THEN coalesce(raw::JSON ->> ?, raw::JSON ->> 'run_id') END
        AS run_id, detail, source_file, source_row, ({reasons}) AS timed
    FROM rejects
) WHERE run_id IN (SELECT run_id FROM ck_lines)
ORDER BY source_file, source_row
"""

_LONG = """
SELECT run_id, step, greatest(total_s, censored_at_s, ttft_s) AS took, source_file, source_row
FROM ck_lines WHERE greatest(total_s, censored_at_s, ttft_s) > ?
"""

_SPREAD = """
WITH runs AS (
    SELECT run_id, min(t0) AS first, max(t0 + coalesce(total_s, censored_at_s, 0.0)) AS last,
        median(t0) AS middle
    FROM ck_lines GROUP BY run_id
)
SELECT run_id, step, last - first, t0 - middle, source_file, source_row FROM (
    SELECT r.run_id, l.step, r.first, r.last, l.t0, r.middle, l.source_file, l.source_row,
        row_number() OVER (PARTITION BY r.run_id ORDER BY abs(l.t0 - r.middle) DESC,
            l.source_row) AS k
    FROM runs r JOIN ck_lines l USING (run_id) WHERE r.last - r.first > ?
) WHERE k = 1
"""

_APART = """
WITH runs AS (
    SELECT run_id, min(t0) AS first, arg_min(source_file, t0) AS source_file,
        arg_min(source_row, t0) AS source_row
    FROM ck_lines GROUP BY run_id
),
middle AS (
    SELECT quantile_cont(first, 0.25) AS q1, quantile_cont(first, 0.75) AS q3 FROM runs
)
SELECT r.run_id, r.first - CASE WHEN r.first < m.q1 THEN m.q1 ELSE m.q3 END, r.source_file,
    r.source_row
FROM runs r, middle m
WHERE r.first < m.q1 - greatest(? * (m.q3 - m.q1), ?)
    OR r.first > m.q3 + greatest(? * (m.q3 - m.q1), ?)
"""


def screen(store: Store, plan: Plan, *, run_column: str, ledgers: str) -> Screened:
    """
    Leave out the runs a plan cannot be judged on; refuse a ledger that is not the plan's.

    Reads the store's ``calls`` and ``rejects`` and table ``ck_steps`` (the plan's steps), and
    leaves table ``ck_out`` (``run_id``): the runs to leave out.

    Args:
        store: The throwaway store the ledgers were ingested into.
        plan: The plan being checked.
        run_column: The ledger's column that holds the run id (for refused lines).
        ledgers: The ledgers' names, for messages.

    Returns:
        The runs left out, counted by reason, and the warnings that name them.

    Raises:
        IngestError: More than `OFF_PLAN_SHARE` of the runs have attempts on routes the plan
            does not have for their step, or every run was left out.
    """
    store.execute(_LINES)
    store.execute("CREATE TABLE ck_routes (step VARCHAR, provider VARCHAR, model VARCHAR)")
    for name, routes in _plan_routes(plan).items():
        for provider, model in routes.values():
            store.execute(
                "INSERT INTO ck_routes VALUES (?, lower(?), lower(?))", [name, provider, model]
            )
    store.execute(_OFF_PLAN)
    row = store.fetchone("SELECT count(DISTINCT run_id) FROM ck_lines")
    runs = int(row[0]) if row else 0
    off = _off_plan(store, plan, runs, ledgers)
    refused = _refused(store, run_column)
    found = {
        CLOCK: _clock(store, plan, refused),
        ROUTE: off,
        REFUSED: _lost(refused),
        PARTIAL: _partial(store, plan),
    }
    seen: set[str] = set()
    for reason, runs_out in found.items():  # a run is left out once, for its first reason
        found[reason] = {k: v for k, v in runs_out.items() if k not in seen}
        seen.update(runs_out)
    store.execute(
        "CREATE TABLE ck_out AS SELECT unnest(?::VARCHAR[]) AS run_id",
        [sorted(seen)],
    )
    warnings = [
        f"{len(out):,} of {runs:,} runs left out {_WHY[reason]}: {_named(out.values())}"
        for reason, out in found.items()
        if out
    ]
    if runs and len(seen) == runs:
        msg = (
            f"ledger {text.printable(ledgers)}: every one of its {runs:,} runs of this plan's "
            f"steps was left out: {'; '.join(warnings)}"
        )
        fix = _FIX[max(found, key=lambda reason: len(found[reason]))]
        raise IngestError(msg, fix=fix)
    left = [e for out in found.values() for e in out.values()]
    return Screened(
        len(found[CLOCK]),
        len(found[ROUTE]),
        len(found[PARTIAL]),
        len(found[REFUSED]),
        tuple(left[:KEPT]),
        tuple(warnings),
    )


_WHY = {
    CLOCK: "for times that cannot be true (a wrong clock or a corrupt line), not counted as misses",
    ROUTE: "for attempts on routes the plan does not have for their step",
    REFUSED: "because ingest refused a line of theirs (they would read as runs that lost a "
    "step), not counted as misses",
    PARTIAL: "because a required step has no line although the steps it waits on finished "
    "in time (another workflow's runs that share step names, or lines lost), not counted as "
    "misses",
}


_ROUTE_FIX = (
    "Pass the ledger of the runs this plan made, or calibrate a plan on the routes they used "
    "(routes that differ only in name: rename them with {overrides} provider=… or model=…)."
)
_CLOCK_FIX = (
    "Fix the clocks (or the lines) that wrote the ledger; a duration written in milliseconds "
    "is read as seconds unless {unit} ms says so."
)
_FIX = {
    CLOCK: _CLOCK_FIX,
    ROUTE: _ROUTE_FIX,
    REFUSED: "Read its columns as they are meant ({status_map}, {mapping}, {unit}): see why "
    "each line was refused with tailkit ingest LEDGER and tailkit rejects.",
    PARTIAL: "Pass the ledger of the runs this plan made, with the lines of every step.",
}


def _named(left: Sequence[LeftOut] | Any) -> str:
    entries = list(left)
    shown = "; ".join(f"{text.printable(e.run_id)} ({e.detail})" for e in entries[:_SHOWN])
    return shown + ("; …" if len(entries) > _SHOWN else "")


def _plan_routes(plan: Plan) -> dict[str, dict[str, tuple[str, str]]]:
    """
    Per step, its routes by name: ``route``, its candidates, hedge, downgrade, upgrade route.

    A live step's hedge goes to ``hedge_route``, or, when the first attempt was routed there,
    to ``route`` or another candidate: every one of them is a candidate already.
    """
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for name, step in plan.steps.items():
        routes: dict[str, tuple[str, str]] = {}
        for key in (
            step.route,
            *step.first_routes(),
            step.hedge_route,
            step.downgrade_route,
            step.upgrade_route,
        ):
            if key is not None and key not in routes:
                route = plan.routes.get(key)
                # a plan built by hand may name a route it does not list: its name is its route
                if route is None:
                    provider, _, model = key.partition("/")
                    routes[key] = (provider, model)
                else:
                    routes[key] = (route.provider, route.model)
        out[name] = routes
    return out


def _plan_text(routes: dict[str, tuple[str, str]]) -> str:
    said = [
        text.printable(key if key == f"{p}/{m}" else f"{key} = {p}/{m}")
        for key, (p, m) in routes.items()
    ]
    return ", ".join(said)


def _off_plan(store: Store, plan: Plan, runs: int, ledgers: str) -> dict[str, LeftOut]:
    """
    The runs with an attempt off the plan's routes; refused when more than `OFF_PLAN_SHARE`.
    """
    row = store.fetchone("SELECT count(DISTINCT run_id) FROM ck_off")
    off_runs = int(row[0]) if row else 0
    if not off_runs:
        return {}
    routes = _plan_routes(plan)
    if off_runs > OFF_PLAN_SHARE * runs:
        steps = store.fetchall(
            "SELECT step, count(*) AS n, count(DISTINCT run_id), (SELECT count(*) FROM ck_lines "
            "l WHERE l.step = o.step) FROM ck_off o GROUP BY step ORDER BY n DESC, step"
        )
        step, n, in_runs, attempts = steps[0]
        used = store.fetchall(
            "SELECT route, count(*) AS n FROM ck_off WHERE step = ? GROUP BY route "
            "ORDER BY n DESC, route LIMIT ?",
            [step, _SHOWN + 1],
        )
        went = ", ".join(f"{text.printable(r)} ({k:,})" for r, k in used[:_SHOWN])
        went += ", …" if len(used) > _SHOWN else ""
        also = ""
        if len(steps) > 1:
            names = ", ".join(repr(text.printable(s)) for s, *_ in steps[1:_SHOWN])
            also = f" (and steps {names}{', …' if len(steps) > _SHOWN else ''} on others too)"
        msg = (
            f"ledger {text.printable(ledgers)}: step {text.printable(step)!r} ran on routes "
            f"the plan does not have for it: {n:,} of its {attempts:,} attempts, in "
            f"{in_runs:,} of the {runs:,} runs, went to {went}, and the plan's routes for it "
            f"are {_plan_text(routes[step])}{also}. These are not the runs this plan made."
        )
        raise IngestError(msg, fix=_ROUTE_FIX)
    first = store.fetchall(
        "SELECT run_id, step, route, source_file, source_row FROM ("
        "SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY source_file, source_row) "
        "AS k FROM ck_off) WHERE k = 1 ORDER BY source_file, source_row"
    )
    return {
        str(run): LeftOut(
            str(run),
            ROUTE,
            f"{_where(source, line)}: step {text.printable(step)} on {text.printable(route)}, "
            f"not {_plan_text(routes[step])}",
        )
        for run, step, route, source, line in first
    }


def _refused(store: Store, run_column: str) -> list[tuple[Any, ...]]:
    """
    The lines ingest refused, of runs of the plan's steps: run, detail, file, row, timed.
    """
    return store.fetchall(_REJECTED.format(reasons=_TIME_REASONS), [run_column])


def _lost(refused: list[tuple[Any, ...]]) -> dict[str, LeftOut]:
    """
    The runs a line of which ingest refused for anything but its time, by their first such line.
    """
    found: dict[str, LeftOut] = {}
    for run, why, source, line, timed in refused:
        if not timed:
            detail = f"{_where(source, line)}: {text.printable(why)}"
            found.setdefault(str(run), LeftOut(str(run), REFUSED, detail))
    return found


def _clock(store: Store, plan: Plan, refused: list[tuple[Any, ...]]) -> dict[str, LeftOut]:
    """
    The runs whose times cannot be true, each with the first line that shows it.
    """
    found: dict[str, LeftOut] = {}

    def add(run: object, detail: str) -> None:
        found.setdefault(str(run), LeftOut(str(run), CLOCK, detail))

    for run, detail, source, line, timed in refused:
        if timed:
            add(run, f"{_where(source, line)}: {text.printable(detail)}")
    far_s = FAR * plan.deadline_s
    if math.isfinite(far_s):
        limit = f"the deadline is {text.seconds(plan.deadline_s)}"
        for run, step, took, source, line in store.fetchall(
            _LONG + " ORDER BY source_file, source_row", [far_s]
        ):
            add(
                run,
                f"{_where(source, line)}: step {text.printable(step)} lasted "
                f"{_span(float(took))} ({limit})",
            )
        for run, step, _spread, off, source, line in store.fetchall(
            _SPREAD + " ORDER BY source_file, source_row", [far_s]
        ):
            side = "after" if off >= 0 else "before"
            add(
                run,
                f"{_where(source, line)}: step {text.printable(step)} starts "
                f"{_span(abs(off))} {side} the run's other attempts ({limit})",
            )
    for run, off, source, line in store.fetchall(
        _APART + " ORDER BY source_file, source_row", [FAR, YEAR_S, FAR, YEAR_S]
    ):
        side = "after" if off >= 0 else "before"
        add(
            run,
            f"{_where(source, line)}: the run starts {_span(abs(off))} {side} the "
            "ledger's other runs",
        )
    return found


_PARTIAL = """
WITH per AS (
    SELECT l.run_id, l.step, any_value(s.required) AS required, bool_or(l.winner) AS won,
        max(l.t0 + l.total_s) FILTER (WHERE l.winner) AS won_at, min(l.t0) AS first
    FROM ck_lines l JOIN ck_steps s USING (step) GROUP BY l.run_id, l.step
)
SELECT run_id, min(first) AS start, list(step ORDER BY step), list(won_at ORDER BY step),
    min(source_file), min(source_row)
FROM per JOIN (
    SELECT run_id, min(source_file) AS source_file, min(source_row) AS source_row
    FROM ck_lines GROUP BY run_id
) USING (run_id)
GROUP BY run_id
HAVING bool_and(won) AND count(*) FILTER (WHERE required) < ?
ORDER BY min(source_file), min(source_row)
"""


def _partial(store: Store, plan: Plan) -> dict[str, LeftOut]:
    """
    The runs without a line of a required step although the steps it waits on won in time.

    Every step of such a run that started won, and the executor starts a step as soon as its
    dependencies finish: the run is another workflow's (one that shares step names) or its
    lines were lost. Read as this plan's, it would be a miss.
    """
    required = [name for name, step in plan.steps.items() if step.required]
    found: dict[str, LeftOut] = {}
    for run, start, steps, ends, source, line in store.fetchall(_PARTIAL, [len(required)]):
        done = {step: end - start for step, end in zip(steps, ends, strict=True)}
        missing = [
            name
            for name in required
            if name not in done
            and all(d in done and done[d] <= plan.deadline_s for d in plan.steps[name].depends_on)
        ]
        if missing:
            found[str(run)] = LeftOut(
                str(run),
                PARTIAL,
                f"{_where(source, line)}: no line of required step "
                f"{text.printable(missing[0])}; its steps {', '.join(map(text.printable, done))} "
                "all won",
            )
    return found


def not_of(plan: Plan, observation: Observation) -> str | None:
    """
    Why ``observation`` is not of ``plan``'s runs (other steps, other routes), or ``None``.

    `observe` leaves out the runs off the plan's routes; an observation made for another plan
    (`check_observation` takes any) may still hold them.
    """
    names = [s.name for s in observation.steps]
    if sorted(names) != sorted(plan.steps):
        said = ", ".join(text.printable(n) for n in names[:_SHOWN])
        mine = ", ".join(text.printable(n) for n in list(plan.steps)[:_SHOWN])
        return f"the observation is of steps {said}, the plan's are {mine}"
    routes = _plan_routes(plan)
    for s in observation.steps:
        # A route reads "provider/model", and either may hold a "/" of its own: compare whole
        # strings, never split one.
        ours = {f"{p}/{m}".lower() for p, m in routes[s.name].values()}
        unknown = {f"unknown/{m}".lower() for _, m in routes[s.name].values()}
        for r in s.routes:
            if r.route.lower() not in ours and r.route.lower() not in unknown:
                return (
                    f"step {text.printable(s.name)!r} of the observation has {r.attempts:,} "
                    f"attempts on {text.printable(r.route)}, which the plan does not have for "
                    f"it (its routes: {_plan_text(routes[s.name])})"
                )
    return None
