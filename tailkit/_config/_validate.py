"""
Check a plan document against the plan schema and build its `Plan`; every problem gets reported.

Each mapping is read by `Fields`: types and ranges first, each bad value once. The rules across
fields (a cutoff below the deadline, an action that needs its route) then look only at fields
that read cleanly, so one typo gives one message, not a cascade.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import fields

from tailkit._config import _fields as conv
from tailkit._config._fields import Fields, Invalid, record
from tailkit._config._model import (
    ACTIONS,
    PLAN_VERSION,
    SIGNALS,
    TOOL_PROVIDER,
    Basis,
    LiveRouting,
    Plan,
    PlanPrediction,
    Route,
    Step,
    StepPrediction,
    Tokens,
    tool_route,
)
from tailkit._config._predicted import read_basis, read_plan_prediction, read_step_prediction
from tailkit._config._report import Report, did_you_mean, format_float


_TOP = ("tailkit_plan", *(f.name for f in fields(Plan)))
_STEP = tuple(f.name for f in fields(Step) if f.name != "name")
_FIRST_FIELDS = "tailkit_plan, workflow, deadline_s, routes and steps"


def build_plan(data: object, report: Report) -> Plan | None:
    """
    Read a plan from the values of a YAML document.

    Args:
        data: The document as read by `tailkit._config._yaml.read`.
        report: Gets every problem found, with its line.

    Returns:
        The plan; ``None`` when the document is too broken to read on (already reported).
    """
    if data is None:
        report.add((), f"the plan is empty: it needs {_FIRST_FIELDS}")
        return None
    if not isinstance(data, dict):
        report.add((), f"a plan is a mapping of {_FIRST_FIELDS}", value=data)
        return None
    if not _version_is_readable(data, report):
        return None
    top = Fields(report, data, (), _TOP, "plan fields")
    workflow = top.need("workflow", conv.text, "", "name the workflow (workflow: my-agent)")
    deadline_s = top.need("deadline_s", conv.seconds, math.inf, "give the run budget in seconds")
    hedge_budget = top.get("hedge_budget", conv.share, 0.05)
    routes = _routes(top)
    steps = _steps(
        top,
        routes if top.ok("routes") and routes else None,
        deadline_s if top.ok("deadline_s") else None,
    )
    predicted = record(top, "predicted", read_plan_prediction, PlanPrediction)
    _add_tool_routes(top, routes, steps)
    return Plan(workflow, deadline_s, routes, steps, hedge_budget=hedge_budget, predicted=predicted)


def _add_tool_routes(top: Fields, routes: dict[str, Route], steps: dict[str, Step]) -> None:
    """
    Each tool step's route, ``tool/<step>``, unless the routes already name it the same way.
    """
    for name, step in steps.items():
        if not step.tool:
            continue
        own = Route(TOOL_PROVIDER, name)
        if routes.setdefault(step.route, own) != own:
            top.report.add(
                ("routes", step.route),
                f"is tool step {name!r}'s route (provider {TOOL_PROVIDER}, model {name}): "
                "rename this route",
            )


def _version_is_readable(data: dict[str, object], report: Report) -> bool:
    if "tailkit_plan" not in data:
        report.add(("tailkit_plan",), f"missing: start the file with tailkit_plan: {PLAN_VERSION}")
        return True
    version = data["tailkit_plan"]
    if type(version) is int and version > PLAN_VERSION:
        fix = f"this tailkit reads plan version {PLAN_VERSION}: upgrade tailkit"
        report.add(("tailkit_plan",), f"the plan is newer than this tailkit ({fix})", value=version)
        return False
    if type(version) is not int or version != PLAN_VERSION:
        report.add(("tailkit_plan",), f"must be {PLAN_VERSION}", value=version)
    return True


def _mapping(what: str) -> Callable[[object], dict[str, object]]:
    def convert(value: object) -> dict[str, object]:
        if not isinstance(value, dict):
            msg = f"must be a mapping of {what}"
            raise Invalid(msg)
        return value

    return convert


def _name_ok(top: Fields, section: str, name: str) -> bool:
    if name.strip():
        return True
    top.report.add((section, name), "a name must not be blank", key=True)
    return False


def _routes(top: Fields) -> dict[str, Route]:
    what = "route name -> {provider: …, model: …}"
    raw: dict[str, object] = top.need("routes", _mapping(what), {}, f"list the routes ({what})")
    if top.ok("routes") and not raw:
        top.problem("routes", "must list at least one route")
    routes = {}
    for name, value in raw.items():
        f = Fields(top.report, value, ("routes", name), ("provider", "model"), "provider, model")
        provider = f.need("provider", conv.text, "", "name the provider, as in the call logs")
        model = f.need("model", conv.text, "", "name the model, as in the call logs")
        if _name_ok(top, "routes", name):
            routes[name] = Route(provider, model)
    return routes


def _steps(
    top: Fields, routes: dict[str, Route] | None, deadline_s: float | None
) -> dict[str, Step]:
    what = "step name -> step fields"
    raw: dict[str, object] = top.need(
        "steps", _mapping(what), {}, f"list the workflow's steps ({what})"
    )
    if top.ok("steps") and not raw:
        top.problem("steps", "must list at least one step")
    route = conv.text if routes is None else conv.one_of(routes, "routes")
    fix = "name the route of the step's first attempt"
    if routes:
        fix += f" (one of the routes: {', '.join(routes)})"
    steps = {}
    for name, value in raw.items():
        f = Fields(top.report, value, ("steps", name), _STEP, "step fields (route, …)")
        step = _step(f, name=name, names=list(raw), route=route, fix=fix, deadline_s=deadline_s)
        if _name_ok(top, "steps", name):
            steps[name] = step
    _report_cycles(top.report, steps)
    return steps


def _step(
    f: Fields,
    *,
    name: str,
    names: list[str],
    route: Callable[[object], str],
    fix: str,
    deadline_s: float | None,
) -> Step:
    tool = f.get("tool", conv.flag, False)
    if tool and "route" in f.raw:
        f.problem(
            "route",
            f"a tool step calls no route: drop route (its ledger lines are {tool_route(name)})",
        )
    candidates = _candidates(f, route)
    if tool and "candidates" in f.raw:
        f.problem("candidates", "a tool step calls no route: drop candidates")
    if tool:
        first = tool_route(name)
    elif candidates and "route" not in f.raw:
        first = candidates[0]  # calibrate chooses among them
    else:
        first = f.need("route", route, "", fix + " (or list candidates)")
    step = Step(
        name,
        first,
        depends_on=_depends_on(f, name, names),
        required=f.get("required", conv.flag, True),
        expected_tokens=record(f, "expected_tokens", _tokens, Tokens) or Tokens(),
        idempotent=f.get("idempotent", conv.flag, True),
        tool=tool,
        signal=f.get("signal", conv.one_of(SIGNALS, "signals"), "total"),
        ttft_cutoff_s=f.get("ttft_cutoff_s", conv.optional(conv.seconds), None),
        stall_cutoff_s=f.get("stall_cutoff_s", conv.optional(conv.seconds), None),
        cutoff_s=f.get("cutoff_s", conv.optional(conv.seconds), None),
        on_cutoff=f.get("on_cutoff", conv.one_of(ACTIONS, "actions"), "wait"),
        hedge_route=f.get("hedge_route", conv.optional(route), None),
        downgrade_route=f.get("downgrade_route", conv.optional(route), None),
        upgrade_route=f.get("upgrade_route", conv.optional(route), None),
        candidates=() if tool else candidates,
        live=record(f, "live", _live, LiveRouting),
        predicted=record(f, "predicted", read_step_prediction, StepPrediction),
        basis=record(f, "basis", read_basis, Basis),
    )
    if f.valid:
        _check_cutoffs(f, step, deadline_s)
        _check_actions(f, step)
        _check_live(f, step, deadline_s)
    return step


def _candidates(f: Fields, route: Callable[[object], str]) -> tuple[str, ...]:
    raw = f.raw.get("candidates", [])
    if raw is None:
        return ()
    if not isinstance(raw, list):
        f.problem("candidates", "must be a list of route names ([] or absent: only route)")
        return ()
    found: list[str] = []
    for i, item in enumerate(raw):
        try:
            name = route(item)
        except Invalid as exc:
            problem = str(exc)
        else:
            if name not in found:
                found.append(name)
                continue
            problem = "listed twice: keep one"
        f.failed.add("candidates")
        f.report.add((*f.path, "candidates", i), problem, value=item)
    return tuple(found)


def _open_share(value: object) -> float:
    number = conv.share(value)
    if not 0 < number < 1:
        msg = "must be a share strictly between 0 and 1, e.g. 0.95"
        raise Invalid(msg)
    return number


def _bounds_s(value: object) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        msg = "must be [low, high] in seconds, e.g. [7.0, 28.0]"
        raise Invalid(msg)
    low, high = (conv.seconds(v) for v in value)
    if low > high:
        msg = f"must be [low, high] with low <= high, got low {format_float(low)}"
        raise Invalid(msg)
    return low, high


def _prior_s(value: object) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        msg = "must map each candidate route to seconds, e.g. {a/m: 13.9, b/m: 14.2}"
        raise Invalid(msg)
    prior: dict[str, float] = {}
    for key, seconds in value.items():
        number = conv.duration(seconds) if isinstance(key, str) else 0.0
        if not isinstance(key, str) or number <= 0:
            msg = f"{key!r}: must map a route name to seconds > 0 (.inf allowed)"
            raise Invalid(msg)
        prior[key] = number
    return prior


def _whole(value: object) -> int:
    number = conv.count(value)
    if number < 1:
        msg = "must be a whole number >= 1"
        raise Invalid(msg)
    return number


def _live(f: Fields) -> LiveRouting:
    quantile = f.need("quantile", _open_share, 0.95, "add quantile (e.g. 0.95)")
    bounds = f.need("cutoff_bounds_s", _bounds_s, (1.0, 1.0), "add cutoff_bounds_s: [low, high]")
    prior: dict[str, float] = f.need(
        "prior_s", _prior_s, {}, "add prior_s: each candidate route -> seconds"
    )
    window = f.get("window", _whole, 200)
    min_calls = f.get("min_calls", _whole, 20)
    if f.ok("window", "min_calls") and min_calls > window:
        f.problem("min_calls", f"must be at most window ({window}): a window never holds more")
    return LiveRouting(
        quantile=quantile,
        cutoff_bounds_s=bounds,
        prior_s=prior,
        window=window,
        min_calls=min_calls,
        explore_every=f.get("explore_every", conv.count, 50),
    )


def _check_live(f: Fields, step: Step, deadline_s: float | None) -> None:
    if f.ok("route", "candidates") and step.candidates and step.route not in step.candidates:
        f.problem(
            "route",
            f"must be one of the step's candidates ({', '.join(step.candidates)}): "
            "add it to candidates, or pick one of them",
        )
    live = step.live
    if live is None or not f.ok("live"):
        return
    if step.tool:
        f.problem("live", "a tool step has no routes to choose: drop live")
        return
    path = (*f.path, "live")
    routes = step.first_routes()
    if f.ok("route", "candidates") and set(live.prior_s) != set(routes):
        missing = [r for r in routes if r not in live.prior_s]
        extra = [r for r in live.prior_s if r not in routes]
        said = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"not a candidate: {', '.join(extra)}" if extra else "",
            )
            if part
        )
        f.failed.add("live")
        f.report.add(
            (*path, "prior_s"),
            f"must give one value per candidate route ({', '.join(routes)}): {said}",
        )
    if deadline_s is not None and live.cutoff_bounds_s[1] >= deadline_s:
        f.failed.add("live")
        f.report.add(
            (*path, "cutoff_bounds_s"),
            f"high must be less than deadline_s ({format_float(deadline_s)}): "
            "a cutoff at or past the deadline never acts",
            value=list(live.cutoff_bounds_s),
        )


def _depends_on(f: Fields, name: str, names: list[str]) -> tuple[str, ...]:
    raw = f.raw.get("depends_on", [])
    if not isinstance(raw, list):
        f.problem("depends_on", "must be a list of step names ([] for none)")
        return ()
    found: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not item:
            problem = "must be a step name"
        elif item == name:
            problem = "a step cannot depend on itself"
        elif item in found:
            problem = "listed twice: keep one"
        elif item not in names:
            others = [n for n in names if n != name]
            problem = f"no such step ({did_you_mean(item, others, label='steps')})"
        else:
            found.append(item)
            continue
        f.failed.add("depends_on")
        f.report.add((*f.path, "depends_on", i), problem, value=item)
    return tuple(found)


def _check_cutoffs(f: Fields, step: Step, deadline_s: float | None) -> None:
    cutoff = step.cutoff_s if f.ok("cutoff_s") else None
    for key, value in (
        ("ttft_cutoff_s", step.ttft_cutoff_s),
        ("stall_cutoff_s", step.stall_cutoff_s),
    ):
        if value is None or not f.ok(key):
            continue
        if cutoff is not None and value >= cutoff:
            f.problem(
                key,
                f"must be less than cutoff_s ({format_float(cutoff)}): "
                "it watches for a stuck attempt before the step's cutoff",
            )
        elif deadline_s is not None and value >= deadline_s:
            f.problem(key, f"must be less than deadline_s ({format_float(deadline_s)})")
    if cutoff is not None and deadline_s is not None and cutoff >= deadline_s:
        f.problem(
            "cutoff_s",
            f"must be less than deadline_s ({format_float(deadline_s)}): "
            "a cutoff at or past the deadline never acts",
        )


def _check_actions(f: Fields, step: Step) -> None:
    if f.ok("signal", "ttft_cutoff_s") and step.signal == "ttft" and step.ttft_cutoff_s is None:
        f.problem("signal", "needs ttft_cutoff_s: set it, or watch signal: total")
    action = step.on_cutoff
    if f.ok("on_cutoff") and action != "wait":
        if f.ok("signal", "cutoff_s") and step.signal == "total" and step.cutoff_s is None:
            f.problem("on_cutoff", f"{action} needs cutoff_s: set it, or use on_cutoff: wait")
        if action == "hedge" and f.ok("hedge_route") and step.hedge_route is None:
            f.problem("on_cutoff", "hedge needs hedge_route: name the route to hedge to")
        if action == "downgrade" and f.ok("downgrade_route") and step.downgrade_route is None:
            f.problem("on_cutoff", "downgrade needs downgrade_route: name the cheaper route")
        if action in {"hedge", "retry"} and f.ok("idempotent") and not step.idempotent:
            f.problem(
                "on_cutoff",
                f"the step is not idempotent: a {action} could repeat its "
                "side effects; use fail or wait (a downgrade re-sends too: the executor runs "
                "it only for a StepPolicy with resend_non_idempotent=True)",
            )
    if step.tool:
        for key in ("hedge_route", "downgrade_route", "upgrade_route"):
            if f.ok(key) and getattr(step, key) is not None:
                f.problem(key, "a tool step has no other route to go to: drop it")
    if f.ok("route", "hedge_route") and step.hedge_route == step.route:
        f.problem("hedge_route", "hedge routes go to an independent provider: pick another route")


def _report_cycles(report: Report, steps: dict[str, Step]) -> None:
    # Peel off every step whose dependencies can all finish; what is left waits on a cycle.
    # From each step left, following its first dependency that is left must reach a cycle.
    left = dict.fromkeys(steps)
    peeled = True
    while peeled:
        peeled = False
        for name in list(left):
            if not any(d in left for d in steps[name].depends_on):
                del left[name]
                peeled = True
    named: set[str] = set()
    for start in left:
        trail = [start]
        while (dep := next(d for d in steps[trail[-1]].depends_on if d in left)) not in trail:
            trail.append(dep)
        cycle = [*trail[trail.index(dep) :], dep]
        if named.isdisjoint(cycle):
            named.update(cycle)
            report.add(
                ("steps", cycle[0], "depends_on"),
                f"cycle {' -> '.join(cycle)}: steps cannot wait on each other; "
                "remove one of these dependencies",
            )


def _tokens(f: Fields) -> Tokens:
    count = conv.optional(conv.count)
    return Tokens(f.get("input", count, None), f.get("output", count, None))
