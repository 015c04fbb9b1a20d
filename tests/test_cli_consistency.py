"""
One CLI: the same short options everywhere, --json where scripts read, advice that applies.
"""

from __future__ import annotations

import json
import random

from pathlib import Path

import pytest
import typer

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import Step, Tokens
from tailkit.simulation.lowlevel import widen_fixes


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    A store of 60 seeded calls of one route, in bucket in 0-1k / out 0-64 (too few to calibrate).
    """
    tmp = tmp_path_factory.mktemp("cli")
    rng = random.Random(1)  # noqa: S311 - seeded test data
    calls = tmp / "calls.jsonl"
    with calls.open("w", encoding="utf-8") as f:
        for i in range(60):
            row = {
                "provider": "openai", "model": "gpt-4.1",
                "started_at": f"2026-01-01T00:00:{i:02d}Z",
                "total_s": round(rng.lognormvariate(0.0, 0.5), 3), "ttft_s": 0.2,
                "input_tokens": 100, "output_tokens": 50, "status": "ok",
            }  # fmt: skip
            f.write(json.dumps(row) + "\n")
    path = tmp / "calls.duckdb"
    result = CliRunner().invoke(app, ["ingest", str(calls), "--db", str(path), "--quiet"])
    assert 0 == result.exit_code, result.output
    return path


def test_every_out_option_has_the_short_form_o() -> None:
    """
    Each command that takes --out also takes -o, for the same option.
    """
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    with_out = {
        name: param.opts
        for name, command in commands.items()
        for param in command.params
        if "--out" in param.opts
    }

    assert {"calibrate", "demo", "replay", "report"} <= set(with_out)
    assert {name: {"--out", "-o"} for name in with_out} == {
        name: set(opts) for name, opts in with_out.items()
    }


def test_report_json_prints_the_paths_written(db: Path, tmp_path: Path) -> None:
    """
    `tailkit report -o DIR --json` prints index.html, every PNG it wrote, and the findings.
    """
    out = tmp_path / "rep"
    out.mkdir()
    (out / "fig_stale.png").write_bytes(b"an earlier run's figure")

    result = CliRunner().invoke(app, ["report", "-o", str(out), "--db", str(db), "--json"])

    assert 0 == result.exit_code, result.output
    doc = json.loads(result.stdout)
    # the store's 60 calls are too few for a bucket's p99: no heatmap of counts alone
    figures = ["fit_qq", "latency_ccdf", "ttft_vs_generation"]
    expected = {
        "index": str(out / "index.html"),
        "figures": [str(out / f"fig_{name}.png") for name in figures],
    }
    assert expected == {k: doc[k] for k in expected}
    assert {"index", "figures", "headline", "calls", "routes", "heaviest_tail", "left_out",
            "plan", "sections"} == set(doc)  # fmt: skip
    assert all(Path(p).is_file() for p in [expected["index"], *expected["figures"]])


def test_report_without_json_prints_the_page(db: Path, tmp_path: Path) -> None:
    """
    Without --json, report prints only the path of index.html (a line a shell can use).
    """
    out = tmp_path / "rep"

    result = CliRunner().invoke(app, ["report", "--out", str(out), "--db", str(db)])

    assert 0 == result.exit_code, result.output
    assert f"{out / 'index.html'}\n" == result.stdout


@pytest.mark.parametrize(
    ("tokens", "fix"),
    [
        (Tokens(100, 50), "widen the bucket (drop expected_tokens.output, or set "
         "{input_edges}/{output_edges}), "),
        (Tokens(100, None), "widen the bucket (set {input_edges}), "),
        (Tokens(None, 50), "widen the bucket (drop expected_tokens.output, or set "
         "{output_edges}), "),
        (Tokens(None, None), ""),
    ],
    ids=["both", "input", "output", "none"],
)  # fmt: skip
def test_widen_fixes_names_only_what_the_step_sets(tokens: Tokens, fix: str) -> None:
    """
    Dropping expected_tokens.output is suggested only to a step that has it; edges likewise.
    """
    step = Step(name="s", route="r", expected_tokens=tokens)

    assert fix == widen_fixes([step])


def test_widen_fixes_of_several_steps_says_buckets() -> None:
    """
    Several steps: the plural, and every fix any of them needs.
    """
    steps = [
        Step(name="a", route="r", expected_tokens=Tokens(100, None)),
        Step(name="b", route="r", expected_tokens=Tokens(None, 50)),
    ]

    assert (
        "widen the buckets (drop expected_tokens.output, or set {input_edges}/{output_edges}), "
        == widen_fixes(steps)
    )


@pytest.mark.parametrize(
    ("tokens", "bucket", "fix"),
    [
        ("{input: 100}", "in 0-1k / out any",
         "widen the bucket (set --input-edges), "),
        ("{input: 100, output: 50}", "in 0-1k / out 0-64",
         "widen the bucket (drop expected_tokens.output, or set --input-edges/--output-edges), "),
        ("{}", "in any / out any", ""),
    ],
    ids=["input-only", "both", "none"],
)  # fmt: skip
def test_calibrate_thin_bucket_error_suggests_only_what_applies(
    db: Path, tmp_path: Path, tokens: str, bucket: str, fix: str
) -> None:
    """
    The calibrate thin-sample error is one line naming the bucket and only the fixes that apply.
    """
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 60\nhedge_budget: 0.05\nroutes:\n"
        "  openai/gpt-4.1: {provider: openai, model: gpt-4.1}\n"
        f"steps:\n  s:\n    route: openai/gpt-4.1\n    expected_tokens: {tokens}\n"
    )

    result = CliRunner().invoke(
        app, ["calibrate", str(workflow), "-o", str(tmp_path / "plan.yaml"), "--db", str(db)]
    )

    assert 1 == result.exit_code
    assert (
        f"Error: step 's': route openai/gpt-4.1 has 60 calls in bucket {bucket} (needs 200). "
        f"Ingest more logs for this route, {fix}or lower --min-calls\n" == result.stderr
    )


def test_simulate_takes_deadline_and_budget_like_calibrate(tmp_path: Path) -> None:
    """
    `simulate --deadline/--budget` replace the file's values; out of range is one Error line.
    """
    workflow = tmp_path / "w.yaml"
    workflow.write_text(
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 60\nhedge_budget: 0.05\nroutes:\n"
        "  openai/gpt-4.1: {provider: openai, model: gpt-4.1}\n"
        "steps:\n  s:\n    route: openai/gpt-4.1\n    expected_tokens: {input: 100}\n"
    )
    rng = random.Random(2)  # noqa: S311 - seeded test data
    row = {"provider": "openai", "model": "gpt-4.1", "input_tokens": 100}
    lines = [json.dumps(row | {"total_s": rng.uniform(1, 3)}) + "\n" for _ in range(300)]
    calls = tmp_path / "calls.jsonl"
    calls.write_text("".join(lines))
    db = tmp_path / "s.duckdb"
    CliRunner().invoke(app, ["ingest", str(calls), "--db", str(db), "--quiet"])

    def miss(*extra: str) -> float:
        args = ["simulate", str(workflow), "--db", str(db), "--runs", "2000", "--json", *extra]
        result = CliRunner().invoke(app, args)
        assert 0 == result.exit_code, result.output
        return float(json.loads(result.output)["policies"]["none"]["miss_rate"])

    assert 0.0 == miss()  # every call is under 3 s, the file's deadline is 60 s
    assert 1.0 == miss("--deadline", "0.5")
    bad = CliRunner().invoke(app, ["simulate", str(workflow), "--db", str(db), "--budget", "2"])
    assert 1 == bad.exit_code
    assert bad.output == (
        "Error: --budget must be between 0 and 1 (extra attempts per first attempt), got 2.0. "
        "Pass a share such as 0.05 (5 extra attempts per 100 first attempts).\n"
    )
