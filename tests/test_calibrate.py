"""
The calibrator on the bundled sample workflow and production log, and its refusals.
"""

from __future__ import annotations

import dataclasses
import json
import re

from pathlib import Path

import pytest
import yaml

from typer.testing import CliRunner

from tailkit.calibration import calibrate, predict, workflow_of
from tailkit.calibration.lowlevel import QUANTILES
from tailkit.cli import app
from tailkit.config import Plan, Route, Step, Tokens, dump_plan, load_plan, parse_plan
from tailkit.simulation import (
    ThinSampleError,
    compare_policies,
    load_samples,
    policy_model,
    route_sample,
    simulate_model,
    workflow_model,
)
from tailkit.store import Store


ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "data_samples" / "workflow.yaml"
RUNS, CHECK_RUNS = 8_000, 40_000


@pytest.fixture(scope="module")
def db(production_db: Path) -> Path:
    """The bundled production sample in a store (conftest's, shared: read only)."""
    return production_db


@pytest.fixture(scope="module")
def calibrated(db: Path):  # type: ignore[no-untyped-def]
    """The sample workflow, calibrated once for the module."""
    with Store.open(db, read_only=True) as store:
        return calibrate(
            store, load_plan(WORKFLOW), runs=RUNS, check_runs=CHECK_RUNS, seed=3, replicates=40
        )


def test_calibrated_plan_beats_hedging_at_p95_everywhere(calibrated) -> None:  # type: ignore[no-untyped-def]
    """The calibrated plan misses less than hedge-at-p95 with no more extra attempts."""
    policies = compare_policies(calibrated.plan, calibrated.samples, runs=CHECK_RUNS, seed=9)
    plan, hedge, none = policies["plan"], policies["hedge_p95"], policies["none"]
    assert plan.extra_attempts <= hedge.extra_attempts
    assert plan.extra_attempts <= calibrated.plan.hedge_budget * 1.05
    gap = plan.miss_rate_se + hedge.miss_rate_se
    assert plan.miss_rate < hedge.miss_rate - 4 * gap
    # the budget also pays for the recoveries of these failing routes (as the executor's
    # does), which leaves less for hedges than the extras alone would
    assert plan.miss_rate < 0.6 * none.miss_rate


def test_search_is_not_one_quantile_for_every_step(calibrated) -> None:  # type: ignore[no-untyped-def]
    """No single 'hedge at q everywhere' within the budget does as well as the search."""
    base = workflow_model(workflow_of(calibrated.plan), calibrated.samples)
    ours = simulate_model(
        workflow_model(calibrated.plan, calibrated.samples), runs=CHECK_RUNS, seed=5
    )
    for q in QUANTILES:
        fixed = simulate_model(policy_model(base, "hedge_p95", quantile=q), runs=CHECK_RUNS, seed=5)
        if fixed.extra_attempts <= calibrated.plan.hedge_budget:
            assert ours.miss_rate <= fixed.miss_rate, q
    choices = {(s.on_cutoff, s.basis.quantile) for s in calibrated.plan.steps.values()}  # type: ignore[union-attr]
    assert len(choices) > 2


def test_plan_fields_are_filled_and_round_trip(calibrated) -> None:  # type: ignore[no-untyped-def]
    """Every step gets predicted and basis; the plan dumps and loads back equal."""
    plan = calibrated.plan
    assert plan.predicted is not None
    assert plan.predicted.miss_rate == pytest.approx(calibrated.result.miss_rate, abs=1e-5)
    for step in plan.steps.values():
        assert step.predicted is not None
        assert step.basis is not None
        assert step.basis.calls >= 200
        assert step.basis.bucket.startswith("in ")
        if step.on_cutoff in ("hedge", "retry"):
            assert step.idempotent
        if step.on_cutoff == "fail":
            assert not step.required
        assert step.on_cutoff != "hedge" or step.hedge_route != step.route
    assert parse_plan(dump_plan(plan)) == plan


def test_predictions_carry_intervals_that_hold_them(calibrated) -> None:  # type: ignore[no-untyped-def]
    """The plan's and each step's predictions come with 95% intervals around them."""
    predicted = calibrated.plan.predicted
    interval = predicted.interval
    assert interval is not None
    assert interval.level == 0.95
    for key in ("p50_s", "p99_s", "miss_rate", "extra_attempts"):
        low, high = getattr(interval, key)
        assert low <= getattr(predicted, key) <= high, key
    assert interval.miss_rate[0] < interval.miss_rate[1]
    for step in calibrated.plan.steps.values():
        assert step.predicted.interval is not None
        low, high = step.predicted.interval.p99_s
        assert low < step.predicted.p99_s < high
    assert calibrated.prediction.replicates == 40
    assert calibrated.prediction.result is calibrated.result
    assert isinstance(calibrated.warnings, tuple)


def test_predict_reads_the_store_for_any_plan(db: Path, calibrated) -> None:  # type: ignore[no-untyped-def]
    """predict() loads samples itself, for the workflow without cutoffs as for the plan."""
    with Store.open(db, read_only=True) as store:
        waiting = predict(store, workflow_of(calibrated.plan), runs=20_000, replicates=20,
                          replicate_runs=2_000)  # fmt: skip
    planned = calibrated.prediction.miss_rate
    assert waiting.extra_attempts.value == 0.0
    assert waiting.miss_rate.low > planned.high  # cutoffs help beyond the sample's doubt
    assert waiting.plan_prediction().interval is not None


def test_non_idempotent_steps_are_never_repeated(db: Path) -> None:
    """A step marked idempotent: false is never hedged or retried, whatever its tail."""
    plan = load_plan(WORKFLOW)
    steps = dict(plan.steps)
    steps["draft"] = dataclasses.replace(steps["draft"], idempotent=False)
    with Store.open(db, read_only=True) as store:
        found = calibrate(
            store, dataclasses.replace(plan, steps=steps), runs=4000, check_runs=4000, replicates=0
        )
    assert found.plan.steps["draft"].on_cutoff in ("wait", "downgrade", "fail")


def test_thin_bucket_is_refused_with_the_fix(db: Path) -> None:
    """A step whose route has too few calls in its bucket is refused, naming the fix."""
    plan = Plan(
        workflow="thin",
        deadline_s=60.0,
        routes={"openai/gpt-4.1": Route("openai", "gpt-4.1")},
        steps={
            "huge": Step(name="huge", route="openai/gpt-4.1", expected_tokens=Tokens(90_000, 5000))
        },
    )
    with Store.open(db, read_only=True) as store, pytest.raises(ThinSampleError) as err:
        calibrate(store, plan, runs=1000, check_runs=1000, replicates=0)
    message = str(err.value)
    expected = r"step 'huge': route openai/gpt-4.1 has \d+ calls in bucket in 64k\+ / out 2400\+"
    assert re.search(expected + r" \(needs 200\)", message)
    assert "Ingest more logs" in message
    assert "lower min_calls" in message  # the parameter; the CLI spells it --min-calls
    assert "lower --min-calls" in err.value.render(lambda field: "--" + field.replace("_", "-"))


def test_cli_calibrate_writes_the_plan_and_json(db: Path, tmp_path: Path) -> None:
    """`tailkit calibrate --json` writes a loadable plan and prints the policy comparison."""
    out = tmp_path / "plan.yaml"
    result = CliRunner().invoke(
        app,
        ["calibrate", str(WORKFLOW), "--out", str(out), "--db", str(db), "--runs", "3000",
         "--check-runs", "5000", "--deadline", "100", "--budget", "0.03", "--replicates", "10",
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # warnings go to stderr
    assert set(payload["policies"]) == {"none", "retry_p95", "hedge_p95", "plan"}
    plan = load_plan(out)
    assert plan.deadline_s == 100.0
    assert plan.hedge_budget == 0.03
    assert payload["plan"] == yaml.safe_load(out.read_text())
    assert payload["plan"]["predicted"]["interval"]["level"] == 0.95
    miss = payload["prediction"]["miss_rate"]
    assert miss["low"] <= miss["value"] <= miss["high"]
    assert payload["prediction"]["replicates"] == 10
    assert isinstance(payload["warnings"], list)


def test_cli_calibrate_table_shows_the_plans_interval_and_warns(db: Path, tmp_path: Path) -> None:
    """The plan's miss rate shows its interval; a hopeless deadline warns on stderr."""
    out = tmp_path / "plan.yaml"
    result = CliRunner().invoke(
        app,
        ["calibrate", str(WORKFLOW), "--out", str(out), "--db", str(db), "--runs", "2000",
         "--check-runs", "4000", "--replicates", "10", "--deadline", "30"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    plan_row = next(line for line in rows if line.strip("│┃ ").startswith("the plan"))
    # the interval as tailkit.text.percent_span writes it: as many decimals as its top needs
    assert re.search(r"\d+\.\d\d% \(\d+(\.\d+)?–\d+(\.\d+)?%\)", plan_row)
    assert "no cutoffs" in result.stdout
    assert "10 bootstrap replicates of the measured calls" in result.stdout
    assert "Warning: the deadline is out of reach" in result.stderr
    assert "Warning" not in result.stdout
    assert load_plan(out).predicted.interval is not None  # type: ignore[union-attr]


def test_cli_simulate_table(db: Path, tmp_path: Path) -> None:
    """`tailkit simulate` prints one row per policy with miss rate and extra attempts."""
    result = CliRunner().invoke(app, ["simulate", str(WORKFLOW), "--db", str(db), "--runs", "4000"])
    assert result.exit_code == 0, result.output
    for title in ("no cutoffs", "sequential retry at p95", "hedge at p95 everywhere", "the plan"):
        assert title in result.output
    assert "4,000 simulated runs, deadline 90 s" in result.output


def test_cli_errors_name_the_problem(db: Path, tmp_path: Path) -> None:
    """Missing files, bad overrides and thin buckets end in one Error: line, exit 1."""
    runner = CliRunner()
    out = tmp_path / "never.yaml"
    cases = [
        (
            ["calibrate", str(tmp_path / "nope.yaml"), "--out", str(out), "--db", str(db)],
            "nope.yaml",
        ),
        (
            ["calibrate", str(WORKFLOW), "--out", str(out), "--db", str(db), "--budget", "2"],
            "--budget",
        ),
        (["simulate", str(WORKFLOW), "--db", str(db), "--latency", "weibull"], "--latency"),
    ]
    for args, needle in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 1, result.output
        assert result.output.startswith("Error: ")
        assert needle in result.output
        assert not out.exists()


def test_route_sample_is_the_bucket_plus_its_share_of_cut_calls(db: Path) -> None:
    """A step's sample: finished calls of its bucket, plus cut calls in the input bucket's ratio."""
    plan = load_plan(WORKFLOW)
    step = plan.steps["draft"]
    with Store.open(db, read_only=True) as store:
        sample = route_sample(store, plan.routes[step.route], step)
        done, cut_in, done_in = store.fetchone(
            "SELECT count(*) FILTER (status = 'ok' AND output_tokens >= 1200 AND "
            "output_tokens < 2400), count(censored_at_s), count(*) FILTER (status = 'ok') "
            "FROM calls WHERE provider = 'openai' AND model = 'gpt-4.1' "
            "AND input_tokens >= 4000 AND input_tokens < 16000"
        )  # type: ignore[misc]
        median = store.fetchone(
            "SELECT median(total_s) FROM calls WHERE provider = 'openai' AND model = 'gpt-4.1' "
            "AND status = 'ok' AND input_tokens >= 4000 AND input_tokens < 16000 "
            "AND output_tokens >= 1200 AND output_tokens < 2400"
        )[0]  # type: ignore[index]
    assert sample is not None
    assert sample.bucket == "in 4k-16k / out 1200-2400"
    assert sample.calls == done + round(cut_in * done / done_in)
    assert sample.censored == pytest.approx(cut_in / (cut_in + done_in), rel=0.05)
    assert sample.quantile(0.5) == pytest.approx(median, rel=0.02)
    assert sample.quantile(0.999) > 90.0  # cut at the 90 s cap, filled in beyond it


def test_lognormal_source_replays_the_censored_fit(db: Path) -> None:
    """--latency lognormal draws each route from its censoring-aware lognormal fit."""
    plan = load_plan(WORKFLOW)
    with Store.open(db, read_only=True) as store:
        empirical = load_samples(store, plan)
        fitted = load_samples(store, plan, latency="lognormal")
    for key, sample in fitted.items():
        measured = empirical[key]
        assert sample.bucket.endswith("(lognormal fit)")
        assert sample.error_rate == measured.error_rate
        assert sample.calls == measured.calls
        # the grid's quantiles are exp(mu + sigma z): log-symmetric around the median
        p50 = sample.quantile(0.5)
        assert sample.quantile(0.9) / p50 == pytest.approx(p50 / sample.quantile(0.1), rel=1e-3)
