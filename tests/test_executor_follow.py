"""
Following a plan file: `follow_plan` swaps in a rewritten plan and keeps the old on a bad one.
"""

from __future__ import annotations

import asyncio
import logging
import os

from pathlib import Path
from typing import Any

import pytest

import tailkit.executor._follow as follow_module

from tailkit.config import load_plan
from tailkit.errors import ConfigError
from tailkit.executor import Executor, PlanFollower, StepPolicy, follow_plan
from tests._fakeloop import run


def _text(cutoff_s: float = 3.0, *, workflow: str = "follow") -> str:
    return f"""\
tailkit_plan: 1
workflow: {workflow}
deadline_s: 60
hedge_budget: 0.05
routes:
  a/m: {{provider: a, model: m}}
  b/m: {{provider: b, model: m}}
steps:
  s:
    route: a/m
    hedge_route: b/m
    signal: total
    cutoff_s: {cutoff_s}
    on_cutoff: hedge
"""


class PlanFile:
    """A plan file rewritten as the recalibration does: a temporary file, then a rename."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = 0

    def write(self, text: str) -> None:
        """Replace the file; each version gets its own modification time."""
        self.version += 1
        temp = self.path.with_name(self.path.name + ".tmp")
        temp.write_text(text, encoding="utf-8")
        ns = 1_700_000_000_000_000_000 + self.version * 1_000_000_000
        os.utime(temp, ns=(ns, ns))
        os.replace(temp, self.path)


@pytest.fixture
def plan_file(tmp_path: Path) -> PlanFile:
    """plan.yaml in a temporary folder, holding the plan with a 3 s cutoff."""
    file = PlanFile(tmp_path / "plan.yaml")
    file.write(_text(3.0))
    return file


def _executor(path: Path) -> Executor:
    return Executor(load_plan(path), policies={"s": StepPolicy(retry_jitter_s=0.0)})


def _errors() -> tuple[list[ConfigError], Any]:
    seen: list[ConfigError] = []
    return seen, seen.append


def test_a_rewritten_plan_is_swapped_in_with_the_policies_kept(plan_file: PlanFile) -> None:
    """The file changes: the new plan runs, the executor's policies stay."""
    executor = _executor(plan_file.path)
    follower = follow_plan(executor, plan_file.path)
    assert follower.reload_if_changed() is False  # the file holds the running plan
    plan_file.write(_text(5.0))
    assert follower.reload_if_changed() is True
    assert executor.profile_plan.steps["s"].cutoff_s == 5.0
    assert executor.shared.policies == {"s": StepPolicy(retry_jitter_s=0.0)}
    assert (follower.reloads, follower.last_error) == (1, None)


def test_an_unchanged_file_is_not_read_again(
    plan_file: PlanFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polls of an unchanged file are one stat each: no read, no reload."""
    reads: list[Path] = []

    def counting(path: Path) -> Any:
        reads.append(path)
        return load_plan(path)

    monkeypatch.setattr(follow_module, "load_plan", counting)
    executor = _executor(plan_file.path)
    follower = follow_plan(executor, plan_file.path)
    plan = executor.profile_plan
    assert [follower.reload_if_changed() for _ in range(5)] == [False] * 5
    assert len(reads) == 1
    assert executor.profile_plan is plan


def test_a_bad_file_is_reported_once_and_the_running_plan_stays(plan_file: PlanFile) -> None:
    """A plan that does not load: one report naming the file and the problem; then the fix."""
    executor = _executor(plan_file.path)
    seen, on_error = _errors()
    follower = follow_plan(executor, plan_file.path, on_error=on_error)
    plan = executor.profile_plan
    plan_file.write(_text(-2.0))
    assert follower.reload_if_changed() is False
    assert follower.reload_if_changed() is False
    assert executor.profile_plan is plan
    assert len(seen) == 1
    message = str(seen[0])
    assert message.startswith(f"not reloaded, the running plan stays: {plan_file.path}:")
    assert "steps.s.cutoff_s = -2.0" in message
    assert follower.last_error is seen[0]
    plan_file.write(_text(4.0))
    assert follower.reload_if_changed() is True
    assert executor.profile_plan.steps["s"].cutoff_s == 4.0
    assert follower.last_error is None


def test_a_bad_file_goes_to_the_log_by_default(
    plan_file: PlanFile, caplog: pytest.LogCaptureFixture
) -> None:
    """Without on_error, the problem is a warning on the tailkit.executor logger."""
    follower = follow_plan(_executor(plan_file.path), plan_file.path)
    plan_file.path.write_text("tailkit_plan: 1\nworkflow: [", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="tailkit.executor"):
        assert follower.reload_if_changed() is False
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert str(plan_file.path) in record.getMessage()
    assert "not reloaded, the running plan stays" in record.getMessage()


def test_another_workflows_plan_is_refused(plan_file: PlanFile) -> None:
    """A valid plan of another workflow: refused, named, the running plan kept."""
    executor = _executor(plan_file.path)
    seen, on_error = _errors()
    follower = follow_plan(executor, plan_file.path, on_error=on_error)
    plan_file.write(_text(5.0, workflow="other"))
    assert follower.reload_if_changed() is False
    assert executor.profile_plan.workflow == "follow"
    assert executor.profile_plan.steps["s"].cutoff_s == 3.0
    [error] = seen
    assert str(error) == (
        f"not reloaded, the running plan stays: {plan_file.path}: it is a plan of workflow "
        "'other', but this executor runs workflow 'follow': follow that workflow's plan file"
    )


def test_a_missing_file_is_reported_once_until_it_is_back(plan_file: PlanFile) -> None:
    """The file is gone: one report; the plan stays; a new file is swapped in."""
    executor = _executor(plan_file.path)
    seen, on_error = _errors()
    follower = follow_plan(executor, plan_file.path, on_error=on_error)
    plan_file.path.unlink()
    assert [follower.reload_if_changed() for _ in range(3)] == [False] * 3
    assert len(seen) == 1
    assert "cannot read it" in str(seen[0])
    plan_file.write(_text(7.0))
    assert follower.reload_if_changed() is True
    assert executor.profile_plan.steps["s"].cutoff_s == 7.0


def test_a_plan_the_executor_refuses_is_reported(plan_file: PlanFile) -> None:
    """A plan without the step a policy names: replace_plan refuses it, the follower says so."""
    executor = _executor(plan_file.path)
    seen, on_error = _errors()
    follower = follow_plan(executor, plan_file.path, on_error=on_error)
    plan_file.write(_text().replace("  s:\n", "  t:\n"))
    assert follower.reload_if_changed() is False
    assert "the executor refused it" in str(seen[0])
    assert list(executor.profile_plan.steps) == ["s"]


def test_inside_async_with_it_polls_every_every_s(plan_file: PlanFile) -> None:
    """On virtual time: the change is seen at the first poll after it, and not after exit."""
    executor = _executor(plan_file.path)

    async def main() -> list[float | None]:
        cutoffs: list[float | None] = []
        async with follow_plan(executor, plan_file.path, every_s=30.0) as follower:
            assert isinstance(follower, PlanFollower)
            await asyncio.sleep(1.0)
            plan_file.write(_text(5.0))
            await asyncio.sleep(28.0)  # t = 29: no poll yet
            cutoffs.append(executor.profile_plan.steps["s"].cutoff_s)
            await asyncio.sleep(2.0)  # t = 31: polled at 30
            cutoffs.append(executor.profile_plan.steps["s"].cutoff_s)
        plan_file.write(_text(9.0))
        await asyncio.sleep(100.0)
        cutoffs.append(executor.profile_plan.steps["s"].cutoff_s)
        return cutoffs

    assert run(main()) == [3.0, 5.0, 5.0]


@pytest.mark.parametrize("every_s", [0.0, -1.0, float("inf"), float("nan"), True, "30"])
def test_every_s_must_be_positive_seconds(plan_file: PlanFile, every_s: Any) -> None:
    """A poll interval that is not a positive number of seconds is refused, by name."""
    with pytest.raises(ConfigError) as caught:
        follow_plan(_executor(plan_file.path), plan_file.path, every_s=every_s)
    assert caught.value.field == "every_s"
