"""
`tailkit.refresh.refresh` and ``tailkit refresh``: the drift loop's turn, on synthetic ledgers.

A small world: ``ask`` may go first to ``a/m`` or ``b/m`` (its candidates), then ``tag`` runs
on ``b/m``; both wait (not idempotent: no hedge, no retry), so a ledger is one line per step
call. The store holds three-day-old calls of both routes (``a/m`` median 2 s, ``b/m`` 3 s), and
the plan calibrated on them sends ``ask`` to ``a/m``. A ledger from the same world holds; one
where ``a/m`` got 2x slower drifts, and recalibrating on its recent calls sends ``ask`` to
``b/m``.
"""

from __future__ import annotations

import json
import math
import shutil

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from typer.testing import CliRunner, Result

from tailkit.calibration import calibrate
from tailkit.cli import app
from tailkit.config import dump_plan, load_plan, parse_plan
from tailkit.errors import ConfigError, IngestError
from tailkit.ingest import ingest_paths
from tailkit.refresh import (
    KEPT,
    NOT_RECALIBRATED,
    WOULD_WRITE,
    WRITTEN,
    refresh,
)
from tailkit.store import Store


WORKFLOW = """\
tailkit_plan: 1
workflow: loop
deadline_s: 9
hedge_budget: 0.05
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  ask:
    route: a/m
    candidates: [a/m, b/m]
    idempotent: false
  tag:
    depends_on: [ask]
    route: b/m
    idempotent: false
"""
T0 = datetime(2026, 5, 4, 9, 0, 0, tzinfo=UTC)
HISTORY = T0 - timedelta(days=3)
FAST = {"a/m": 2.0, "b/m": 3.0}
SLOW_A = {"a/m": 4.0, "b/m": 3.0}
# small searches: the tests are about the loop, not the optimizer
QUICK: dict[str, Any] = {"runs": 2000, "check_runs": 4000, "replicates": 0, "min_calls": 50}
QUICK_FLAGS = ["--runs", "2000", "--check-runs", "4000", "--replicates", "0", "--min-calls", "50"]
runner = CliRunner()


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _line(run: str, step: str, route: str, start: datetime, total_s: float) -> str:
    """One ledger line: a first attempt that won."""
    provider, model = route.split("/")
    record = {
        "call_id": f"{run}-{step}-0", "run_id": run, "step": step, "attempt": 0,
        "role": "primary", "provider": provider, "model": model, "started_at": _iso(start),
        "ttft_s": None, "total_s": round(total_s, 4), "input_tokens": 500,
        "output_tokens": None, "status": "ok", "error_type": None, "http_status": None,
        "censored_at_s": None, "abandoned": False, "idempotency_key": f"{run}-{step}",
        "deadline_at": None, "winner": True, "attrs": {},
    }  # fmt: skip
    return json.dumps(record)


def ledger(path: Path, medians: dict[str, float], runs: int, *, seed: int) -> Path:
    """``runs`` runs of the workflow, one a minute from T0: ask on a/m, then tag on b/m."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(runs):
        run, start = f"run-{seed}-{i:04d}", T0 + timedelta(minutes=i)
        ask = medians["a/m"] * math.exp(0.3 * rng.standard_normal())
        tag = medians["b/m"] * math.exp(0.3 * rng.standard_normal())
        out.append(_line(run, "ask", "a/m", start, ask))
        out.append(_line(run, "tag", "b/m", start + timedelta(seconds=ask), tag))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def history(path: Path, *, per_route: int = 400) -> Path:
    """Three-day-old calls of both routes, from the world the plan was calibrated on."""
    rng = np.random.default_rng(7)
    rows = []
    for route, median in FAST.items():
        provider, model = route.split("/")
        for i in range(per_route):
            total_s = round(median * math.exp(0.3 * rng.standard_normal()), 4)
            start = _iso(HISTORY + timedelta(seconds=30 * i))
            row = {"call_id": f"old-{route}-{i}", "provider": provider, "model": model,
                   "started_at": start, "total_s": total_s, "input_tokens": 500,
                   "status": "ok"}  # fmt: skip
            rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@dataclass
class Loop:
    """A store, the workflow, the plan calibrated on the store, and a folder for ledgers."""

    folder: Path
    db: Path
    workflow: Path
    plan: Path

    def ledger(self, medians: dict[str, float], runs: int = 100, *, seed: int = 1) -> Path:
        """A ledger of the running plan's runs, in the world ``medians`` describes."""
        return ledger(self.folder / f"ledger-{seed}-{runs}.jsonl", medians, runs, seed=seed)

    def calls(self) -> int:
        """Calls in the store."""
        with Store.open(self.db, read_only=True) as store:
            return store.counts()["calls"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The store of old calls and the plan calibrated on it (made once)."""
    folder = tmp_path_factory.mktemp("refresh")
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [history(folder / "old.jsonl")]).ok
        found = calibrate(store, parse_plan(WORKFLOW), seed=3, **QUICK)
    plan = folder / "plan.yaml"
    plan.write_text(dump_plan(found.plan), encoding="utf-8")
    return db, plan, folder


@pytest.fixture
def loop(calibrated: tuple[Path, Path, Path], tmp_path: Path) -> Loop:
    """A fresh copy of the store and the plan, and the workflow file."""
    db, plan, _ = calibrated
    shutil.copy(db, tmp_path / "calls.duckdb")
    shutil.copy(plan, tmp_path / "plan.yaml")
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    return Loop(tmp_path, tmp_path / "calls.duckdb", workflow, tmp_path / "plan.yaml")


def _cli(loop: Loop, *args: str) -> Result:
    """``tailkit refresh ARGS`` on the loop's workflow and store, with small searches."""
    flags = ["-w", str(loop.workflow), "--db", str(loop.db), *QUICK_FLAGS]
    return runner.invoke(app, ["refresh", *args, *flags])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix != ".duckdb"}


def test_the_plan_sends_ask_to_the_faster_route(loop: Loop) -> None:
    """The world as calibrated: ask goes first to a/m (2 s), tag waits on b/m (3 s)."""
    plan = load_plan(loop.plan)

    assert ("a/m", "b/m") == (plan.steps["ask"].route, plan.steps["tag"].route)


def test_no_drift_keeps_the_plan_and_touches_nothing(loop: Loop) -> None:
    """A ledger of the world the plan knows: exit 0, no file written, nothing ingested."""
    path = loop.ledger(FAST, seed=11)
    before, calls = _files(loop.folder), loop.calls()

    result = refresh(loop.plan, loop.workflow, [path], db=loop.db, **QUICK)

    assert (KEPT, 0, False) == (result.outcome, result.exit_code, result.drifted)
    assert (None, None, None) == (result.new, result.ingested, result.backup)
    assert before == _files(loop.folder)
    assert calls == loop.calls()


def test_drift_writes_a_plan_on_the_recent_calls_and_keeps_the_old(loop: Loop) -> None:
    """a/m twice as slow: drifted, recalibrated on the ledger's calls alone, ask moves to b/m."""
    path = loop.ledger(SLOW_A, seed=12)
    old = loop.plan.read_bytes()
    inode = loop.plan.stat().st_ino

    result = refresh(loop.plan, loop.workflow, [path], db=loop.db, **QUICK)

    assert (WRITTEN, 1, True) == (result.outcome, result.exit_code, result.drifted)
    assert "ask" in {line.scope for line in result.check.drifted}
    new = load_plan(loop.plan)
    assert result.new is not None
    assert dump_plan(result.new) == loop.plan.read_text("utf-8")
    assert "b/m" == new.steps["ask"].route
    # only recent calls: the 100 of the ledger, not the 400 three-day-old ones
    assert 100 == new.steps["tag"].basis.calls  # type: ignore[union-attr]
    assert (9, 0.05) == (new.deadline_s, new.hedge_budget)
    assert old == (loop.folder / "plan.yaml.prev").read_bytes()
    assert inode != loop.plan.stat().st_ino  # replaced by a rename, never written in place
    assert [] == [p.name for p in loop.folder.iterdir() if p.name.endswith(".tmp")]
    assert 400 * 2 + 200 == loop.calls()
    newest = T0 + timedelta(minutes=99)  # the last run's tag started within its minute
    assert result.since is not None
    assert newest - timedelta(hours=6) <= result.since <= newest - timedelta(hours=5, minutes=59)


def test_a_second_turn_on_the_same_ledger_ingests_nothing_new(loop: Loop) -> None:
    """Ingest stores each call once: refreshing again on the same ledger adds no call."""
    path = loop.ledger(SLOW_A, seed=12)
    refresh(loop.plan, loop.workflow, [path], db=loop.db, force=True, **QUICK)
    calls = loop.calls()

    again = refresh(loop.plan, loop.workflow, [path], db=loop.db, force=True, **QUICK)

    assert calls == loop.calls()
    assert again.ingested is not None
    assert 0 == again.ingested.totals()["stored"]


def test_too_few_recent_calls_exit_3_and_the_plan_stays(loop: Loop) -> None:
    """40 drifted runs and a recalibration that needs 50 calls: exit 3, nothing written."""
    path = loop.ledger(SLOW_A, runs=40, seed=13)
    before = _files(loop.folder)

    result = refresh(loop.plan, loop.workflow, [path], db=loop.db, **QUICK)

    assert (NOT_RECALIBRATED, 3, True) == (result.outcome, result.exit_code, result.drifted)
    assert before == _files(loop.folder)
    said = result.problem_text()
    assert said is not None
    assert said.startswith("too few recent calls (calls since ")
    assert "has 40 calls in bucket" in said
    assert "(needs 50)" in said


def test_dry_run_writes_nothing_and_exits_as_the_run_would(loop: Loop) -> None:
    """--dry-run: the same outcome's exit code, no plan, no backup, no call in the store."""
    path = loop.ledger(SLOW_A, seed=12)
    before, calls = _files(loop.folder), loop.calls()

    result = refresh(loop.plan, loop.workflow, [path], db=loop.db, dry_run=True, **QUICK)

    assert (WOULD_WRITE, 1) == (result.outcome, result.exit_code)
    assert result.new is not None
    assert "b/m" == result.new.steps["ask"].route
    assert result.ingested is not None
    assert 200 == result.ingested.totals()["stored"]
    assert before == _files(loop.folder)
    assert calls == loop.calls()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("workflow: other", "workflow"),
        ("  extra:\n    route: a/m\n", "workflow"),
    ],
    ids=["another workflow", "other steps"],
)
def test_a_workflow_of_another_plan_is_bad_input(loop: Loop, change: str, field: str) -> None:
    """The workflow file must be the running plan's: its name and its steps."""
    text = (
        WORKFLOW.replace("workflow: loop", change)
        if change.startswith("workflow")
        else (WORKFLOW + change)
    )
    loop.workflow.write_text(text, encoding="utf-8")
    path = loop.ledger(SLOW_A, seed=12)

    with pytest.raises(ConfigError) as caught:
        refresh(loop.plan, loop.workflow, [path], db=loop.db, **QUICK)

    assert field == caught.value.field


def test_bad_input_exits_2_and_writes_nothing(loop: Loop) -> None:
    """A missing ledger, a plan without predictions, a bad --since: exit 2, no file written."""
    ledger_path = loop.ledger(SLOW_A, seed=12)
    bare = loop.folder / "bare.yaml"
    bare.write_text(WORKFLOW, encoding="utf-8")
    before, calls = _files(loop.folder), loop.calls()
    base = ["refresh", "--workflow", str(loop.workflow), "--db", str(loop.db), *QUICK_FLAGS]

    missing = runner.invoke(app, [*base, str(loop.plan), str(loop.folder / "nope.jsonl")])
    uncalibrated = runner.invoke(app, [*base, str(bare), str(ledger_path)])
    since = runner.invoke(app, [*base, "--since", "soon", str(loop.plan), str(ledger_path)])
    backup = runner.invoke(app, [*base, "--backup", str(loop.plan), str(loop.plan), "l.jsonl"])

    for result in (missing, uncalibrated, since, backup):
        assert 2 == result.exit_code, result.output
        assert result.stderr.startswith("Error: "), result.stderr
    assert "calibrate it first" in uncalibrated.stderr
    assert "--since" in since.stderr
    assert "--backup" in backup.stderr
    assert before == _files(loop.folder)
    assert calls == loop.calls()


def test_a_ledger_the_check_cannot_read_is_an_ingest_error(loop: Loop) -> None:
    """From Python, an unreadable ledger is check's IngestError."""
    with pytest.raises(IngestError):
        refresh(loop.plan, loop.workflow, [loop.folder / "nope.jsonl"], db=loop.db, **QUICK)


def test_cli_prints_the_drift_the_plans_side_by_side_and_what_it_wrote(loop: Loop) -> None:
    """Text: the drifted lines, the old figures beside the new, the written line last."""
    path = loop.ledger(SLOW_A, seed=12)

    result = _cli(loop, str(loop.plan), str(path))

    assert 1 == result.exit_code, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("check: drifted: ")
    assert any(line.startswith("  step ask p50: predicted ") for line in lines)
    assert any(line.startswith("first route of ask: ") for line in lines)
    assert any("first route" in line and "a/m" in line and "b/m" in line for line in lines)
    assert lines[-1].endswith(
        f"recalibrated (drifted): wrote {loop.plan} (the old one kept as {loop.plan}.prev)"
    )


def test_cli_json_shape(loop: Loop) -> None:
    """--json: the outcome, the check's drifted lines, the ingest, old and new side by side."""
    path = loop.ledger(SLOW_A, seed=12)

    result = _cli(loop, str(loop.plan), str(path), "--json")

    assert 1 == result.exit_code, result.output
    out = json.loads(result.stdout)
    assert {"outcome", "exit_code", "summary", "plan", "written", "backup", "dry_run", "forced",
            "check", "ingested", "recalibration", "workflow", "steps"} == set(out)  # fmt: skip
    assert ("written", 1, True) == (out["outcome"], out["exit_code"], out["written"])
    assert str(loop.plan) + ".prev" == out["backup"]
    assert "drifted" == out["check"]["verdict"]
    assert {"ask"} <= {line["scope"] for line in out["check"]["drifted"]}
    assert {"scope", "figure", "route", "predicted", "observed", "verdict", "reason",
            "cause", "causes"} <= set(out["check"]["drifted"][0])  # fmt: skip
    assert 200 == out["ingested"]["stored"]
    assert out["recalibration"]["ran"]
    assert out["recalibration"]["since"].endswith("Z")
    assert set(out["workflow"]) == {"old", "new"}
    assert set(out["workflow"]["old"]) == {"p50_s", "p99_s", "miss_rate", "extra_attempts"}
    ask = next(s for s in out["steps"] if s["step"] == "ask")
    assert ("a/m", "b/m") == (ask["old"]["route"], ask["new"]["route"])
    assert "route" in ask["changed"]


def test_cli_json_of_too_few_calls_names_the_flag(loop: Loop) -> None:
    """Exit 3 in --json: the problem spells --min-calls, the plan is kept."""
    path = loop.ledger(SLOW_A, runs=40, seed=13)

    result = _cli(loop, str(loop.plan), str(path), "--json")

    assert 3 == result.exit_code, result.output
    out = json.loads(result.stdout)
    assert ("not recalibrated", False, None) == (out["outcome"], out["written"], out["backup"])
    assert "--min-calls" in out["recalibration"]["problem"]
    assert out["workflow"]["new"] is None
