"""
`tailkit demo --quick`: the whole loop on the bundled samples, end to end.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import load_plan
from tailkit.demo import _demo
from tailkit.demo._generate import write_sample
from tailkit.errors import TailkitError

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
        assert sum(row["winner"] for row in ledger) >= 30 * 5  # most steps of 30 runs won
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
