"""
Reloading a plan under load: `Executor.replace_plan`, and a ledger shared by two executors.
"""

from __future__ import annotations

import asyncio
import json

from pathlib import Path
from typing import Any

import pytest

from tailkit.config import Plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import (
    Attempt,
    Executor,
    HedgeBudget,
    JsonlSink,
    Ledger,
    MemorySink,
    StepPolicy,
)
from tests._fakeloop import run


def _plan(model: str, *, budget: float = 0.05, cutoff_s: float = 3.0) -> Plan:
    return parse_plan(f"""\
tailkit_plan: 1
workflow: reload
deadline_s: 60
hedge_budget: {budget}
routes:
  a/{model}: {{provider: a, model: {model}}}
  b/{model}: {{provider: b, model: {model}}}
steps:
  first:
    route: a/{model}
    hedge_route: b/{model}
    signal: total
    cutoff_s: {cutoff_s}
    on_cutoff: hedge
  second: {{route: a/{model}, depends_on: [first]}}
""")


class Calls:
    """An attempt function that counts its attempts; every third primary is slow (hedged)."""

    def __init__(self) -> None:
        self.attempts = 0
        self.models: list[str] = []

    async def __call__(self, a: Attempt) -> str:
        """
        One attempt: 1 s, or 5 s for every third primary.
        """
        self.attempts += 1
        self.models.append(a.model)
        slow = a.role == "primary" and self.attempts % 3 == 0
        await asyncio.sleep(5.0 if slow else 1.0)
        return a.model


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_reload_under_load_loses_no_ledger_line(tmp_path: Path) -> None:
    """200 calls and 40 runs in flight across a reload: one line per attempt, each plan whole."""
    path = tmp_path / "ledger.jsonl"
    calls = Calls()

    async def main() -> tuple[list[Any], list[Any]]:
        executor = Executor(_plan("old"), ledger=Ledger(JsonlSink(path)), seed=0)
        async with executor:
            singles = [asyncio.ensure_future(executor.run_step("first", calls)) for _ in range(100)]
            runs = [asyncio.ensure_future(executor.run(calls)) for _ in range(20)]
            await asyncio.sleep(2.0)  # the runs' first steps done, their second steps running
            executor.replace_plan(_plan("new"))
            singles += [
                asyncio.ensure_future(executor.run_step("first", calls)) for _ in range(100)
            ]
            runs += [asyncio.ensure_future(executor.run(calls)) for _ in range(20)]
            return await asyncio.gather(*singles), await asyncio.gather(*runs)

    singles, runs = run(main())
    lines = _lines(path)

    assert calls.attempts == len(lines) > 280  # hedges included
    assert singles == ["old"] * 100 + ["new"] * 100
    # a run that started under the old plan ran both its steps under it, even the step that
    # started after the reload
    assert [r.results["second"] for r in runs] == ["old"] * 20 + ["new"] * 20
    assert all(r.ok for r in runs)
    by_model = {m: sum(line["model"] == m for line in lines) for m in ("old", "new")}
    assert by_model == {m: calls.models.count(m) for m in ("old", "new")}


def test_closing_an_old_executor_leaves_a_shared_ledger_open(tmp_path: Path) -> None:
    """The reload by hand: a new executor on the same ledger, the old one closed; no line lost."""
    path = tmp_path / "ledger.jsonl"
    calls = Calls()

    async def main() -> None:
        ledger = Ledger(JsonlSink(path))
        old = Executor(_plan("old"), ledger=ledger)
        await old.run_step("first", calls)
        new = Executor(_plan("new"), ledger=ledger)
        await old.aclose()
        for _ in range(7):
            await new.run_step("first", calls)
        await new.aclose()
        await new.aclose()  # closing twice closes once

    run(main())

    models = [line["model"] for line in _lines(path)]
    assert len(models) == calls.attempts > 8  # hedges included
    assert sorted(models) == sorted(calls.models)
    assert models.count("new") == len(models) - 1


def test_the_last_executor_to_close_closes_the_ledger() -> None:
    """A ledger's sinks close when the last executor using it closes, not before."""
    closed: list[str] = []

    class Sink(MemorySink):
        def close(self) -> None:
            closed.append("closed")

    async def main() -> None:
        ledger = Ledger(Sink())
        first, second = Executor(_plan("x"), ledger=ledger), Executor(_plan("y"), ledger=ledger)
        await first.aclose()
        assert closed == []
        await second.aclose()

    run(main())

    assert closed == ["closed"]


def test_replace_plan_keeps_the_budget_count_and_takes_the_new_ratio() -> None:
    """The executor's own budget takes the new hedge_budget, keeps its count; a given one stays."""

    async def main() -> tuple[HedgeBudget, HedgeBudget, HedgeBudget]:
        own = Executor(_plan("old", budget=0.05))
        await own.run_step("first", Calls())
        before = own.shared.budget
        own.replace_plan(_plan("new", budget=0.1))
        given = HedgeBudget(0.02)
        theirs = Executor(_plan("old"), budget=given)
        theirs.replace_plan(_plan("new", budget=0.1))
        return before, own.shared.budget, theirs.shared.budget

    before, after, given = run(main())

    assert before is after
    assert (0.1, 1) == (after.ratio, after.firsts)
    assert 0.02 == given.ratio


def test_replace_plan_refuses_policies_for_missing_steps() -> None:
    """A policy naming a step the new plan lacks: refused, and the old plan stays in force."""
    old = _plan("old")
    executor = Executor(old, policies={"first": StepPolicy(error_retries=0)})
    lone = parse_plan("""\
tailkit_plan: 1
workflow: lone
deadline_s: 10
routes: {a/m: {provider: a, model: m}}
steps: {only: {route: a/m}}
""")

    with pytest.raises(ConfigError, match=r"unknown step\(s\) first; the plan has only"):
        executor.replace_plan(lone)
    assert executor.plan is old
    executor.replace_plan(lone, policies={})
    assert executor.plan is lone


def test_replace_plan_after_close_is_refused() -> None:
    """A closed executor takes no new plan: the error says to make a new one."""
    executor = Executor(_plan("old"))
    run(executor.aclose())

    with pytest.raises(ConfigError, match="the executor is closed"):
        executor.replace_plan(_plan("new"))


def test_losers_of_the_old_plan_are_awaited_at_close(tmp_path: Path) -> None:
    """A loser left to finish under the old plan still lands in the ledger before close ends."""
    path = tmp_path / "ledger.jsonl"

    async def slow_primary(a: Attempt) -> str:
        await asyncio.sleep(10.0 if a.role == "primary" else 1.0)
        return a.role

    async def main() -> str:
        policies = {"first": StepPolicy(losers="finish")}
        async with Executor(_plan("old"), ledger=Ledger(JsonlSink(path)), policies=policies) as ex:
            won = await ex.run_step("first", slow_primary)
            ex.replace_plan(_plan("new"))
            return str(won)

    assert "hedge" == run(main())
    lines = _lines(path)
    assert [(line["role"], line["abandoned"]) for line in lines] == [
        ("hedge", False),
        ("primary", True),
    ]
