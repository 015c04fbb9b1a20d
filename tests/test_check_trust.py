"""
Tests of what `tailkit check` trusts: the ledger's routes, its clocks, its runs, its names.

A check judges a plan on the runs it made. A ledger whose attempts went to other routes is
refused (or, for a few runs, those runs are left out and named); runs whose times cannot be
true, or that lack a required step their dependencies would have started, are left out and
named, never counted as misses; names from the plan and the ledger print as data.
"""

from __future__ import annotations

import csv
import json

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from typer.testing import CliRunner

from tailkit.check import check_observation, check_plan, observe
from tailkit.check.lowlevel import CLOCK, PARTIAL, REFUSED, ROUTE
from tailkit.cli import app
from tailkit.config import parse_plan
from tailkit.errors import ConfigError, IngestError
from tailkit.ingest import ScanOptions
from tests.test_check import World, ledger, plan_yaml


runner = CliRunner()
RUNS = 300
SKEWED = ("run-1-00003", "run-1-00010", "run-1-00100", "run-1-00200")


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    """The calibrated plan of the test world: routes a/m (first attempts) and b/m (hedges)."""
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(World()), encoding="utf-8")
    return path


@pytest.fixture
def records(tmp_path: Path) -> list[dict[str, Any]]:
    """300 runs of the world the plan was calibrated on, as the executor's records."""
    path = ledger(tmp_path / "world.jsonl", World(), RUNS, seed=1)
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _figures(report: Any) -> list[tuple[str, str, float, float, float, int]]:
    obs = [(x.scope, x.figure, x.observed) for x in report.lines]
    return [(s, f, o.value, o.low, o.high, o.n) for s, f, o in obs]


# --- routes ---------------------------------------------------------------------------------


def test_a_ledger_on_other_routes_is_refused_naming_step_and_routes(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """Every attempt on c/x: refused, naming the step, the plan's routes, the ledger's, the fix."""
    for r in records:
        r["provider"], r["model"] = "c", "x"
    path = _write(tmp_path / "other.jsonl", records)
    with pytest.raises(IngestError) as caught:
        check_plan(plan_file, path)
    said = str(caught.value)
    assert "other.jsonl: step 'draft' ran on routes the plan does not have for it" in said
    assert f"in {RUNS} of the {RUNS} runs, went to c/x (" in said
    assert "the plan's routes for it are a/m, b/m" in said
    assert "calibrate a plan on the routes they used" in said
    result = runner.invoke(app, ["check", str(plan_file), str(path)])
    assert 2 == result.exit_code
    assert 1 == len(result.stderr.splitlines())
    assert result.stderr.startswith("Error: ledger ")
    assert "rename them with --set-over provider=" in result.stderr


def test_two_plans_ledgers_mixed_are_refused(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """Half the runs (another plan's, same step names) on provider c: refused, not judged."""
    other = [
        dict(r, run_id="B" + r["run_id"], call_id="B" + r["call_id"], provider="c") for r in records
    ]
    mine = _write(tmp_path / "mine.jsonl", records)
    theirs = _write(tmp_path / "theirs.jsonl", other)
    with pytest.raises(IngestError, match=rf"in {RUNS} of the {2 * RUNS} runs, went to c/m"):
        check_plan(plan_file, [mine, theirs])


def test_a_few_runs_on_another_route_are_left_out_and_named(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """Four runs' draft on model m-2: those runs are left out, counted and named; the rest holds."""
    for r in records:
        if r["run_id"] in SKEWED and r["step"] == "draft":
            r["model"] = "m-2"
    kept = [r for r in records if r["run_id"] not in SKEWED]
    report = check_plan(plan_file, _write(tmp_path / "l.jsonl", records))
    clean = check_plan(plan_file, _write(tmp_path / "clean.jsonl", kept))
    obs = report.observation
    assert (RUNS - 4, 4, 0) == (obs.runs, obs.left_out_route, obs.left_out_clock)
    assert _figures(clean) == _figures(report)
    assert [ROUTE] * 4 == [x.reason for x in obs.left_out]
    assert set(SKEWED) == {x.run_id for x in obs.left_out}
    (warning,) = obs.warnings
    assert warning.startswith(f"4 of {RUNS} runs left out for attempts on routes the plan")
    assert "step draft on a/m-2, not a/m, b/m" in warning
    assert report.summary().endswith(
        f"over {RUNS - 4} runs; 4 runs left out (on routes the plan does not have)"
    )


def test_an_observation_of_another_plans_routes_is_not_judged(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """check_observation refuses an observation whose steps ran on routes the plan lacks."""
    obs = observe(plan_file, _write(tmp_path / "l.jsonl", records))
    other = parse_plan(
        plan_file.read_text("utf-8").replace("{provider: b, model: m}", "{provider: z, model: m}")
    )
    with pytest.raises(ConfigError, match=r"attempts on b/m, which the plan does not have for it"):
        check_observation(other, obs)
    renamed = plan_file.read_text("utf-8").replace("  tag:", "  label:")
    with pytest.raises(ConfigError, match=r"the observation is of steps extract, draft, tag"):
        check_observation(parse_plan(renamed), obs)


def test_every_route_of_a_step_is_the_plans_whatever_the_case(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    """Route names other than provider/model, hedge routes, upper case, an unknown provider."""
    plan = tmp_path / "plan.yaml"
    text = plan_yaml(World()).replace(
        "a/m: {provider: a, model: m}", "fast: {provider: A, model: M}"
    )
    plan.write_text(text.replace("route: a/m", "route: fast"), encoding="utf-8")
    for i, r in enumerate(records):
        if r["provider"] == "a" and i % 3 == 0:
            r["provider"] = None  # ingest reads the provider as unknown: the model decides
    report = check_plan(plan, _write(tmp_path / "l.jsonl", records))
    assert (RUNS, 0, ()) == (report.observation.runs, report.observation.left_out_route, ())
    for r in records:
        r["model"] = "x"
    with pytest.raises(IngestError, match=r"the plan's routes for it are fast = A/M, b/m"):
        check_plan(plan, _write(tmp_path / "x.jsonl", records))


# --- clocks ---------------------------------------------------------------------------------


def _skew(r: dict[str, Any], how: str) -> None:
    if how == "years later":
        r["started_at"] = "2185-01-01T00:00:00.000000Z"
    elif how == "at the epoch":
        r["started_at"] = "1970-01-01T00:00:01.000000Z"
    elif how == "an hour early":
        at = datetime.fromisoformat(r["started_at"]) - timedelta(hours=1)
        r["started_at"] = at.isoformat().replace("+00:00", "Z")
    elif how == "end before start":
        r["total_s"] = -3.0
    elif how == "5e9 s":
        r["total_s"] = 5e9
    elif how == "six days":
        r["total_s"] = 518400.0
    elif how == "first token after the end":
        r["ttft_s"] = r["total_s"] + 1.0


@pytest.mark.parametrize(
    "how",
    [
        "years later",
        "at the epoch",
        "an hour early",
        "end before start",
        "5e9 s",
        "six days",
        "first token after the end",
    ],
)
def test_lines_with_skewed_clocks_are_left_out_named_and_never_misses(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]], how: str
) -> None:
    """Four runs' draft lines skewed: the figures are those of the other runs, the four named."""
    for r in records:
        if r["run_id"] in SKEWED and r["step"] == "draft" and r["winner"]:
            _skew(r, how)
    kept = [r for r in records if r["run_id"] not in SKEWED]
    report = check_plan(plan_file, _write(tmp_path / "l.jsonl", records))
    clean = check_plan(plan_file, _write(tmp_path / "clean.jsonl", kept))
    obs = report.observation
    assert (RUNS - 4, 4) == (obs.runs, obs.left_out_clock)
    assert (clean.observation.missed_late, clean.observation.missed_failed) == (
        obs.missed_late,
        obs.missed_failed,
    )
    assert _figures(clean) == _figures(report)
    assert {CLOCK} == {x.reason for x in obs.left_out}
    (warning,) = obs.warnings
    assert warning.startswith(f"4 of {RUNS} runs left out for times that cannot be true")
    assert "not counted as misses" in warning
    assert all(f"{run} (" in warning for run in SKEWED[:4])
    assert "l.jsonl line " in warning


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_refused_line_of_a_renamed_run_column_is_found_in_its_run(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]], suffix: str
) -> None:
    """A CSV or JSON ledger, run ids under trace: a refused line's run is left out by name."""
    for r in records:
        r["trace"] = r.pop("run_id")
        r["attrs"] = json.dumps(r["attrs"])
        if r["trace"] in SKEWED[:2] and r["step"] == "draft":
            r["total_s"] = -2.0
    path = tmp_path / f"l.{suffix}"
    if suffix == "csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    else:
        _write(path, records)
    obs = observe(plan_file, path, options=ScanOptions(mapping={"run_id": "trace"}))
    assert (RUNS - 2, 2, 0) == (obs.runs, obs.left_out_clock, obs.left_out_partial)
    assert list(SKEWED[:2]) == [x.run_id for x in obs.left_out]


def test_a_run_years_away_from_the_others_is_left_out(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """A whole run (every line) stamped 30 years later: left out, the gap named."""
    for r in records:
        if r["run_id"] == SKEWED[0]:
            r["started_at"] = r["started_at"].replace("2026-", "2056-")
    obs = observe(plan_file, _write(tmp_path / "l.jsonl", records))
    assert (RUNS - 1, 1) == (obs.runs, obs.left_out_clock)
    assert "the run starts 30 years after the ledger's other runs" in obs.warnings[0]


def test_a_ledger_of_only_impossible_times_is_refused(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """Every run skewed: nothing to judge, one error line naming why."""
    for r in records:
        if r["step"] == "draft":
            r["started_at"] = "2185-01-01T00:00:00.000000Z"
    path = _write(tmp_path / "l.jsonl", records)
    result = runner.invoke(app, ["check", str(plan_file), str(path)])
    assert 2 == result.exit_code
    assert result.stderr.startswith(f"Error: ledger {path}: every one of its {RUNS} runs")
    assert "Fix the clocks" in result.stderr


def test_the_cli_says_what_was_left_out_in_text_and_json(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """The table's output warns by name; --json counts by reason and lists the runs."""
    for r in records:
        if r["run_id"] in SKEWED[:2] and r["step"] == "draft":
            r["total_s"] = -1.0
    path = _write(tmp_path / "l.jsonl", records)
    text = runner.invoke(app, ["check", str(plan_file), str(path)])
    assert f"warning 2 of {RUNS} runs left out for times that cannot be true" in text.output
    assert "total_s is negative: -1.0" in text.output
    quiet = runner.invoke(app, ["check", str(plan_file), str(path), "--quiet"])
    assert "2 runs left out (for times that cannot be true)" in quiet.output
    doc = json.loads(runner.invoke(app, ["check", str(plan_file), str(path), "--json"]).stdout)
    assert {"clock": 2, "route": 0, "refused": 0, "partial": 0} == {
        k: v for k, v in doc["left_out"].items() if k != "runs"
    }
    assert list(SKEWED[:2]) == [x["run_id"] for x in doc["left_out"]["runs"]]
    assert {"run_id", "reason", "detail"} == set(doc["left_out"]["runs"][0])
    assert 1 == len(doc["warnings"])
    assert RUNS - 2 == doc["workflow"]["runs"]


def test_runs_with_a_line_ingest_refused_are_left_out_not_misses(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """A winner with an unreadable status, or two runs under one id: left out, named."""
    for r in records:
        if r["run_id"] == SKEWED[0] and r["step"] == "draft" and r["winner"]:
            r["status"] = "done"
    again = [
        dict(r, total_s=(r["total_s"] or 0) + 1.0) for r in records if r["run_id"] == SKEWED[1]
    ]
    kept = [r for r in records if r["run_id"] not in SKEWED[:2]]
    report = check_plan(plan_file, _write(tmp_path / "l.jsonl", records + again))
    clean = check_plan(plan_file, _write(tmp_path / "clean.jsonl", kept))
    obs = report.observation
    assert (RUNS - 2, 2) == (obs.runs, obs.left_out_refused)
    assert _figures(clean) == _figures(report)
    assert [REFUSED, REFUSED] == [x.reason for x in obs.left_out]
    assert "status 'done' is not one of" in obs.left_out[0].detail
    assert "with other values: total_s" in obs.left_out[1].detail


# --- runs of other workflows ----------------------------------------------------------------


def test_another_workflows_runs_sharing_a_step_name_are_not_misses(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """A ledger shared with a workflow of steps extract and classify: its runs are left out."""
    other = [
        dict(
            r,
            run_id="B" + r["run_id"],
            call_id="B" + r["call_id"],
            step="classify" if r["step"] == "draft" else r["step"],
        )
        for r in records
        if r["step"] != "tag"
    ]
    mixed = _write(tmp_path / "mixed.jsonl", records + other[:200])
    report = check_plan(plan_file, mixed)
    clean = check_plan(plan_file, _write(tmp_path / "clean.jsonl", records))
    obs = report.observation
    assert (RUNS, 0) == (obs.runs, obs.left_out_clock)
    assert obs.left_out_partial > 50
    assert {PARTIAL} == {x.reason for x in obs.left_out}
    assert _figures(clean) == _figures(report)
    assert "no line of required step draft" in obs.warnings[0]


def test_runs_of_a_workflow_with_no_step_of_the_plan_are_noted(
    tmp_path: Path, plan_file: Path, records: list[dict[str, Any]]
) -> None:
    """One ledger for two workflows: the other's runs are left out, and a note says so."""
    names = {"extract": "fetch", "draft": "classify", "tag": "label"}
    other = [
        dict(r, run_id="B" + r["run_id"], call_id="B" + r["call_id"], step=names[r["step"]])
        for r in records[:30]
    ]
    obs = observe(plan_file, _write(tmp_path / "shared.jsonl", records + other))
    runs = len({r["run_id"] for r in other})
    assert RUNS == obs.runs
    assert (
        f"{runs} runs with no step of the plan (another workflow's: steps classify, fetch, "
        "label) were left out"
    ) in obs.notes


# --- names ----------------------------------------------------------------------------------


def test_hostile_names_print_as_data(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    """A step named [/], a workflow with [link=…], a model with ESC: printed, never obeyed."""
    step, model = "[/]", "m\x1b[2J"
    text = plan_yaml(World())
    text = text.replace("  draft:", f"  {json.dumps(step)}:")
    text = text.replace("model: m}", f"model: {json.dumps(model)}}}", 1)
    text = text.replace("workflow: brief", 'workflow: "[link=https://example.com]brief[/link]"')
    plan = tmp_path / "plan.yaml"
    plan.write_text(text, encoding="utf-8")
    slow = ledger(tmp_path / "slow.jsonl", World().changed("draft", median_s=24.0), RUNS, seed=2)
    rows = [json.loads(x) for x in slow.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["step"] = step if r["step"] == "draft" else r["step"]
        r["model"] = model if r["provider"] == "a" else r["model"]
    result = runner.invoke(app, ["check", str(plan), str(_write(tmp_path / "l.jsonl", rows))])
    assert 1 == result.exit_code, result.output
    assert "\x1b" not in result.output
    assert "│ [/]" in result.output
    assert "step [/] p50: observed" in result.output
    assert "plan [link=https://example.com]brief[/link] against" in result.output
    assert "slower route: a/m ([/])" in result.output
    for r in rows:
        r["model"] = "x\x1b]0;pwned\x07"
    refused = runner.invoke(app, ["check", str(plan), str(_write(tmp_path / "x.jsonl", rows))])
    assert 2 == refused.exit_code
    assert "\x1b" not in refused.stderr
    assert "\x07" not in refused.stderr
    assert "a/x\\x1b]0;pwned\\x07" in refused.stderr
