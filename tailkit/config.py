"""
The plan file: its schema, and reading, checking and writing it.

One schema serves both directions: the user writes the workflow (routes, steps, deadline, hedge
budget), ``tailkit calibrate`` returns the same document with each step's cutoffs, action and
predictions filled in, and the executor runs it. Reading a plan checks it completely and names
the line, field, value and fix of every problem.

This module imports only the standard library, PyYAML (when a plan is read or written) and
`tailkit.errors`: the executor, which has no other dependencies, imports it.

Example::

    plan = load_plan("plan.yaml")
    for name in plan.order():
        step = plan.steps[name]
        print(name, step.route, step.cutoff_s, step.on_cutoff)
    write_plan(plan, "plan.yaml")  # atomically, keeping the file's mode
    rehearsal = scale_plan(plan, 0.01)  # for a server run with --time-scale 0.01
"""

from __future__ import annotations

from tailkit._config import (
    ACTIONS,
    PLAN_VERSION,
    SIGNALS,
    Basis,
    LiveRouting,
    Plan,
    PlanInterval,
    PlanPrediction,
    Route,
    Shared,
    Step,
    StepInterval,
    StepPrediction,
    Tokens,
    dump_plan,
    load_plan,
    parse_plan,
    safe_load_bounded,
    scale_plan,
    write_plan,
)


__all__ = [
    "ACTIONS",
    "PLAN_VERSION",
    "SIGNALS",
    "Basis",
    "LiveRouting",
    "Plan",
    "PlanInterval",
    "PlanPrediction",
    "Route",
    "Shared",
    "Step",
    "StepInterval",
    "StepPrediction",
    "Tokens",
    "dump_plan",
    "load_plan",
    "parse_plan",
    "safe_load_bounded",
    "scale_plan",
    "write_plan",
]
