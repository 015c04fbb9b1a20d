"""
Would a fresh attempt escape the tail? Seeded scenarios with a known answer.

Each scenario runs on several fixed seeds; the verdict must be right on every one. The error
rates over many seeds (a few percent at most) are measured by benchmarks/coverage.py and
reported in reports/statistics.md, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml

from typer.testing import CliRunner

from tailkit.calibration import calibrate
from tailkit.cli import app
from tailkit.config import load_plan
from tailkit.fit import tail_kind
from tailkit.fit.lowlevel import hedge_evidence
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tailkit.tails import TableQuery, tail_report


ROOT = Path(__file__).resolve().parent.parent
LLMPERF = ROOT / "data_samples" / "llmperf-leaderboard" / "raw_data"
SEEDS = range(6)


def _work(rng: np.random.Generator, n: int = 2000, stalls: float = 0.0) -> dict[str, Any]:
    """
    Latency driven by the answer's length; optionally independent TTFT stalls on top.
    """
    tokens = np.maximum(1, rng.lognormal(np.log(500), 0.8, n)).round()
    latency = 0.5 + tokens / 50 * rng.lognormal(0, 0.1, n)
    if stalls:
        latency = latency + np.where(rng.random(n) < stalls, rng.uniform(3, 30, n), 0.0)
    return {
        "latency_s": latency,
        "output_tokens": tokens,
        "input_tokens": rng.integers(100, 4000, n),
    }


def _cold_starts(rng: np.random.Generator) -> dict[str, Any]:
    """
    Like llmperf's replicate 70b: 138 calls around 12.4 s, 7 cold starts at 46-82 s.
    """
    body = rng.lognormal(np.log(12.4), 0.15, 138)
    latency = np.concatenate([body, rng.uniform(46, 82, 7)])
    return {"latency_s": latency, "output_tokens": rng.integers(100, 129, 145)}


@pytest.mark.parametrize("seed", SEEDS)
def test_work_driven_latency_is_work(seed: int) -> None:
    verdict = tail_kind(**_work(np.random.default_rng(seed)))

    assert "work" == verdict.kind, verdict.sentence
    assert verdict.transient is False
    assert verdict.size is not None
    assert verdict.size.r2 > 0.9
    assert verdict.tail is not None
    assert verdict.tail.share_interval.high < 0.01


@pytest.mark.parametrize("seed", SEEDS)
def test_a_small_sample_of_work_is_cant_tell_not_a_claim(seed: int) -> None:
    verdict = tail_kind(**_work(np.random.default_rng(seed), n=300))

    assert "unknown" == verdict.kind, verdict.sentence
    assert verdict.sentence.startswith("can't tell")
    assert "300 calls cannot rule out" in verdict.sentence
    assert " calls with no slow outlier would)" in verdict.sentence or (
        " calls with slow outliers as rare as these would)" in verdict.sentence
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_work_plus_independent_stalls_is_transient_or_mixed(seed: int) -> None:
    verdict = tail_kind(**_work(np.random.default_rng(seed), stalls=0.03))

    assert verdict.kind in ("transient", "mixed"), verdict.sentence
    assert verdict.tail is not None
    assert verdict.tail.share_interval.low <= 0.03 <= verdict.tail.share_interval.high + 0.005


@pytest.mark.parametrize("seed", SEEDS)
def test_cold_starts_are_transient(seed: int) -> None:
    verdict = tail_kind(**_cold_starts(np.random.default_rng(seed)))

    assert "transient" == verdict.kind, verdict.sentence
    assert verdict.tail is not None
    assert verdict.tail.scale > 3


def test_replicate_70b_cold_starts_are_transient(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [LLMPERF / "individual" / "replicate_70b.json"])
        report = tail_report(store, TableQuery(by=("provider", "model"), bucket=("output",)))

    row = report.verdicts.row(0, named=True)
    assert "transient" == row["tail_kind"], row["verdict"]
    assert report.table["transient"].to_list() == [True] * len(report.table)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tokens", [True, False])
def test_pure_lognormal_is_not_transient(seed: int, tokens: bool) -> None:
    rng = np.random.default_rng(seed)
    latency = rng.lognormal(np.log(5), 0.5, 2000)
    verdict = tail_kind(latency, output_tokens=rng.integers(50, 1000, 2000) if tokens else None)

    assert "unknown" == verdict.kind, verdict.sentence
    assert "needs repeat attempts" in verdict.sentence


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fast_minority_is_not_a_transient_tail(seed: int) -> None:
    rng = np.random.default_rng(seed)
    latency = rng.lognormal(np.log(5), 0.3, 2000)
    latency[rng.random(2000) < 0.02] /= 10  # cache hits
    verdict = tail_kind(latency, output_tokens=rng.integers(50, 1000, 2000))

    assert verdict.kind not in {"transient", "mixed"}, verdict.sentence


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_spells_in_time_are_transient(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 6000
    started = np.sort(rng.uniform(0, 6 * 3600, n))
    latency = rng.lognormal(np.log(5), 0.3, n)
    spell = (started % 3600) < 120  # two minutes an hour, every call 1.8x slower
    latency[spell] *= 1.8
    verdict = tail_kind(latency, output_tokens=rng.integers(50, 1000, n), started_at_s=started)

    assert "transient" == verdict.kind, verdict.sentence
    assert verdict.clustering is not None
    assert verdict.clustering.clustered


def test_repeat_attempts_settle_what_latencies_cannot() -> None:
    rng = np.random.default_rng(0)
    latency = rng.lognormal(np.log(5), 0.5, 2000)

    escaped = tail_kind(latency, hedges=hedge_evidence(60, 44))
    stuck = tail_kind(latency, hedges=hedge_evidence(60, 8))
    few = tail_kind(latency, hedges=hedge_evidence(10, 9))

    assert ("transient", "work", "unknown") == (escaped.kind, stuck.kind, few.kind)
    assert "44 of 60 fresh attempts" in escaped.sentence
    contradicted = tail_kind(**_work(np.random.default_rng(1)), hedges=hedge_evidence(60, 44))
    assert "mixed" == contradicted.kind, contradicted.sentence


def test_too_few_calls_is_cant_tell() -> None:
    verdict = tail_kind(np.linspace(1.0, 2.0, 30))

    assert ("unknown", None) == (verdict.kind, verdict.transient)
    assert "too few calls (30" in verdict.sentence


def _calls_parquet(path: Path, rows: dict[str, Any]) -> Path:
    n = len(rows["total_s"])
    frame = pl.DataFrame({
        "call_id": [f"{path.stem}-{i}" for i in range(n)],
        "run_id": rows.get("run_id", [f"{path.stem}-r{i}" for i in range(n)]),
        "step": rows.get("step", ["answer"] * n),
        "attempt": rows.get("attempt", [0] * n),
        "role": rows.get("role", ["primary"] * n),
        "provider": rows["provider"],
        "model": rows.get("model", ["m"] * n),
        "started_at": pl.Series(rows.get("started_s", np.arange(n) * 7.0) * 1e6).cast(
            pl.Datetime("us", "UTC")
        ),
        "total_s": pl.Series(np.asarray(rows["total_s"], dtype=float)).fill_nan(None),
        "ttft_s": pl.Series(np.asarray(rows["total_s"], dtype=float) * 0.2).fill_nan(None),
        "input_tokens": rows.get("input_tokens", [1000] * n),
        "output_tokens": np.asarray(rows["output_tokens"], dtype=np.int64),
        "status": rows.get("status", ["ok"] * n),
        "censored_at_s": pl.Series(rows.get("censored_at_s", [None] * n), dtype=pl.Float64),
    })  # fmt: skip
    frame.write_parquet(path)
    return path


def test_stats_json_has_the_kind_and_its_evidence(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    work = _work(rng)
    stalls = _work(rng, stalls=0.04)
    files = [
        _calls_parquet(tmp_path / "work.parquet", {
            "provider": ["w"] * 2000, "total_s": work["latency_s"],
            "output_tokens": work["output_tokens"],
        }),
        _calls_parquet(tmp_path / "stalls.parquet", {
            "provider": ["s"] * 2000, "total_s": stalls["latency_s"],
            "output_tokens": stalls["output_tokens"],
        }),
    ]  # fmt: skip
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, files)

    result = CliRunner().invoke(app, ["stats", "--db", str(db), "--json"])

    assert 0 == result.exit_code, result.output
    import json

    doc = json.loads(result.stdout)
    kinds = {v["provider"]: v for v in doc["verdicts"]}
    assert "work" == kinds["w"]["tail_kind"]
    assert kinds["s"]["tail_kind"] in ("transient", "mixed")
    for key in ("residual_share", "residual_share_lo", "residual_share_hi", "size_r2",
                "clustering_p", "hedge_pairs", "verdict"):  # fmt: skip
        assert key in kinds["w"], key
    rows = {r["provider"]: r["transient"] for r in doc["table"] if r["n_ok"] >= 2}
    assert {False} == {v for p, v in rows.items() if p == "w"}


def test_calibrate_plans_no_fresh_attempt_on_a_work_driven_route(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    work = _work(rng, n=3000)
    other = _work(rng, n=3000)
    parquet = _calls_parquet(tmp_path / "calls.parquet", {
        "provider": ["a"] * 3000 + ["b"] * 3000,
        "total_s": np.concatenate([work["latency_s"], other["latency_s"]]),
        "output_tokens": np.concatenate([work["output_tokens"], other["output_tokens"]]),
    })  # fmt: skip
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(yaml.safe_dump({
        "tailkit_plan": 1, "workflow": "one", "deadline_s": 40, "hedge_budget": 0.1,
        "routes": {"a/m": {"provider": "a", "model": "m"}, "b/m": {"provider": "b", "model": "m"}},
        "steps": {"answer": {"route": "a/m", "expected_tokens": {"input": 1000}}},
    }))  # fmt: skip
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [parquet])
        found = calibrate(store, load_plan(workflow), runs=2000, check_runs=4000, replicates=0)

    assert {"answer": "work"} == found.tail_kinds
    assert found.plan.steps["answer"].on_cutoff not in ("hedge", "retry")
    assert any("work-driven" in w for w in found.warnings)


@pytest.mark.parametrize("seed", SEEDS)
def test_first_token_stalls_are_seen_in_the_ttft(seed: int) -> None:
    """
    Stalls of 2-5 s before the first token of ~10 s calls show in the TTFT.

    They are modest against the whole call, plain against a 0.5 s TTFT. The prompts' sizes
    are known (a first-token tail is measured against them: without, a long prompt waits too).
    """
    rng = np.random.default_rng(seed)
    tokens = np.maximum(1, rng.lognormal(np.log(500), 0.8, 2000)).round()
    ttft = 0.5 * rng.lognormal(0, 0.3, 2000) + np.where(
        rng.random(2000) < 0.03, rng.uniform(2, 5, 2000), 0.0
    )
    latency = ttft + tokens / 50 * rng.lognormal(0, 0.1, 2000)
    prompts = rng.integers(100, 4000, 2000)
    verdict = tail_kind(latency, output_tokens=tokens, ttft_s=ttft, input_tokens=prompts)

    assert verdict.kind in {"transient", "mixed"}, verdict.sentence
    assert verdict.first_token is not None
    assert verdict.first_token.present
    assert "first token" in verdict.sentence


def test_big_calls_cut_at_a_cap_are_not_a_transient_tail() -> None:
    """
    A 30 s cap cuts the biggest calls of work-driven latency, leaving no output count.
    """
    rng = np.random.default_rng(0)
    work = _work(rng, n=3000)
    cut = work["latency_s"] > 30
    verdict = tail_kind(
        np.where(cut, np.nan, work["latency_s"]),
        censored_at_s=np.where(cut, 30.0, np.nan),
        output_tokens=np.where(cut, np.nan, work["output_tokens"]),
    )

    assert "unknown" == verdict.kind, verdict.sentence
    assert verdict.n_unsized == cut.sum()
    assert "cut with no size to compare" in verdict.sentence


def test_a_negligible_excess_at_large_n_is_still_work() -> None:
    """
    At 200,000 calls a 0.04 % excess beyond three spreads is significant, but not material.
    """
    rng = np.random.default_rng(4)
    n = 200_000
    tokens = np.round(rng.lognormal(np.log(500), 0.8, n))
    ttft = 0.5 * rng.lognormal(0, 0.3, n)
    latency = ttft + tokens / 50 * rng.lognormal(0, 0.1, n)

    verdict = tail_kind(latency, output_tokens=tokens, ttft_s=ttft)

    assert "work" == verdict.kind, verdict.sentence


@pytest.mark.parametrize(("hedge_scale", "kind"), [(1.0, "transient"), (4.0, "work")])
def test_hedges_in_the_store_settle_the_verdict(
    tmp_path: Path, hedge_scale: float, kind: str
) -> None:
    """
    Slow calls on route p, cut and hedged on route q: fast hedges say transient, slow ones work.

    Latency alone cannot tell (a lognormal with unrelated token counts); the hedges can. Each
    hedge shares its first attempt's run and step, as the executor's attempts do.
    """
    rng = np.random.default_rng(11)
    first = rng.lognormal(np.log(5), 0.5, 2000)
    reference = rng.lognormal(np.log(5), 0.5, 500)
    hedged = rng.lognormal(np.log(5), 0.5, 80) * hedge_scale
    n = 2000 + 500 + 80 + 80
    runs = [f"p{i}" for i in range(2000)] + [f"q{i}" for i in range(500)]
    runs += [f"h{i}" for i in range(80)] * 2  # 80 cut first attempts and their hedges
    rows = {
        "run_id": runs,
        "provider": ["p"] * 2000 + ["q"] * 500 + ["p"] * 80 + ["q"] * 80,
        "attempt": [0] * 2580 + [1] * 80,
        "role": ["primary"] * 2580 + ["hedge"] * 80,
        "total_s": np.concatenate([first, reference, np.full(80, np.nan), hedged]),
        "censored_at_s": [None] * 2500 + [20.0] * 80 + [None] * 80,
        "status": ["ok"] * 2500 + ["cancelled"] * 80 + ["ok"] * 80,
        "output_tokens": rng.integers(50, 1000, n),
        "started_s": rng.permutation(n) * 7.0,  # slow calls spread over the day, not a spell
    }
    parquet = _calls_parquet(tmp_path / "calls.parquet", rows)
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [parquet])
        verdicts = tail_report(store, TableQuery(by=("provider",), bucket=())).verdicts

    row = verdicts.filter(pl.col("provider") == "p").row(0, named=True)
    assert 80 == row["hedge_pairs"]
    assert kind == row["tail_kind"], row["verdict"]
    assert "fresh attempts of slow calls finished fast" in row["verdict"]
