"""
One hedge budget across worker processes: N real processes spend what the fleet configured.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import subprocess
import sys

from pathlib import Path

import pytest

from tailkit.config import parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import Attempt, Executor, HedgeBudget, Ledger
from tests._fakeloop import run


RATIO = 0.05
PLAN = f"""\
tailkit_plan: 1
workflow: fleet
deadline_s: 60
hedge_budget: {RATIO}
routes:
  a/m: {{provider: a, model: m}}
  b/m: {{provider: b, model: m}}
steps:
  s:
    route: a/m
    hedge_route: b/m
    signal: total
    cutoff_s: 1.0
    on_cutoff: hedge
"""


async def _serve(firsts: int, wave: int) -> tuple[int, int]:
    """
    One worker's traffic: ``firsts`` calls in waves of ``wave``, every one slow enough to hedge.

    Returns (first attempts, extra attempts) from the ledger's count.
    """
    ledger = Ledger()
    executor = Executor(parse_plan(PLAN), ledger=ledger, seed=0)  # its own budget, as in production

    async def call(a: Attempt) -> str:
        await asyncio.sleep(10.0 if a.role == "primary" else 0.1)  # the primary passes its cutoff
        return a.role

    for start in range(0, firsts, wave):
        calls = range(start, min(start + wave, firsts))
        await asyncio.gather(*(executor.run_step("s", call) for _ in calls))
    await executor.aclose()
    attempts = ledger.counts()["attempts"]
    return firsts, attempts - firsts


def worker(workers: str, firsts: int, wave: int) -> tuple[int, int]:
    """
    A worker process as gunicorn starts it: ``TAILKIT_WORKERS`` set, then its own executor.
    """
    os.environ["TAILKIT_WORKERS"] = workers
    os.environ.pop("WEB_CONCURRENCY", None)
    return run(_serve(firsts, wave))


def _fleet(processes: int, firsts: int, wave: int = 50) -> tuple[int, int]:
    context = multiprocessing.get_context("spawn")  # no fork of a threaded test process
    with context.Pool(processes) as pool:  # one process per worker, as a server runs them
        counts = pool.starmap(worker, [(str(processes), firsts, wave)] * processes)
    return sum(f for f, _ in counts), sum(e for _, e in counts)


def _single_process_grants(firsts: int) -> int:
    """What one process seeing all ``firsts`` grants when every call asks (the fleet's bound)."""
    budget = HedgeBudget(RATIO, reserve=0.0, processes=1)
    account = budget.open(firsts)
    return sum(budget.try_extra(account) for _ in range(firsts))


@pytest.mark.slow
def test_sixteen_workers_spend_the_fleets_budget_within_a_point() -> None:
    """16 worker processes at 400 calls each, all hedging: the fleet's extra share is 5 % ± 1."""
    processes, per_process = 16, 400
    firsts, extras = _fleet(processes, per_process)
    share = extras / firsts

    assert firsts == processes * per_process
    assert abs(share - RATIO) <= 0.01, f"fleet extra share {share:.2%}"
    # never more than one process serving the whole fleet's traffic would grant (375: 5 % of
    # 6,400, 3 sigmas, 2)
    assert extras <= _single_process_grants(firsts)


def test_one_worker_reads_its_share_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TAILKIT_WORKERS, else WEB_CONCURRENCY, sets the processes of the executor's own budget."""
    plan = parse_plan(PLAN)
    monkeypatch.delenv("TAILKIT_WORKERS", raising=False)
    monkeypatch.setenv("WEB_CONCURRENCY", "4")
    assert 4 == Executor(plan).shared.budget.processes
    monkeypatch.setenv("TAILKIT_WORKERS", "16")
    assert 16 == Executor(plan).shared.budget.processes
    assert 2 == HedgeBudget(RATIO, processes=2).processes  # the parameter wins
    monkeypatch.setenv("TAILKIT_WORKERS", "sixteen")
    with pytest.raises(
        ConfigError, match=r"TAILKIT_WORKERS must be a positive integer .*'sixteen'"
    ):
        HedgeBudget(RATIO)
    with pytest.raises(ConfigError, match="processes must be a positive integer"):
        HedgeBudget(RATIO, processes=0)


@pytest.mark.parametrize("processes", [1, 4, 16])
def test_a_worker_grants_its_share_of_the_fleets_rule(processes: int) -> None:
    """One of N workers at f calls grants the fleet's rule at N*f, divided by N, rounded down."""
    for per_process in (25, 400, 1000):
        budget = HedgeBudget(RATIO, reserve=0.0, processes=processes)
        account = budget.open(per_process)
        granted = sum(budget.try_extra(account) for _ in range(per_process))
        fleet = processes * per_process
        bound = RATIO * fleet + 3 * math.sqrt(RATIO * fleet) + 2

        assert granted == math.floor(bound / processes)


def test_the_window_is_the_fleets() -> None:
    """Each of 4 workers remembers a quarter of the fleet's window_firsts of closed runs."""
    budget = HedgeBudget(RATIO, window_firsts=100, processes=4)
    for _ in range(30):
        budget.close(budget.open(1))

    assert 25 == budget.firsts


def _uneven(loads: list[int]) -> int:
    total = 0
    for load in loads:
        budget = HedgeBudget(RATIO, reserve=0.0, processes=len(loads))
        account = budget.open(load)
        total += sum(budget.try_extra(account) for _ in range(load))
    return total


def test_unevenly_loaded_workers_grant_no_more_than_the_fleet() -> None:
    """Workers with uneven traffic grant at most what one process with all of it would."""
    loads = [50, 100, 200, 400, 800, 1600, 3200, 50]

    assert _uneven(loads) <= _single_process_grants(sum(loads))


def test_the_fleet_benchmark_runs_and_checks() -> None:
    """benchmarks/fleet_budget.py: 2 workers at 25 calls, its table and its check pass."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "fleet_budget.py"
    args = [sys.executable, str(script), "--workers", "2", "--firsts", "25", "--check"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)

    assert 0 == done.returncode, done.stderr
    # 2 workers x 25: each alone grants 6 (24 %); as halves of the fleet 4 each, under the 9
    # one process would grant at 50
    assert done.stdout.splitlines()[-1].split() == ["2", "25", "50", "24.00%", "16.00%", "18.00%"]
