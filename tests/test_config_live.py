"""
Candidate routes and live routing in the plan file: read, checked, written back, scaled.
"""

from __future__ import annotations

import pytest

from tailkit.config import LiveRouting, dump_plan, parse_plan, scale_plan
from tailkit.errors import ConfigError


PLAN = """\
tailkit_plan: 1
workflow: w
deadline_s: 40
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
steps:
  answer:
    candidates: [a/m, b/m]
    cutoff_s: 14
    on_cutoff: hedge
    hedge_route: b/m
    live: {quantile: 0.95, cutoff_bounds_s: [7, 28], prior_s: {a/m: 13.9, b/m: 14.2},
           window: 100, min_calls: 10, explore_every: 20}
    basis: {calls: 400, bucket: any, quantile: 0.95, censored: 0.0,
            route_choice: "a/m: miss 0.30%; b/m: miss 0.41%"}
"""


def test_a_live_step_reads_with_its_candidates_and_route_defaults_to_the_first() -> None:
    """Without `route`, the first candidate is the route; every live field is read."""
    step = parse_plan(PLAN).steps["answer"]
    assert (step.route, step.candidates, step.first_routes()) == ("a/m", ("a/m", "b/m"),
                                                                  ("a/m", "b/m"))  # fmt: skip
    assert step.live == LiveRouting(
        quantile=0.95, cutoff_bounds_s=(7.0, 28.0), prior_s={"a/m": 13.9, "b/m": 14.2},
        window=100, min_calls=10, explore_every=20,
    )  # fmt: skip
    assert step.basis is not None
    assert step.basis.route_choice == "a/m: miss 0.30%; b/m: miss 0.41%"


def test_a_live_plan_round_trips_byte_for_byte() -> None:
    """Dump then parse gives an equal plan; dumping again gives the same bytes."""
    plan = parse_plan(PLAN)
    text = dump_plan(plan)
    assert "candidates: [a/m, b/m]" in text
    assert parse_plan(text) == plan
    assert dump_plan(parse_plan(text)) == text


def test_live_defaults_and_a_plan_without_them_unchanged() -> None:
    """window/min_calls/explore_every default; a step without candidates has only its route."""
    text = PLAN.replace("\n           window: 100, min_calls: 10, explore_every: 20", "")
    live = parse_plan(text).steps["answer"].live
    assert live is not None
    assert (live.window, live.min_calls, live.explore_every) == (200, 20, 50)
    fixed = parse_plan(PLAN.split("    candidates:", maxsplit=1)[0] + "    route: a/m\n")
    step = fixed.steps["answer"]
    assert (step.candidates, step.live, step.first_routes()) == ((), None, ("a/m",))
    assert "candidates" not in dump_plan(fixed)
    assert "live" not in dump_plan(fixed)


def test_scale_plan_scales_the_priors_and_the_bounds() -> None:
    """A rehearsal at 0.25 sees priors and bounds in its own seconds; the rest stays."""
    live = scale_plan(parse_plan(PLAN), 0.25).steps["answer"].live
    assert live is not None
    assert live.prior_s == {"a/m": 13.9 * 0.25, "b/m": 14.2 * 0.25}
    assert live.cutoff_bounds_s == (7.0 * 0.25, 28.0 * 0.25)
    assert (live.quantile, live.window, live.min_calls) == (0.95, 100, 10)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("prior_s: {a/m: 13.9, b/m: 14.2}", "prior_s: {a/m: 13.9}",
         r"live\.prior_s: must give one value per candidate route \(a/m, b/m\): missing b/m"),
        ("prior_s: {a/m: 13.9, b/m: 14.2}", "prior_s: {a/m: 13.9, b/m: 14.2, c/m: 1}",
         r"not a candidate: c/m"),
        ("prior_s: {a/m: 13.9, b/m: 14.2}", "prior_s: {a/m: 0, b/m: 14.2}",
         r"seconds > 0"),
        ("[7, 28]", "[7, 48]", r"cutoff_bounds_s = \[7\.0, 48\.0\]: high must be less than"),
        ("[7, 28]", "[28, 7]", r"low <= high"),
        ("[7, 28]", "[7]", r"must be \[low, high\]"),
        ("min_calls: 10", "min_calls: 1000", r"min_calls = 1000: must be at most window \(100\)"),
        ("window: 100", "window: 0", r"window = 0: must be a whole number >= 1"),
        ("quantile: 0.95, cutoff", "quantile: 1.0, cutoff", r"strictly between 0 and 1"),
        ("explore_every: 20", "explore_every: -1", r"explore_every = -1"),
        ("candidates: [a/m, b/m]", "candidates: [a/m, b/m, a/m]", r"candidates\[2\].*twice"),
        ("candidates: [a/m, b/m]", "candidates: [a/m, x/m]", r"candidates\[1\] = 'x/m'"),
        ("candidates: [a/m, b/m]", "candidates: a/m", r"must be a list of route names"),
        ("candidates: [a/m, b/m]", "candidates: [a/m, b/m]\n    route: c/m",
         r"route = 'c/m': must be one of the step's candidates \(a/m, b/m\)"),
        ("live: {quantile", "live: {quantil", r"live\.quantil: unknown key"),
    ],
)  # fmt: skip
def test_a_bad_live_field_is_named_with_its_line_and_fix(old: str, new: str, message: str) -> None:
    """Each bad value is reported with its path and what it must be."""
    assert old in PLAN
    with pytest.raises(ConfigError, match=message):
        parse_plan(PLAN.replace(old, new, 1))


def test_a_tool_step_takes_no_candidates_and_no_live() -> None:
    """A tool step calls no route: candidates and live are refused."""
    tool = "  look:\n    tool: true\n    candidates: [a/m]\n"
    text = PLAN.replace("  answer:\n", tool + "  answer:\n")
    with pytest.raises(ConfigError, match=r"steps\.look\.candidates.*a tool step calls no route"):
        parse_plan(text)
