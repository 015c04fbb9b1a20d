"""
Write a plan as commented YAML, byte for byte the same for the same plan.

The layout is written line by line rather than by ``yaml.dump`` so that it keeps the comments and
the documented order of fields. Scalars are spelled so that PyYAML reads back exactly the value
written: floats by ``repr``, strings plain only when they cannot be read as anything else.
"""

from __future__ import annotations

import functools
import re

from typing import TYPE_CHECKING

from tailkit._config._model import (
    PLAN_VERSION,
    Basis,
    LiveRouting,
    Plan,
    Route,
    Shared,
    Step,
    StepPrediction,
    Tokens,
)
from tailkit._config._report import format_float
from tailkit._config._yaml import EXPONENT_FLOAT


if TYPE_CHECKING:
    from tailkit._config._model import Bounds, PlanPrediction, StepInterval


HEADER = "# tailkit plan — written by tailkit; fields: docs/plan.md"

# Plain strings are kept to names made of these characters (route names, models, buckets without
# spaces); anything else is double-quoted, with YAML's own escapes.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")
_NOTE_COLUMN = 32
# A YAML implicit key may be at most 1024 characters; longer names use the explicit `? key` form.
_LONGEST_KEY = 1000

# Notes for the fields of the first step only: they explain the file, once.
_STEP_NOTES = {
    "required": "false: the run may succeed without it",
    "expected_tokens": "picks the bucket",
    "idempotent": "false: never hedge or retry blindly",
    "signal": "total | ttft: which clock the cutoff watches",
    "ttft_cutoff_s": "no first token by then: stuck",
    "stall_cutoff_s": "no chunk for this long mid-stream",
    "cutoff_s": "total age at which the step acts",
    "on_cutoff": "hedge | retry | downgrade | fail | wait",
    "downgrade_route": "streaming but projected to overrun",
    "upgrade_route": "output failed validation",
    "candidates": "routes the first attempt may go to",
    "live": "first route and cutoff follow recent latency",
}


def dump_plan(plan: Plan) -> str:
    """
    Write a plan as YAML, in the plan file's layout, with every field present.

    Args:
        plan: A valid plan (``parse_plan`` reads the text back to an equal plan).

    Returns:
        The text, ending in a newline; the same plan always gives the same bytes.
    """
    lines = [
        HEADER,
        f"tailkit_plan: {PLAN_VERSION}",
        f"workflow: {_scalar(plan.workflow)}",
        _noted(f"deadline_s: {_scalar(plan.deadline_s)}", "end-to-end budget the caller gives us"),
        _noted(
            f"hedge_budget: {_scalar(plan.hedge_budget)}",
            "extra attempts / first attempts, all steps together",
        ),
        _noted(
            "routes:" + ("" if plan.routes else " {}"),
            "route name -> where its latency sample comes from",
        ),
    ]
    implied = {step.route for step in plan.steps.values() if step.tool}
    for name, route in plan.routes.items():
        if name not in implied:  # a tool step's own route is implied by ``tool: true``
            lines += _entry(2, name, _route(route))
    lines.append("steps:" + ("" if plan.steps else " {}"))
    for i, (name, step) in enumerate(plan.steps.items()):
        lines += _entry(2, name, None)
        lines += _step(step, notes=_STEP_NOTES if i == 0 else {})
    lines += _plan_prediction(plan.predicted)
    return "\n".join(lines) + "\n"


def _step(step: Step, *, notes: dict[str, str]) -> list[str]:
    fields: list[tuple[str, str]] = [
        ("depends_on", "[" + ", ".join(_scalar(d) for d in step.depends_on) + "]"),
        ("required", _scalar(step.required)),
        ("tool", _scalar(True)) if step.tool else ("route", _scalar(step.route)),
        *(
            [("candidates", "[" + ", ".join(_scalar(r) for r in step.candidates) + "]")]
            if step.candidates
            else []
        ),
        ("expected_tokens", _tokens(step.expected_tokens)),
        ("idempotent", _scalar(step.idempotent)),
        ("", "# --- filled in by calibrate ---"),
        ("signal", _scalar(step.signal)),
        ("ttft_cutoff_s", _scalar(step.ttft_cutoff_s)),
        ("stall_cutoff_s", _scalar(step.stall_cutoff_s)),
        ("cutoff_s", _scalar(step.cutoff_s)),
        ("on_cutoff", _scalar(step.on_cutoff)),
        ("hedge_route", _scalar(step.hedge_route)),
        ("downgrade_route", _scalar(step.downgrade_route)),
        ("upgrade_route", _scalar(step.upgrade_route)),
        *([("live", _live(step.live))] if step.live is not None else []),
        ("predicted", _step_prediction(step.predicted)),
        ("basis", _basis(step.basis)),
    ]
    return [
        f"    {value}" if not key else _noted(f"    {key}:{_space(value)}", notes.get(key))
        for key, value in fields
    ]


def _space(value: str) -> str:
    # A value that starts on the next line (a block mapping) follows its key directly.
    return value if value.startswith("\n") else f" {value}"


def _route(route: Route) -> str:
    return _flow(provider=_scalar(route.provider), model=_scalar(route.model))


def _tokens(tokens: Tokens) -> str:
    return _flow(input=_scalar(tokens.input), output=_scalar(tokens.output))


def _step_prediction(p: StepPrediction | None) -> str:
    # One flow line; with intervals, a block of the values and the intervals on one line.
    if p is None:
        return "null"
    values = {"p50_s": _scalar(p.p50_s), "p99_s": _scalar(p.p99_s),
              "hedge_rate": _scalar(p.hedge_rate)}  # fmt: skip
    if p.interval is None:
        return _flow(**values)
    block = [f"      {key}: {value}" for key, value in values.items()]
    block.append(f"      interval: {_step_interval(p.interval)}")
    return "\n" + "\n".join(block)


def _step_interval(i: StepInterval) -> str:
    return _flow(
        level=_scalar(i.level),
        p50_s=_bounds(i.p50_s),
        p99_s=_bounds(i.p99_s),
        hedge_rate=_bounds(i.hedge_rate),
    )


def _bounds(bounds: Bounds) -> str:
    return f"[{_scalar(bounds[0])}, {_scalar(bounds[1])}]"


def _basis(b: Basis | None) -> str:
    if b is None:
        return "null"
    return _flow(
        calls=_scalar(b.calls),
        bucket=_scalar(b.bucket),
        quantile=_scalar(b.quantile),
        censored=_scalar(b.censored),
        **({} if b.shared is None else {"shared": _shared(b.shared)}),
        **({} if b.route_choice is None else {"route_choice": _scalar(b.route_choice)}),
    )


def _live(live: LiveRouting) -> str:
    prior = {_scalar(route): _scalar(seconds) for route, seconds in live.prior_s.items()}
    return _flow(
        quantile=_scalar(live.quantile),
        cutoff_bounds_s=_bounds(live.cutoff_bounds_s),
        prior_s="{" + ", ".join(f"{key}: {value}" for key, value in prior.items()) + "}",
        window=_scalar(live.window),
        min_calls=_scalar(live.min_calls),
        explore_every=_scalar(live.explore_every),
    )


def _shared(s: Shared) -> str:
    return _flow(
        other_provider=_scalar(s.other_provider),
        same_provider=_scalar(s.same_provider),
        source=_scalar(s.source),
        evidence=_scalar(s.evidence),
        **({"pairs": _scalar(s.pairs)} if s.pairs else {}),
    )


def _plan_prediction(p: PlanPrediction | None) -> list[str]:
    # One flow line; with intervals, a block mapping: one line per value, one per interval.
    if p is None:
        return ["predicted: null"]
    values = {
        "p50_s": _scalar(p.p50_s),
        "p99_s": _scalar(p.p99_s),
        "miss_rate": _scalar(p.miss_rate),
        "extra_attempts": _scalar(p.extra_attempts),
    }
    if p.interval is None:
        return [f"predicted: {_flow(**values)}"]
    i = p.interval
    bounds = {"p50_s": i.p50_s, "p99_s": i.p99_s, "miss_rate": i.miss_rate,
              "extra_attempts": i.extra_attempts}  # fmt: skip
    return [
        "predicted:",
        *(f"  {key}: {value}" for key, value in values.items()),
        _noted("  interval:", "[low, high]: measured sample and simulation noise"),
        f"    level: {_scalar(i.level)}",
        *(f"    {key}: {_bounds(value)}" for key, value in bounds.items()),
    ]


def _flow(**values: str) -> str:
    return "{" + ", ".join(f"{key}: {value}" for key, value in values.items()) + "}"


def _noted(line: str, note: str | None) -> str:
    if not note:
        return line
    return f"{line.ljust(_NOTE_COLUMN - 2)}  # {note}"


def _entry(indent: int, key: str, value: str | None) -> list[str]:
    # `value` None: a block mapping follows on the next lines.
    pad, text = " " * indent, _scalar(key)
    tail = "" if value is None else f" {value}"
    if len(text) <= _LONGEST_KEY:
        return [f"{pad}{text}:{tail}"]
    return [f"{pad}? {text}", f"{pad}:{tail}"]


def _scalar(value: str | float | bool | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    return _string(value)


@functools.lru_cache(maxsize=1024)
def _string(value: str) -> str:
    import yaml

    # Plain only when YAML reads it back as this string: not `null`, `yes`, `1_000`, `1e3`, ….
    if (
        _PLAIN.fullmatch(value)
        and not EXPONENT_FLOAT.fullmatch(value)
        and yaml.safe_load(value) == value
    ):
        return value
    quoted = yaml.safe_dump(value, default_style='"', allow_unicode=True, width=1 << 30)
    return quoted.removesuffix("\n")
