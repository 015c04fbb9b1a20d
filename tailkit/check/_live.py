"""
A live plan's decisions: where each live step's first attempts went, and if the plan allowed it.

A step the plan routes live (``Step.live``) sends each first attempt to the candidate whose
recent latency is best, every ``explore_every``-th to another candidate, and sets its cutoff
from the chosen route's recent latency within ``cutoff_bounds_s``. The executor writes each
decision on the first attempt's line (``attrs.live``, ``live_value_s``, ``live_calls``,
``live_cutoff_s``). Read back, they answer two kinds of question:

- **figures**, judged by the rule of every other line (`tailkit.check._rule`): the share of
  decisions that explored, against ``1 / explore_every``, and the share of first attempts per
  route, against a prediction of it where one is given (a simulation's); without one the
  share is shown and can't tell;
- **findings**, which need no statistics: a live cutoff outside ``cutoff_bounds_s``, or a first
  attempt (not moved by a breaker or a provider's rest after a 429) on a route that is not a
  candidate, is an executor that does not follow its plan; one such line drifts.
"""

from __future__ import annotations

import math

from tailkit import text
from tailkit.check._estimate import rate
from tailkit.check._observation import LiveObservation, RouteShare
from tailkit.check._report import Cause, figure_text
from tailkit.check._screen import _plan_routes
from tailkit.config import Plan, Step
from tailkit.store import Store


__all__ = [
    "EXPLORE_SHARE",
    "FINDINGS",
    "LIVE_FIGURES",
    "OFF_BOUNDS",
    "OFF_CANDIDATES",
    "ROUTE_SHARE",
    "expected_explore_share",
    "finding_cause",
    "live_notes",
    "observe_live",
    "share_cause",
]

EXPLORE_SHARE = "explore_share"
"""A live step's line: the share of its decisions that explored, against 1 / explore_every."""
ROUTE_SHARE = "route_share"
"""A live step's line per route: the share of its first attempts that went there."""
OFF_BOUNDS = "off_bounds"
"""A live step's finding: the share of its live cutoffs outside the plan's bounds (0)."""
OFF_CANDIDATES = "off_candidates"
"""A live step's finding: the share of its first attempts on a route not a candidate (0)."""
LIVE_FIGURES: tuple[str, ...] = (EXPLORE_SHARE, ROUTE_SHARE)
"""The live figures judged by the rule of the other lines."""
FINDINGS: tuple[str, ...] = (OFF_BOUNDS, OFF_CANDIDATES)
"""The live findings: any occurrence is an executor that does not follow its plan."""

# a live cutoff is written in plan seconds, divided back from the executor's time scale: a
# clamped cutoff may differ from its bound in the last digits
_REL = 1e-6
_ABS = 1e-9

_FIRSTS = """
SELECT step, provider, model, any_value(route), live IS NOT NULL AS decided,
    coalesce(rerouted, false), count(*), count(*) FILTER (WHERE live = 'explore'),
    count(live_cutoff_s), min(live_cutoff_s), max(live_cutoff_s)
FROM ck_att WHERE attempt = 0 AND step IN (SELECT step FROM ck_live)
GROUP BY ALL ORDER BY step, provider, model
"""

_OFF_BOUNDS = f"""
SELECT a.step, count(*), arg_min(a.source_file, (a.source_file, a.source_row)),
    arg_min(a.source_row, (a.source_file, a.source_row)),
    arg_min(a.live_cutoff_s, (a.source_file, a.source_row))
FROM ck_att a JOIN ck_live l USING (step)
WHERE a.attempt = 0 AND a.live IS NOT NULL AND (
    a.live_cutoff_s < l.low * (1 - {_REL}) - {_ABS}
    OR a.live_cutoff_s > l.high * (1 + {_REL}) + {_ABS})
GROUP BY a.step
"""

_FIRST_LINE = """
SELECT source_file, source_row FROM ck_att
WHERE attempt = 0 AND step = ? AND provider = ? AND model = ? AND NOT coalesce(rerouted, false)
ORDER BY source_file, source_row LIMIT 1
"""


def expected_explore_share(step: Step) -> float:
    """
    The share of a live step's decisions that explore: ``1 / explore_every``, or 0.

    0 when the step never explores (``explore_every: 0``) or has one candidate to choose.
    """
    live = step.live
    if live is None or live.explore_every <= 0 or len(step.first_routes()) < 2:
        return 0.0
    return 1.0 / live.explore_every


def _where(source: object, row: object) -> str:
    return f"{text.printable(source)} line {row}" if row is not None else text.printable(source)


def _key(routes: dict[str, tuple[str, str]], provider: str, model: str) -> str | None:
    """
    The plan's name of the route a line ran on (``None``: not one of the step's routes).

    A provider ingest could not tell (``unknown``) matches on the model, as the screen has it.
    """
    for key, (p, m) in routes.items():
        if m.lower() == model and (p.lower() == provider or provider == "unknown"):
            return key
    return None


def observe_live(store: Store, plan: Plan, *, level: float) -> dict[str, LiveObservation]:
    """
    Each live step's decisions, from the store's table ``ck_att`` (`tailkit.check._observe`).

    Args:
        store: The check's store, with ``ck_att`` (first attempts carry ``live``,
            ``live_cutoff_s``, ``rerouted``, ``provider``, ``model``, ``source_file``,
            ``source_row``).
        plan: The plan checked.
        level: The level of the shares' intervals.

    Returns:
        Per step the plan routes live, what its first attempts show.
    """
    live_steps = {name: step for name, step in plan.steps.items() if step.live is not None}
    if not live_steps:
        return {}
    store.execute("CREATE TABLE ck_live (step VARCHAR, low DOUBLE, high DOUBLE)")
    for name, step in live_steps.items():
        assert step.live is not None  # noqa: S101 - selected above
        low, high = step.live.cutoff_bounds_s
        store.execute("INSERT INTO ck_live VALUES (?, ?, ?)", [name, low, high])
    rows = store.fetchall(_FIRSTS)
    bounds = {str(r[0]): r[1:] for r in store.fetchall(_OFF_BOUNDS)}
    all_routes = _plan_routes(plan)
    out: dict[str, LiveObservation] = {}
    for name, step in live_steps.items():
        routes = all_routes[name]
        firsts = step.first_routes()
        counts: dict[str, int] = dict.fromkeys(firsts, 0)
        decisions = explored = undecided = rerouted = off = cutoffs = 0
        low_s, high_s = math.inf, -math.inf
        first_off: tuple[str, str, str] | None = None
        for _, provider, model, route, decided, moved, n, explores, cut, lo, hi in (
            r for r in rows if r[0] == name
        ):
            key = _key(routes, str(provider), str(model))
            shown = key if key is not None else str(route)
            if decided:
                decisions += n
                explored += explores
                rerouted += n if moved else 0
                counts[shown] = counts.get(shown, 0) + n
                if cut:
                    cutoffs += cut
                    low_s, high_s = min(low_s, float(lo)), max(high_s, float(hi))
            else:
                undecided += n
            if not moved and shown not in firsts:
                off += n
                if first_off is None:
                    first_off = (str(provider), str(model), shown)
        off_line = ""
        if first_off is not None:
            found = store.fetchone(_FIRST_LINE, [name, first_off[0], first_off[1]])
            where = _where(*found) if found else "a line"
            off_line = f"{where}: first attempt on {text.printable(first_off[2])}"
        n_off_bounds, off_bounds_line = 0, ""
        if name in bounds:
            n_bad, source, row, value = bounds[name]
            n_off_bounds = int(n_bad)
            off_bounds_line = (
                f"{_where(source, row)}: live cutoff {figure_text('cutoff_s', float(value))}"
            )
        out[name] = LiveObservation(
            decisions=decisions,
            explored=explored,
            explore_share=rate(explored, decisions, level=level),
            undecided=undecided,
            routes=tuple(
                RouteShare(r, k, rate(k, decisions, level=level), r in firsts)
                for r, k in counts.items()
            ),
            rerouted=rerouted,
            off_candidates=off,
            cutoffs=cutoffs,
            off_bounds=n_off_bounds,
            cutoff_range_s=(low_s, high_s) if cutoffs else (math.nan, math.nan),
            first_off_candidates=off_line,
            first_off_bounds=off_bounds_line,
        )
    return out


def live_notes(live: dict[str, LiveObservation]) -> list[str]:
    """
    Sentences on what the live steps' lines leave out: undecided or rerouted first attempts.
    """
    notes = []
    for name, seen in live.items():
        if seen.undecided and not seen.decisions:
            notes.append(
                f"step {text.printable(name)!r} routes live in the plan, but none of its "
                f"{seen.undecided:,} first attempts carries a live decision (attrs.live): the "
                "executor routed it as fixed; its live lines can't tell"
            )
        elif seen.undecided:
            notes.append(
                f"{seen.undecided:,} first attempts of live step {text.printable(name)!r} "
                "carry no live decision (attrs.live) and are left out of its route shares"
            )
        if seen.rerouted:
            notes.append(
                f"{seen.rerouted:,} first attempts of live step {text.printable(name)!r} were "
                "moved by a breaker or a provider's rest after a 429 (attrs.rerouted): each "
                "counts on the route it ran on"
            )
    return notes


def finding_cause(step: Step, figure: str, live: LiveObservation) -> Cause:
    """
    Why a finding drifted: the executor did not follow the plan, with the first line that shows it.
    """
    assert step.live is not None  # noqa: S101 - a finding is of a live step
    if figure == OFF_BOUNDS:
        low, high = step.live.cutoff_bounds_s
        detail = (
            f"{live.off_bounds:,} of {live.cutoffs:,} live cutoffs outside the plan's "
            f"cutoff_bounds_s [{figure_text('cutoff_s', low)}–{figure_text('cutoff_s', high)}] "
            f"(first: {live.first_off_bounds})"
        )
    else:
        said = ", ".join(text.printable(r) for r in step.first_routes())
        detail = (
            f"{live.off_candidates:,} first attempts on routes that are not candidates "
            f"({said}), not moved by a breaker or a 429 (first: {live.first_off_candidates})"
        )
    return Cause(
        "executor off plan",
        f"{detail}; run the executor with the plan it is checked against (a plan swapped "
        "with replace_plan judges only the runs after the swap), with live routing on",
    )


def share_cause(
    step: Step, figure: str, route: str | None, predicted: float, observed: float, *, up: bool
) -> Cause:
    """
    Why a live figure drifted: the routes' recent latency, or the explore schedule.
    """
    if figure == EXPLORE_SHARE:
        every = step.live.explore_every if step.live is not None else 0
        return Cause(
            "executor off plan",
            f"{text.percent(observed)} of decisions explored, the plan explores one in "
            f"{every:,} ({text.percent(predicted)}); a worker restarted before it made "
            f"{every:,} decisions explores less (each worker counts its own), an executor "
            "with another plan's explore_every more or less",
        )
    kind = "faster route" if up else "slower route"
    return Cause(
        kind,
        f"{text.printable(route)} took {text.percent(observed)} of the first attempts against "
        f"{text.percent(predicted)} predicted: its recent latency at the plan's quantile was "
        f"{'better' if up else 'worse'} than the other candidates' more often than calibrated; "
        "re-calibrate on recent calls",
    )
