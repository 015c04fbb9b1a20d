"""
The drift loop end to end: a service's ledger, `refresh`, the plan follower, the new plan run.

An executor runs a two-step workflow over HTTP against `tailkit serve` on loopback (time
scaled 20 times faster), writing its ledger. ``ask`` may go first to ``p/m1`` or ``q/m2``;
``tag`` runs on ``q/m2``. The store holds three-day-old calls from when ``p/m1`` answered in
2 s and ``q/m2`` in 3 s, and the plan calibrated on them sends ``ask`` to ``p/m1``. Then
``p/m1`` slows down to 6 s: `refresh` finds the drift in the ledger, recalibrates on the
recent calls and rewrites the plan; the service's follower swaps it in, and the next runs send
``ask`` to ``q/m2``.
"""

from __future__ import annotations

import asyncio
import json
import math

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from tailkit.adapters.openai import chat_attempt, shared_client
from tailkit.calibration import calibrate
from tailkit.config import dump_plan, load_plan, parse_plan
from tailkit.executor import Executor, JsonlSink, Ledger, follow_plan
from tailkit.ingest import ingest_paths
from tailkit.refresh import KEPT, WRITTEN, refresh
from tailkit.serve import ModelProfile, ServeConfig, Server
from tailkit.store import Store


WORKFLOW = """\
tailkit_plan: 1
workflow: drift
deadline_s: 12
hedge_budget: 0.05
routes:
  p/m1: {provider: p, model: m1}
  q/m2: {provider: q, model: m2}
steps:
  ask:
    route: p/m1
    candidates: [p/m1, q/m2]
    idempotent: false
  tag:
    depends_on: [ask]
    route: q/m2
    idempotent: false
"""
SCALE = 0.2  # real seconds per plan second: a loaded machine's jitter stays small
MESSAGES = [{"role": "user", "content": "go"}]
QUICK: dict[str, Any] = {"runs": 2000, "check_runs": 4000, "replicates": 0, "min_calls": 40}
# the loop pages on a 3x slowdown, not on the jitter of a loaded test machine
LOOSE: dict[str, Any] = {**QUICK, "tolerance": 0.5}


def _model(median_s: float) -> ModelProfile:
    """A lognormal TTFT and ten quick tokens after it."""
    return ModelProfile(
        ttft_median_s=median_s, ttft_sigma=0.3, tokens_per_s=1000.0, gen_sigma=0.0,
        output_tokens=10,
    )  # fmt: skip


def _history(path: Path) -> Path:
    """400 calls of each route from three days ago, as the server answered then."""
    rng = np.random.default_rng(5)
    then = datetime.now(UTC) - timedelta(days=3)
    rows = []
    for provider, model, median in (("p", "m1", 2.0), ("q", "m2", 3.0)):
        for i in range(400):
            ttft = median * math.exp(0.3 * rng.standard_normal())
            start = (then + timedelta(seconds=20 * i)).isoformat().replace("+00:00", "Z")
            row = {"call_id": f"{model}-{i}", "provider": provider, "model": model,
                   "started_at": start, "ttft_s": round(ttft, 4),
                   "total_s": round(ttft + 0.01, 4), "status": "ok"}  # fmt: skip
            rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


async def _runs(executor: Executor, url: str, prefix: str, n: int, *, at_once: int = 20) -> None:
    """``n`` workflow runs, ``at_once`` in flight, with run ids ``prefix-0000`` on."""
    await shared_client().get(f"{url}/models")  # the client made, httpx loaded: not a latency
    call = chat_attempt(url, MESSAGES, stream=True)
    for first in range(0, n, at_once):
        await asyncio.gather(
            *(
                executor.run({"ask": call, "tag": call}, run_id=f"{prefix}-{i:04d}")
                for i in range(first, min(first + at_once, n))
            )
        )


def _first_routes(ledger: Path, prefix: str) -> set[str]:
    """The routes ``ask``'s first attempts went to in the runs whose ids start with ``prefix``."""
    lines = [json.loads(line) for line in ledger.read_text("utf-8").splitlines()]
    return {
        f"{x['provider']}/{x['model']}"
        for x in lines
        if x["step"] == "ask" and x["attempt"] == 0 and x["run_id"].startswith(prefix)
    }


def test_a_slower_provider_is_found_recalibrated_and_swapped_in(tmp_path: Path) -> None:
    """Check holds, p/m1 slows 3x, refresh rewrites the plan, the follower runs q/m2 first."""
    db, plan_path = tmp_path / "calls.duckdb", tmp_path / "plan.yaml"
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    with Store.open(db) as store:
        assert ingest_paths(store, [_history(tmp_path / "old.jsonl")]).ok
        found = calibrate(store, parse_plan(WORKFLOW), seed=1, **QUICK)
    plan_path.write_text(dump_plan(found.plan), encoding="utf-8")
    assert "p/m1" == found.plan.steps["ask"].route
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    fast = ServeConfig(models={"m1": _model(2.0), "m2": _model(3.0)}, time_scale=SCALE, seed=1)
    slow = ServeConfig(models={"m1": _model(6.0), "m2": _model(3.0)}, time_scale=SCALE, seed=2)

    async def yesterday() -> None:
        """The service as it was: the providers the plan was calibrated on."""
        async with (
            Server(fast) as server,
            Executor(load_plan(plan_path), ledger=Ledger(JsonlSink(before)),
                     time_scale=SCALE) as executor,
        ):  # fmt: skip
            await _runs(executor, server.url, "before", 40)

    asyncio.run(yesterday())
    held = refresh(plan_path, workflow, [before], db=db, **LOOSE)
    assert (KEPT, 0) == (held.outcome, held.exit_code), held.summary()

    async def today() -> tuple[Any, int]:
        """p/m1 slows down; refresh runs beside the service, which follows the plan file."""
        async with (
            Server(slow) as server,
            Executor(load_plan(plan_path), ledger=Ledger(JsonlSink(after)),
                     time_scale=SCALE) as executor,
            follow_plan(executor, plan_path, every_s=0.02) as follower,
        ):  # fmt: skip
            await _runs(executor, server.url, "slow", 60)
            result = await asyncio.to_thread(refresh, plan_path, workflow, [after], db=db, **LOOSE)
            for _ in range(500):  # the follower's next poll swaps the new plan in
                if follower.reloads:
                    break
                await asyncio.sleep(0.02)
            assert executor.profile_plan.steps["ask"].route == "q/m2"
            await _runs(executor, server.url, "new", 20)
            return result, follower.reloads

    result, reloads = asyncio.run(today())

    assert (WRITTEN, 1, 1) == (result.outcome, result.exit_code, reloads), result.summary()
    assert "ask" in {line.scope for line in result.check.drifted}
    assert "q/m2" == load_plan(plan_path).steps["ask"].route
    assert "p/m1" == load_plan(tmp_path / "plan.yaml.prev").steps["ask"].route
    assert {"p/m1"} == _first_routes(before, "before") == _first_routes(after, "slow")
    assert {"q/m2"} == _first_routes(after, "new")
