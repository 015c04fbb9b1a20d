"""
The CLI for scripts and people: --json alone on stdout, --quiet, --min-group, advice that applies.
"""

from __future__ import annotations

import json
import random
import re

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from typer.testing import CliRunner

from tailkit.cli import app


COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
CALIBRATE_FAST = ["--runs", "2000", "--check-runs", "2000", "--replicates", "0"]
WORKFLOW = (
    "tailkit_plan: 1\nworkflow: t\ndeadline_s: 10\nhedge_budget: 0.05\nroutes:\n"
    "  openai/gpt-4.1: {provider: openai, model: gpt-4.1}\n"
    "steps:\n  s:\n    route: openai/gpt-4.1\n    expected_tokens: TOKENS\n"
)


@dataclass(frozen=True)
class World:
    """
    Files of one small seeded world: its calls, store, workflow, calibrated plan and ledger.
    """

    dir: Path
    calls: Path
    db: Path
    workflow: Path
    plan: Path
    ledger: Path


def _invoke(*args: str | Path | int) -> typer.testing.Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """
    300 seeded calls of one route (bucket in 0-1k / out 0-64), a plan, and a 40-run ledger.
    """
    tmp = tmp_path_factory.mktemp("scripts")
    rng = random.Random(3)  # noqa: S311 - seeded test data
    calls, ledger = tmp / "calls.jsonl", tmp / "ledger.jsonl"
    base = {"provider": "openai", "model": "gpt-4.1", "status": "ok"}
    calls.write_text(
        "".join(
            json.dumps(base | {
                "started_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                "total_s": round(rng.lognormvariate(0.5, 0.4), 3), "ttft_s": 0.2,
                "input_tokens": 100, "output_tokens": 50,
            }) + "\n"
            for i in range(300)
        )
    )  # fmt: skip
    ledger.write_text(
        "".join(
            json.dumps(base | {
                "call_id": f"r{r}-s-1", "run_id": f"r{r}", "step": "s", "attempt": 1,
                "role": "primary", "started_at": f"2026-01-02T00:{r:02d}:00Z",
                "total_s": round(rng.lognormvariate(0.5, 0.4), 3), "winner": True,
                "idempotency_key": f"r{r}-s",
            }) + "\n"
            for r in range(40)
        )
    )  # fmt: skip
    db, workflow, plan = tmp / "calls.duckdb", tmp / "workflow.yaml", tmp / "plan.yaml"
    workflow.write_text(WORKFLOW.replace("TOKENS", "{input: 100, output: 50}"))
    assert 0 == _invoke("ingest", calls, "--db", db, "-q").exit_code
    result = _invoke("calibrate", workflow, "-o", plan, "--db", db, *CALIBRATE_FAST, "-q")
    assert 0 == result.exit_code, result.output
    return World(tmp, calls, db, workflow, plan, ledger)


JSON_ARGS: dict[str, Callable[[World], list[str | Path]]] = {
    "ingest": lambda w: ["ingest", w.calls, "--db", w.dir / "again.duckdb"],
    "summary": lambda w: ["summary", "--db", w.db],
    "rejects": lambda w: ["rejects", "--db", w.db],
    "stats": lambda w: ["stats", "--db", w.db],
    "calibrate": lambda w: ["calibrate", w.workflow, "-o", w.dir / "j.yaml", "--db", w.db],
    "simulate": lambda w: ["simulate", w.plan, "--db", w.db, "--runs", "2000"],
    "races": lambda w: ["races", w.ledger, w.ledger],
    "check": lambda w: ["check", w.plan, w.ledger],
}
"""Arguments of each command whose result a script reads (demo, report, replay: own tests)."""


def test_every_command_a_script_reads_has_json() -> None:
    """
    --json exists on each command whose result a script reads.
    """
    with_json = {n for n, c in COMMANDS.items() if any("--json" in p.opts for p in c.params)}

    assert {*JSON_ARGS, "demo", "report", "replay"} <= with_json


@pytest.mark.parametrize("command", list(JSON_ARGS))
def test_json_is_alone_on_stdout(world: World, command: str) -> None:
    """
    `--json` prints one JSON document on stdout and nothing else (progress goes to stderr).
    """
    fast = CALIBRATE_FAST if command == "calibrate" else []
    result = _invoke(*JSON_ARGS[command](world), *fast, "--json")

    assert 0 == result.exit_code, result.output
    json.loads(result.stdout)


def test_every_quiet_option_has_the_short_form_q() -> None:
    """
    --quiet is on the commands whose output is long, always with -q.
    """
    quiet = {n: set(p.opts) for n, c in COMMANDS.items() for p in c.params if "--quiet" in p.opts}

    assert {"ingest", "calibrate", "simulate", "demo", "check"} <= set(quiet)
    assert all({"--quiet", "-q"} == opts for opts in quiet.values())


def test_calibrate_quiet_prints_nothing_and_writes_the_plan(world: World) -> None:
    """
    The result of `calibrate -q` is the plan file: stdout stays empty.
    """
    out = world.dir / "quiet-plan.yaml"

    result = _invoke("calibrate", world.workflow, "-o", out, "--db", world.db, *CALIBRATE_FAST,
                     "-q")  # fmt: skip

    assert (0, "") == (result.exit_code, result.stdout)
    assert out.read_text() == world.plan.read_text()


def test_simulate_quiet_prints_the_plans_line(world: World) -> None:
    """
    `simulate -q`: one line, the plan's miss rate, p50, p99 and extra attempts.
    """
    result = _invoke("simulate", world.plan, "--db", world.db, "--runs", "2000", "-q")

    assert 0 == result.exit_code, result.output
    assert (
        "the plan: miss rate 0.00% ± 0.05%, p50 1.7 s, p99 4.4 s, extra attempts 0.0% "
        "(2,000 runs, deadline 10 s)\n"
    ) == result.stdout


def test_check_quiet_prints_the_verdict_line(world: World) -> None:
    """
    `check -q`: the verdict sentence only, and the exit code of the verdict.
    """
    result = _invoke("check", world.plan, world.ledger, "-q")

    assert 0 == result.exit_code, result.output
    assert "holds: 4 of 7 lines hold (3 can't tell), over 40 runs\n" == result.stdout


def test_stats_min_group_leaves_out_small_groups(world: World) -> None:
    """
    `stats --min-group N` keeps the 300-call group at 300 and leaves it out at 301.
    """

    def groups(n: int) -> int:
        result = _invoke("stats", "--db", world.db, "--bucket", "none", "--min-group", n, "--json")
        assert 0 == result.exit_code, result.output
        return len(json.loads(result.stdout)["table"])

    assert (1, 0) == (groups(300), groups(301))


def test_stats_min_calls_is_refused_naming_min_group(world: World) -> None:
    """
    `stats --min-calls` (calibrate's meaning) fails with one line that names --min-group.
    """
    result = _invoke("stats", "--db", world.db, "--min-calls", "5")

    assert 1 == result.exit_code
    assert (
        "Error: stats has no --min-calls (calibrate's floor for a step's route); to leave out "
        "groups with fewer calls use --min-group 5\n"
    ) == result.stderr


@pytest.mark.parametrize(
    ("tokens", "bucket", "fix"),
    [
        ("{input: 100, output: 50}", "in 0-1k / out 0-64",
         "widen the bucket (drop expected_tokens.output, or set --input-edges/--output-edges), "),
        ("{input: 100}", "in 0-1k / out any", "widen the bucket (set --input-edges), "),
        ("{}", "in any / out any", ""),
    ],
    ids=["both", "input-only", "none"],
)  # fmt: skip
def test_simulate_thin_bucket_error_suggests_only_what_applies(
    world: World, tokens: str, bucket: str, fix: str
) -> None:
    """
    The thin-sample error of simulate names the bucket and only the fixes that apply.
    """
    workflow = world.dir / "thin.yaml"
    workflow.write_text(WORKFLOW.replace("TOKENS", tokens))

    result = _invoke("simulate", workflow, "--db", world.db, "--min-calls", "400")

    assert 1 == result.exit_code
    assert (
        f"Error: step 's': route openai/gpt-4.1 has 300 calls in bucket {bucket} (needs 400). "
        f"Ingest more logs for this route, {fix}or lower --min-calls\n"
    ) == result.stderr


def test_replay_thin_bucket_error_names_replays_options(world: World) -> None:
    """
    The replay command refuses a thin route before serving, naming options replay has.
    """
    plan = world.dir / "cut-plan.yaml"
    text = world.plan.read_text()
    plan.write_text(
        text.replace("\n    cutoff_s: null ", "\n    cutoff_s: 4.0 ").replace(
            "\n    on_cutoff: wait ", "\n    on_cutoff: retry "
        )
    )
    assert plan.read_text() != text

    result = _invoke("replay", plan, "--db", world.db, "--min-calls", "400", "--runs", "5")

    assert 1 == result.exit_code
    assert (
        "Error: step 's': route openai/gpt-4.1 has 300 calls in bucket in 0-1k / out 0-64 "
        "(needs 400). Ingest more logs for this route, widen the bucket (drop "
        "expected_tokens.output, or set --input-edges/--output-edges), or lower --min-calls\n"
    ) == result.stderr


@pytest.mark.slow
def test_demo_quiet_prints_the_verdict_and_the_report(tmp_path: Path) -> None:
    """
    `demo --quick -q`: one line, the check's verdict on the with-plan ledger and the report.
    """
    out = tmp_path / "demo"

    result = _invoke("demo", "--quick", "-q", "-o", out)

    assert 0 == result.exit_code, result.output
    assert re.fullmatch(
        r"(holds|drifted): \d+ of \d+ lines.*, over 30 runs \(tailkit check, with-plan "
        rf"ledger\); report: {re.escape(str(out / 'report' / 'index.html'))}\n",
        result.stdout,
    )


def test_races_bad_window_names_the_option(world: World) -> None:
    """
    A --window that is not a positive number is refused by its option name, in one line.
    """
    result = _invoke("races", world.ledger, world.ledger, "--window", "0")

    assert (1, "Error: --window must be a positive number of seconds, got 0\n") == (
        result.exit_code,
        result.stderr,
    )


@pytest.mark.parametrize(
    "rows",
    [
        [{"status": "ok", "total_s": 1.5}],
        [{"status": "timeout", "total_s": 31.0, "censored_at_s": 30.0}] * 3,
        [{"status": "error", "total_s": 0.5}] * 3,
    ],
    ids=["one call", "all cut", "only errors"],
)
def test_stats_table_renders_without_two_finished_calls(
    tmp_path: Path, rows: list[dict[str, object]]
) -> None:
    """
    `stats` with no group of two finished calls prints "-" for latency and a note, no traceback.
    """
    calls, db = tmp_path / "calls.jsonl", tmp_path / "calls.duckdb"
    base = {"provider": "openai", "model": "m"}
    calls.write_text(
        "".join(json.dumps(base | {"call_id": f"c{i}"} | r) + "\n" for i, r in enumerate(rows))
    )
    assert 0 == _invoke("ingest", calls, "--db", db).exit_code

    result = _invoke("stats", "--db", db, "--bucket", "none")

    assert 0 == result.exit_code, result.output
    row = next(line for line in result.stdout.splitlines() if "openai" in line)
    assert ["-"] * 3 == [cell.strip() for cell in row.split("│")[6:9]]  # p50, p99, p99/p50
    assert (
        "note 1 group(s) have fewer than two finished calls (the rest cut or failed), so no "
        "latency: openai, m"
    ) in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("row", "what", "fix"),
    [
        ({"status": "timeout", "total_s": None, "censored_at_s": 30.0},
         "all 300 calls were cut (at 30 s: their latency is only known to be longer)",
         "calls that ran to completion (from a run with a longer timeout, or none)"),
        ({"status": "error", "total_s": 0.5},
         "all 300 calls failed (error or rate_limited)", "calls that succeeded"),
    ],
    ids=["all cut", "all failed"],
)  # fmt: skip
def test_calibrate_refusal_says_the_calls_were_cut_or_failed(
    tmp_path: Path, row: dict[str, object], what: str, fix: str
) -> None:
    """
    A route of 300 cut (or failed) calls is refused for what it is, not as "0 calls".
    """
    calls, db = tmp_path / "calls.jsonl", tmp_path / "calls.duckdb"
    other = {"call_id": "x", "provider": "openai", "model": "other", "status": "ok", "total_s": 1}
    base = {"provider": "openai", "model": "gpt-4.1"}
    calls.write_text(
        json.dumps(other)
        + "\n"
        + "".join(json.dumps(base | {"call_id": f"c{i}"} | row) + "\n" for i in range(300))
    )
    assert 0 == _invoke("ingest", calls, "--db", db).exit_code
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW.replace("TOKENS", "{}"))

    result = _invoke("calibrate", workflow, "-o", tmp_path / "plan.yaml", "--db", db)

    assert 1 == result.exit_code
    assert (
        "Error: step 's': route openai/gpt-4.1 has fewer than 2 finished calls in bucket in any / "
        f"out any, so no latency to calibrate on: {what}. Lowering --min-calls cannot help: "
        f"ingest {fix} for this route\n"
    ) == result.stderr
