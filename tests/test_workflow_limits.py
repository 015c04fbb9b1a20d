"""
`simulate` and `calibrate` refuse run counts that cannot fit in memory; a written plan's mode.
"""

from __future__ import annotations

import os
import stat

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from typer.testing import CliRunner

from tailkit._config._write import write_atomically
from tailkit.calibration import calibrate
from tailkit.cli import app
from tailkit.config import load_plan
from tailkit.errors import ConfigError
from tailkit.simulation import MAX_RUNS, compare_policies, simulate
from tailkit.store import Store

from .conftest import ROOT


WORKFLOW = ROOT / "data_samples" / "workflow.yaml"
TOO_MANY = f"{MAX_RUNS + 1:,}"


def test_runs_in_scientific_notation_are_not_an_integer(tmp_path: Path) -> None:
    """
    `--runs 1e9` is refused by the option parser (exit 2), naming the option.
    """
    result = CliRunner().invoke(
        app, ["simulate", str(WORKFLOW), "--db", str(tmp_path / "t.duckdb"), "--runs", "1e9"]
    )

    assert result.exit_code == 2
    words = " ".join(result.output.replace("│", " ").split())  # the error box wraps lines
    assert "Invalid value for '--runs': Input should be a valid integer" in words


def test_a_replay_of_a_billion_runs_is_refused_by_the_parser(tmp_path: Path) -> None:
    """
    `tailkit replay --runs` has a bound too (each run is real): the parser names it.
    """
    result = CliRunner().invoke(
        app, ["replay", str(WORKFLOW), "--db", str(tmp_path / "t.duckdb"), "--runs", "1000000000"]
    )

    assert result.exit_code == 2
    words = " ".join(result.output.replace("│", " ").split())
    assert "Invalid value for '--runs': Input should be less than or equal to 100000" in words


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["simulate"], "--runs"),
        (["calibrate", "--out", "{tmp}/plan.yaml"], "--runs"),
        (["calibrate", "--out", "{tmp}/plan.yaml"], "--check-runs"),
    ],
)
def test_a_billion_runs_are_refused_before_any_work(
    tmp_path: Path, store: Store, command: list[str], option: str
) -> None:
    """
    `--runs 1000000000` ends in one Error: line naming the option, the bound and the reason.
    """
    store.close()  # an empty store: refused before the calls are read
    args = [c.replace("{tmp}", str(tmp_path)) for c in command]
    result = CliRunner().invoke(
        app,
        [*args[:1], str(WORKFLOW), *args[1:], "--db", str(tmp_path / "t.duckdb"),
         option, "1000000000"],
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: {option} must be at most 10,000,000, got 1,000,000,000: every run's end-to-end "
        "time is kept for exact quantiles (8 bytes a run, per policy); 10,000,000 runs already "
        "give a 1% miss rate to ±0.006 percentage points. Pass 10,000,000 runs or fewer.\n"
    )
    assert not (tmp_path / "plan.yaml").exists()


def test_the_library_refuses_too_many_runs_too(store: Store) -> None:
    """
    `simulate`, `compare_policies` and `calibrate` raise ConfigError above MAX_RUNS.
    """
    plan = load_plan(WORKFLOW)
    with pytest.raises(ConfigError, match=f"runs must be at most 10,000,000, got {TOO_MANY}"):
        simulate(plan, {}, runs=MAX_RUNS + 1)
    with pytest.raises(ConfigError, match=f"got {TOO_MANY}"):
        compare_policies(plan, {}, runs=MAX_RUNS + 1)
    with pytest.raises(ConfigError, match=f"replicate_runs must be at most .* got {TOO_MANY}"):
        calibrate(store, plan, replicate_runs=MAX_RUNS + 1)


@pytest.fixture
def umask_027() -> Iterator[None]:
    """
    The process umask set to 027 for one test.
    """
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_027")
def test_a_new_plan_gets_the_mode_of_any_new_file(tmp_path: Path) -> None:
    """
    A plan written where none was gets 0666 less the umask (here 0640), not mkstemp's 0600.
    """
    plan = tmp_path / "sub" / "plan.yaml"

    write_atomically(plan, "tailkit_plan: 1\n")

    assert _mode(plan) == 0o640
    assert plan.read_text(encoding="utf-8") == "tailkit_plan: 1\n"
    assert [p.name for p in plan.parent.iterdir()] == ["plan.yaml"]  # no temporary file left


@pytest.mark.usefixtures("umask_027")
def test_a_replaced_plan_keeps_its_mode(tmp_path: Path) -> None:
    """
    Writing over an existing plan keeps that file's mode (here 0664, wider than the umask).
    """
    plan = tmp_path / "plan.yaml"
    plan.write_text("old\n", encoding="utf-8")
    plan.chmod(0o664)

    write_atomically(plan, "new\n")

    assert _mode(plan) == 0o664
    assert plan.read_text(encoding="utf-8") == "new\n"


def test_a_plan_that_cannot_be_written_is_an_error_line(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    An --out under a file (not a folder) ends in one Error: line naming it, not a traceback.
    """
    import tailkit.calibration
    import tailkit.simulation

    store.close()
    found = SimpleNamespace(plan=load_plan(WORKFLOW), samples={})
    monkeypatch.setattr(tailkit.calibration, "calibrate", lambda *a, **k: found)
    monkeypatch.setattr(tailkit.simulation, "compare_policies", lambda *a, **k: {})
    (tmp_path / "file").write_text("", encoding="utf-8")
    out = tmp_path / "file" / "plan.yaml"

    result = CliRunner().invoke(
        app, ["calibrate", str(WORKFLOW), "--out", str(out), "--db", str(tmp_path / "t.duckdb")]
    )

    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {out}: cannot write the plan: ")
    assert result.output.endswith(": choose another --out\n")
