"""
What the replay serves to repeat attempts: the same job (job keys) or the same size (none).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from scipy import stats

from tailkit.config import Plan, parse_plan
from tailkit.ingest import ingest_paths
from tailkit.replay._aligned import _nearest_size, _repeats
from tailkit.replay._pool import Calls
from tailkit.replay._tables import ServedModels, served_models
from tailkit.serve import ServeConfig, Server, serve_outcomes
from tailkit.serve.lowlevel import dump_outcomes
from tailkit.simulation import load_samples
from tailkit.store import Store

from .test_serve import CHAT, PROMPT, read_reply, request_bytes


PLAN = """
tailkit_plan: 1
workflow: pair
deadline_s: 60
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  ask:
    route: a/m
    expected_tokens: {input: 2000}
    hedge_route: b/m
    on_cutoff: hedge
    cutoff_s: 8
"""
SCALE = 1e-5  # real seconds per profile second: a 5 s call is served in 50 microseconds
JOBS = 500


@dataclass(frozen=True)
class Call:
    """One measured call of the test's log."""

    job: int
    route: str
    total_s: float
    tokens: int
    start_s: float


def _log(path: Path, *, rho: float, keys: bool, seed: int) -> list[Call]:
    """
    JOBS jobs on a/m and b/m: log latency shares ``rho`` of its variance with the job.

    Output tokens follow the job loosely (so size says something, not everything); a/m's calls
    are a minute apart, b/m's an hour later (a benchmark runs routes one after another).
    """
    rng = np.random.default_rng(seed)
    job = rng.standard_normal(JOBS)
    tokens = np.round(300 * np.exp(0.4 * (0.7 * job + 0.7 * rng.standard_normal(JOBS))))
    calls: list[Call] = []
    with path.open("w", encoding="utf-8") as out:
        for k, (route, base) in enumerate((("a/m", 3.0), ("b/m", 4.0))):
            own = rng.standard_normal(JOBS)
            latency = base * np.exp(0.5 * (math.sqrt(rho) * job + math.sqrt(1 - rho) * own))
            for j in range(JOBS):
                provider = route.split("/")[0]
                start = 1_767_225_600 + 3600 * k + 60 * j
                call = Call(j, route, round(float(latency[j]), 6), int(tokens[j]), start)
                row = {
                    "call_id": f"{provider}-{j}", "provider": provider, "model": "m",
                    "input_tokens": 2000, "output_tokens": call.tokens, "status": "ok",
                    "total_s": call.total_s, "ttft_s": round(call.total_s / 4, 6),
                    "started_at": start,
                }  # fmt: skip
                if keys:
                    row["job_key"] = f"job-{j}"
                out.write(json.dumps(row) + "\n")
                calls.append(call)
    return calls


def _served(tmp_path: Path, *, rho: float, keys: bool, seed: int = 0) -> tuple[ServedModels, Plan]:
    """The replay's aligned tables of the test log's store."""
    _log(tmp_path / "calls.jsonl", rho=rho, keys=keys, seed=seed)
    plan = parse_plan(PLAN)
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [tmp_path / "calls.jsonl"]).ok
        samples = load_samples(store, plan, min_calls=100)
        return served_models(plan, samples, store=store, seed=seed), plan


def _config(tmp_path: Path, served: ServedModels) -> ServeConfig:
    """The served tables through the outcomes file, as ``tailkit replay`` starts its server."""
    path = tmp_path / "outcomes.json"
    path.write_text(dump_outcomes(served.tables, time_scale=SCALE, seed=7), "utf-8")
    return serve_outcomes(path)


def _ask(config: ServeConfig, requests: list[tuple[str, str]]) -> list[float]:
    """
    Send (model, key) requests one after another; the profile seconds each was served.
    """

    async def main() -> list[float]:
        async with Server(config) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for model, key in requests:  # one after another, on one kept-alive connection
                body = {"model": model, "messages": PROMPT, "max_tokens": 5}
                writer.write(
                    request_bytes("POST", CHAT, body, {"Idempotency-Key": key} if key else {})
                )
                assert 200 == (await read_reply(reader)).status
            writer.close()
            await writer.wait_closed()
            return [float(r.attrs["intended_total_s"]) / SCALE for r in server.records]

    return asyncio.run(main())


def _which(calls: list[Call], route: str, served_s: Iterator[float] | list[float]) -> list[Call]:
    """The measured call of ``route`` each served latency is (totals are distinct)."""
    mine = sorted((c for c in calls if c.route == route), key=lambda c: c.total_s)
    totals = np.asarray([c.total_s for c in mine])
    return [mine[int(np.argmin(np.abs(totals - s)))] for s in served_s]


def test_a_hedge_with_the_same_key_gets_the_same_jobs_call(tmp_path: Path) -> None:
    """With job keys, a request on b/m with a's key is answered with the same job's call."""
    calls = _log(tmp_path / "log.jsonl", rho=0.5, keys=True, seed=1)
    served, _ = _served(tmp_path, rho=0.5, keys=True, seed=1)
    assert served.basis["ask"].startswith(f"job keys: {JOBS} jobs of a/m in the bucket")
    runs = [f"run-{i}" for i in range(60)]
    got = _ask(_config(tmp_path, served), [(m, k) for k in runs for m in ("a/m @ask", "b/m @ask")])
    firsts = _which(calls, "a/m", got[0::2])
    hedges = _which(calls, "b/m", got[1::2])
    assert [c.job for c in firsts] == [c.job for c in hedges]
    assert len({c.job for c in firsts}) > 40  # each key drew its own job


@pytest.mark.parametrize("rho", [0.85, 0.0])
def test_served_pairs_have_the_datas_rank_correlation(tmp_path: Path, rho: float) -> None:
    """Served (first, hedge) pairs are rank-correlated as the jobs' calls are, and only as much."""
    calls = _log(tmp_path / "log.jsonl", rho=rho, keys=True, seed=2)
    by_job = {(c.route, c.job): c.total_s for c in calls}
    data = stats.spearmanr(
        [by_job[("a/m", j)] for j in range(JOBS)], [by_job[("b/m", j)] for j in range(JOBS)]
    ).statistic
    served, _ = _served(tmp_path, rho=rho, keys=True, seed=2)
    runs = [f"run-{i}" for i in range(800)]
    got = _ask(_config(tmp_path, served), [(m, k) for k in runs for m in ("a/m @ask", "b/m @ask")])
    pairs = stats.spearmanr(got[0::2], got[1::2]).statistic
    # 800 pairs drawn from 500 jobs: the served correlation's standard deviation is about 0.035
    assert abs(pairs - data) < 0.1, (pairs, data)


def test_a_retry_without_a_measured_repeat_keeps_the_jobs_work(tmp_path: Path) -> None:
    """One call per job and route: a retry on a/m is another call, at the job's rank on b/m."""
    calls = _log(tmp_path / "log.jsonl", rho=0.85, keys=True, seed=5)
    by_job = {(c.route, c.job): c.total_s for c in calls}
    data = stats.spearmanr(
        [by_job[("a/m", j)] for j in range(JOBS)], [by_job[("b/m", j)] for j in range(JOBS)]
    ).statistic
    served, _ = _served(tmp_path, rho=0.85, keys=True, seed=5)
    runs = [f"run-{i}" for i in range(800)]
    got = _ask(_config(tmp_path, served), [(m, k) for k in runs for m in ("a/m @ask",) * 2])
    firsts, retries = _which(calls, "a/m", got[0::2]), _which(calls, "a/m", got[1::2])
    assert all(f.job != r.job for f, r in zip(firsts, retries, strict=True))
    assert abs(stats.spearmanr(got[0::2], got[1::2]).statistic - data) < 0.1


def test_without_keys_pairs_are_independent(tmp_path: Path) -> None:
    """Requests that bring no key are independent draws, whatever the data share."""
    served, _ = _served(tmp_path, rho=0.85, keys=True, seed=3)
    got = _ask(
        _config(tmp_path, served), [(m, "") for _ in range(300) for m in ("a/m @ask", "b/m @ask")]
    )
    assert abs(stats.spearmanr(got[0::2], got[1::2]).statistic) < 0.15


def test_without_job_keys_a_repeat_gets_a_call_of_the_same_size(tmp_path: Path) -> None:
    """No job keys: a hedge gets a call of the same size rank, a retry another one nearby."""
    calls = _log(tmp_path / "log.jsonl", rho=0.5, keys=False, seed=4)
    served, _ = _served(tmp_path, rho=0.5, keys=False, seed=4)
    assert served.basis["ask"].startswith("no job keys: attempts aligned by output size")
    runs = [f"run-{i}" for i in range(150)]
    models = ("a/m @ask", "b/m @ask", "a/m @ask")
    got = _ask(_config(tmp_path, served), [(m, k) for k in runs for m in models])
    firsts, hedges = _which(calls, "a/m", got[0::3]), _which(calls, "b/m", got[1::3])
    retries = _which(calls, "a/m", got[2::3])
    tokens = {
        route: np.sort([c.tokens for c in calls if c.route == route]) for route in ("a/m", "b/m")
    }

    def rank(call: Call) -> float:
        sizes = tokens[call.route]
        return float(
            np.searchsorted(sizes, call.tokens) + np.searchsorted(sizes, call.tokens, "right")
        ) / (2 * sizes.size)

    assert max(abs(rank(f) - rank(h)) for f, h in zip(firsts, hedges, strict=True)) < 0.02
    assert all(f.job != r.job for f, r in zip(firsts, retries, strict=True))  # another call
    assert all(abs(f.start_s - r.start_s) <= 300 for f, r in zip(firsts, retries, strict=True))
    size_gap = [abs(math.log(f.tokens / r.tokens)) for f, r in zip(firsts, retries, strict=True)]
    unrelated = [abs(math.log(f.tokens / h.tokens)) for f, h in itertools.pairwise(firsts)]
    assert np.median(size_gap) < np.median(unrelated) / 3


def _calls(tokens: list[float], start_s: list[float] | None = None) -> Calls:
    """Finished calls of the given sizes (and starts), latency = size / 100."""
    n = len(tokens)
    starts = start_s if start_s is not None else [None] * n
    return Calls.of([
        (f"c{i}", None, 0, starts[i], "o", tokens[i] / 100, None, None, tokens[i])
        for i in range(n)
    ])  # fmt: skip


def test_without_start_times_a_retry_gets_another_call_of_the_same_size() -> None:
    """No start times: a retry's call is a different call, next to it in size."""
    sizes = [float(v) for v in np.random.default_rng(5).permutation(np.repeat([100, 200, 400], 20))]
    repeats = _repeats(_calls(sizes), np.random.default_rng(0))
    assert all(r != i for i, r in enumerate(repeats))
    assert sum(sizes[r] == sizes[i] for i, r in enumerate(repeats)) >= len(sizes) - 4


def test_a_retry_shares_the_moment_before_the_size() -> None:
    """With start times, a retry's call started within the window; the nearest size there."""
    sizes = [100.0, 400.0, 110.0, 100.0]
    repeats = _repeats(_calls(sizes, [0.0, 10.0, 20.0, 5000.0]), np.random.default_rng(0))
    assert 2 == repeats[0]  # 110 tokens 20 s later, not 100 tokens 83 minutes later
    assert repeats[3] != 3


def test_a_job_missing_on_a_route_gets_its_call_of_the_nearest_size() -> None:
    """The nearest output size among the route's finished calls; random where unknown."""
    pool = _calls([50.0, 300.0, 900.0])
    picked = _nearest_size(pool, np.array([280.0, 1000.0, 10.0, np.nan]), np.random.default_rng(1))
    assert [1, 2, 0] == picked[:3].tolist()
    assert 0 <= picked[3] < 3
