"""
`tailkit demo --quick`: the whole loop on the bundled samples, end to end.
"""

from __future__ import annotations

import json
import math

from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import load_plan
from tailkit.demo import _demo
from tailkit.demo._generate import write_sample
from tailkit.errors import TailkitError
from tailkit.replay.lowlevel import compare_sides

from .conftest import ROOT


@pytest.mark.slow
def test_demo_quick_runs_the_whole_loop(tmp_path: Path) -> None:
    """The demo calibrates, replays both sides, checks and reports; --json has the contract."""
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--quick", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert ["without plan", "with plan"] == [side["label"] for side in doc["sides"]]
    keys = {"miss_rate", "p50_s", "p99_s", "extra_attempts"}
    for side in doc["sides"]:
        assert 30 == side["runs"]
        assert keys == set(side["predicted"]) == set(side["observed"])
        assert side["verdict"] in ("agrees", "differs")
        assert all(low <= high for low, high in side["observed_interval"].values() if high)
    assert 0 == doc["sides"][0]["observed"]["extra_attempts"]  # no cutoffs, no extra attempts
    assert doc["verdict"] in ("agrees", "differs", "can't tell")
    effect = doc["plan_effect"]  # the test behind "the plan helps", not two point estimates
    assert [30, 30] == effect["runs"]
    assert effect["verdict"] in ("helps", "hurts", "can't tell")
    if effect["p_value"] >= 0.05 and not effect["p99"]:
        assert "can't tell" == effect["verdict"]
    assert {"time_scale", "error_s", "error_share", "ok", "lead_s"} <= set(doc["fidelity"])
    assert doc["check"]["verdict"] in ("holds", "drifted")
    assert "steps" in doc["check"]
    assert (out / "report" / "index.html").stat().st_size > 10_000
    assert "Replay against the simulation" in (out / "report" / "index.html").read_text()
    plan = load_plan(out / "plan.yaml")
    assert plan.predicted is not None
    assert any(step.on_cutoff != "wait" for step in plan.steps.values())
    for name in ("without-plan", "with-plan"):
        ledger = [
            json.loads(line) for line in (out / f"ledger-{name}.jsonl").read_text().splitlines()
        ]
        assert {row["step"] for row in ledger} == set(plan.steps)
        # a step's answer is one attempt: at most one winner per run and step, a finished one
        # (how many steps finish before the deadline is the demo's figure: a busy machine
        # moves it)
        won = [(row["run_id"], row["step"]) for row in ledger if row["winner"]]
        assert won
        assert len(won) == len(set(won))
        assert all(row["status"] == "ok" for row in ledger if row["winner"])
        assert len({row["run_id"] for row in ledger}) == 30


def test_the_generated_sample_is_the_committed_one(tmp_path: Path) -> None:
    """A wheel's demo generates data_samples/production/calls.parquet, byte for byte."""
    (written,) = write_sample(tmp_path)

    assert tmp_path / "calls.parquet" == written
    assert (ROOT / "data_samples/production/calls.parquet").read_bytes() == written.read_bytes()


def test_an_installed_package_generates_its_log_under_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Package data without a production log: the log is generated under out/samples only."""
    packaged = tmp_path / "site-packages" / "data"
    packaged.mkdir(parents=True)
    (packaged / "workflow.yaml").write_bytes((ROOT / "data_samples/workflow.yaml").read_bytes())
    monkeypatch.setattr(_demo, "PACKAGED", packaged)
    monkeypatch.setattr(_demo, "CLONE", tmp_path / "no-clone")
    said: list[str] = []
    out = tmp_path / "out"

    workflow, samples = _demo.find_samples(out, said.append)

    assert packaged / "workflow.yaml" == workflow
    assert [out / "samples" / "calls.parquet", packaged / "llmperf-leaderboard"] == samples
    assert ["generate the production-like sample (200,000 calls, seed 7)"] == said
    assert ["out", "site-packages"] == sorted(p.name for p in tmp_path.iterdir())
    assert [out / "samples"] == list(out.iterdir())


def test_a_clone_uses_the_committed_samples(tmp_path: Path) -> None:
    """From a clone the committed files are read and nothing is generated."""
    said: list[str] = []

    workflow, samples = _demo.find_samples(tmp_path, said.append)

    assert ROOT / "data_samples" / "workflow.yaml" == workflow
    assert [
        ROOT / "data_samples" / "production" / "calls.parquet",
        ROOT / "data_samples" / "llmperf-leaderboard",
    ] == samples
    assert [] == said
    assert [] == list(tmp_path.iterdir())


def test_no_samples_at_all_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken install says which file is missing and how to fix it, not a traceback."""
    monkeypatch.setattr(_demo, "PACKAGED", tmp_path / "data")
    monkeypatch.setattr(_demo, "CLONE", tmp_path / "data_samples")

    with pytest.raises(TailkitError) as caught:
        _demo.find_samples(tmp_path / "out", print)

    assert (
        f"{tmp_path / 'data' / 'workflow.yaml'}: the demo's sample workflow is missing; "
        "reinstall tailkit (pip install --force-reinstall tailkit) or run from a clone"
    ) == str(caught.value)


def test_the_plan_helps_only_when_the_test_says_so() -> None:
    """Two point estimates are not a verdict: 6.5 % → 7.0 % and 6.5 % → 2.5 % both can't tell."""
    unbounded = ((90.0, math.inf), (90.0, math.inf))  # p99 beyond the deadline on both sides

    worse = compare_sides((13, 14), (200, 200), p99_s=unbounded)
    better = compare_sides((13, 5), (200, 200), p99_s=unbounded)

    assert ("can't tell", "can't tell") == (worse.verdict, better.verdict)
    assert worse.sentence().startswith("can't tell whether the plan helps: misses 6.5% → 7.0%")
    assert "about 421 runs per side would tell a difference the size seen" in better.sentence()
    assert better.runs_needed is not None
    assert worse.runs_needed is not None
    assert better.runs_needed < worse.runs_needed


def test_a_significant_difference_is_named_both_ways() -> None:
    """Misses that an exact test tells apart: helps, or hurts, with the p-value."""
    helps = compare_sides((16, 4), (200, 200))
    hurts = compare_sides((5, 20), (200, 200))

    assert ("helps", "hurts") == (helps.verdict, hurts.verdict)
    assert helps.p_value < 0.05
    assert hurts.p_value < 0.05
    assert (
        "the plan helps: misses 8.0% → 2.0% (16 of 200 runs, 4 of 200; exact test p = 0.0099)"
        == (helps.sentence())
    )
    assert helps.runs_needed is None


def test_p99_intervals_apart_decide_when_misses_do_not() -> None:
    """Equal misses and a p99 interval wholly below the baseline's: helps; wholly above: hurts."""
    lower = compare_sides((13, 14), (200, 200), p99_s=((120.0, 150.0), (95.0, 110.0)))
    higher = compare_sides((13, 14), (200, 200), p99_s=((95.0, 110.0), (120.0, 150.0)))
    traded = compare_sides((16, 4), (200, 200), p99_s=((95.0, 110.0), (120.0, 150.0)))

    assert ("helps", "lower") == (lower.verdict, lower.p99)
    assert ("hurts", "higher") == (higher.verdict, higher.p99)
    assert "can't tell" == traded.verdict
    assert "but p99 higher" in traded.reason


def test_equal_misses_size_the_runs_by_the_prediction() -> None:
    """No difference seen: the runs that would tell the predicted one; none predicted: none."""
    predicted = compare_sides((0, 0), (30, 30), predicted_miss_rates=(0.082, 0.03))
    nothing = compare_sides((0, 0), (30, 30))

    assert "the size predicted (8.2% → 3.0%)" in predicted.reason
    assert 300 < (predicted.runs_needed or 0) < 320
    assert nothing.runs_needed is None
    assert "no difference seen or predicted" in nothing.reason


# Misses without and with the plan observed by `tailkit demo --seed S --json` (200 runs a side,
# the default) on a busy 2-core machine, 2026-12-05: the verdict must be one on all three.
RECORDED_SEEDS = {0: (13, 14), 1: (6, 13), 2: (17, 7)}


def test_the_demo_gives_one_verdict_on_three_seeds() -> None:
    """The recorded misses of three seeds: the same verdict on each."""
    verdicts = {
        seed: compare_sides(misses, (200, 200)).verdict for seed, misses in RECORDED_SEEDS.items()
    }

    assert 1 == len(set(verdicts.values())), verdicts


def test_bad_counts_are_refused_with_the_values() -> None:
    """More misses than runs is a mistake worth a message naming both."""
    with pytest.raises(ValueError, match="got 5 of 4 runs"):
        compare_sides((5, 0), (4, 4))
