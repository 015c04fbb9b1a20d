"""
A tool step (a plain coroutine, no model): no route to invent, its latency read from the ledger.
"""

from __future__ import annotations

import asyncio
import random

from pathlib import Path

import pytest

from tailkit.calibration import calibrate
from tailkit.config import Route, dump_plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import Attempt, Executor, JsonlSink, Ledger
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tests._fakeloop import run


WORKFLOW = """\
tailkit_plan: 1
workflow: w
deadline_s: 20
routes: {a/m: {provider: a, model: m}}
steps:
  ask: {route: a/m}
  lookup: {tool: true, depends_on: [ask]}
"""


def test_a_tool_step_names_no_route_and_writes_none() -> None:
    """`tool: true`: its route is tool/<step>, implied, and the dump writes it back the same."""
    plan = parse_plan(WORKFLOW)
    step = plan.steps["lookup"]
    assert (step.tool, step.route) == (True, "tool/lookup")
    assert plan.routes["tool/lookup"] == Route("tool", "lookup")
    text = dump_plan(plan)
    assert "tool/lookup" not in text
    assert "    tool: true\n" in text
    assert parse_plan(text) == plan


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("  lookup: {tool: true, route: a/m}", "a tool step calls no route: drop route"),
        ("  lookup: {tool: true, hedge_route: a/m}", "a tool step has no other route to go to"),
    ],
)
def test_a_tool_step_with_a_route_is_refused(line: str, message: str) -> None:
    """A route field on a tool step is named with its line and the fix."""
    text = WORKFLOW.replace("  lookup: {tool: true, depends_on: [ask]}", line)
    with pytest.raises(ConfigError, match=message):
        parse_plan(text)


def test_a_route_that_takes_a_tool_steps_name_is_refused() -> None:
    """The routes may not give tool/<step> another provider or model."""
    text = WORKFLOW.replace(
        "routes: {a/m: {provider: a, model: m}}",
        "routes: {a/m: {provider: a, model: m}, tool/lookup: {provider: x, model: y}}",
    )
    with pytest.raises(ConfigError, match="is tool step 'lookup''s route"):
        parse_plan(text)


def test_a_tool_steps_latency_comes_from_the_executors_ledger(tmp_path: Path) -> None:
    """Run the workflow with the executor, ingest its ledger, calibrate: the tool is measured."""
    plan = parse_plan(WORKFLOW)
    rng = random.Random(3)  # noqa: S311 - simulated latency
    ledger_path = tmp_path / "ledger.jsonl"

    async def ask(a: Attempt) -> str:
        await asyncio.sleep(rng.lognormvariate(0.0, 0.3))
        return "question"

    async def lookup(a: Attempt) -> str:  # a plain coroutine: no model, no tokens
        await asyncio.sleep(rng.lognormvariate(1.0, 0.2))  # median 2.7 s
        return "record"

    async def main() -> None:
        async with Executor(plan, ledger=Ledger(JsonlSink(ledger_path)), seed=1) as executor:
            for _ in range(250):
                run_ = await executor.run({"ask": ask, "lookup": lookup})
                assert run_.ok

    run(main())
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [ledger_path]).ok
        tool_calls = store.fetchone(
            "SELECT count(*) FROM calls WHERE provider = 'tool' AND model = 'lookup'"
        )
        found = calibrate(store, plan, runs=4000, check_runs=4000, replicates=0, seed=1)

    assert tool_calls == (250,)
    lookup_step = found.plan.steps["lookup"]
    assert lookup_step.basis is not None
    assert lookup_step.basis.calls == 250
    assert lookup_step.predicted is not None
    assert lookup_step.predicted.p50_s == pytest.approx(2.72, rel=0.1)
    assert "tool/lookup" not in dump_plan(found.plan)  # the written plan invents nothing
