"""
Fleet budget: the extra share N worker processes spend together, with and without `processes`.

Starts N real worker processes (multiprocessing, spawned, as gunicorn or uvicorn ``--workers``
would run them), each with its own `tailkit.executor.Executor` and its own hedge budget, each
serving ``--firsts`` calls of a one-step plan (``hedge_budget`` = ``--ratio``) in waves of
``--wave`` concurrent calls. Every call's first attempt outlives the step's cutoff, so every
call asks for a hedge: the budget alone decides how many start. Each worker reads its share
of the fleet from ``TAILKIT_WORKERS``:

- ``per process``: ``TAILKIT_WORKERS=1``, how every worker counted before budgets were defined
  per fleet: each grants its own noise headroom and allowance;
- ``fleet``: ``TAILKIT_WORKERS=N``: each takes 1/N of the fleet's.

Per (N, firsts per process): the fleet's first attempts and its extra share in each mode, and
``one``, the share one process serving the whole fleet's traffic (N waves at once) would
grant: ``ratio * F + sigmas * sqrt(ratio * F) + allowance`` up to the 10,000-first-attempt
window, then the same rule over the window as it slides. The
reserve is off (``reserve=0``): every extra here is a hedge, and the subject is the fleet's
total, not its split. Exits 0 whatever the figures (``--check``: 1 when a fleet figure is more
than 1 point from the ratio at 16 workers and 400 first attempts each, or above ``one``).

Run: ``python benchmarks/fleet_budget.py`` (about 10 s on two cores).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys

from tailkit.config import parse_plan
from tailkit.executor import Attempt, Executor, HedgeBudget, Ledger


PLAN = """\
tailkit_plan: 1
workflow: fleet
deadline_s: 60
hedge_budget: {ratio}
routes:
  a/m: {{provider: a, model: m}}
  b/m: {{provider: b, model: m}}
steps:
  s: {{route: a/m, hedge_route: b/m, signal: total, cutoff_s: 0.002, on_cutoff: hedge}}
"""


async def _serve(ratio: float, firsts: int, wave: int) -> int:
    ledger = Ledger()
    plan = parse_plan(PLAN.format(ratio=ratio))
    executor = Executor(plan, ledger=ledger, budget=HedgeBudget(ratio, reserve=0.0), seed=0)

    async def call(a: Attempt) -> str:
        await asyncio.sleep(0.03 if a.role == "primary" else 0.001)
        return a.role

    for start in range(0, firsts, wave):
        await asyncio.gather(
            *(executor.run_step("s", call) for _ in range(start, min(start + wave, firsts)))
        )
    await executor.aclose()
    return ledger.counts()["attempts"] - firsts


def worker(workers: int, ratio: float, firsts: int, wave: int) -> int:
    """
    One worker process: its share of the fleet from the environment, then its traffic.
    """
    os.environ["TAILKIT_WORKERS"] = str(workers)
    return asyncio.run(_serve(ratio, firsts, wave))


def fleet(processes: int, share_of: int, ratio: float, firsts: int, wave: int) -> int:
    """
    Extra attempts of ``processes`` workers, each told it is one of ``share_of``.
    """
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        return sum(pool.starmap(worker, [(share_of, ratio, firsts, wave)] * processes))


def one_process(ratio: float, firsts: int, wave: int) -> int:
    """
    Extra attempts one process serving the whole fleet's calls, ``wave`` at a time, grants.

    The same traffic through one budget, every call asking once (its window included).
    """
    budget = HedgeBudget(ratio, reserve=0.0, processes=1)
    granted = 0
    for start in range(0, firsts, wave):
        accounts = [budget.open(1) for _ in range(start, min(start + wave, firsts))]
        granted += sum(budget.try_extra(account) for account in accounts)
        for account in accounts:
            budget.close(account)
    return granted


def main(argv: list[str] | None = None) -> int:
    """
    Print the table; with ``--check``, exit 1 when the fleet misses its budget.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--workers", default="1,4,16", help="worker counts, comma-separated")
    parser.add_argument("--firsts", default="25,400,1000", help="calls per worker, comma-separated")
    parser.add_argument("--ratio", type=float, default=0.05, help="the plan's hedge_budget")
    parser.add_argument("--wave", type=int, default=50, help="concurrent calls per worker")
    parser.add_argument("--check", action="store_true", help="exit 1 when the fleet misses")
    args = parser.parse_args(argv)
    ratio = args.ratio
    print(f"hedge_budget {ratio:.2%}: every call asks for a hedge; extra share of the fleet")
    print(f"{'workers':>7} {'firsts/worker':>13} {'fleet firsts':>12} "
          f"{'per process':>12} {'fleet':>8} {'one':>8}")  # fmt: skip
    failed = False
    for n in (int(v) for v in args.workers.split(",")):
        for f in (int(v) for v in args.firsts.split(",")):
            total = n * f
            old = fleet(n, 1, ratio, f, args.wave) / total
            new = fleet(n, n, ratio, f, args.wave) / total
            limit = one_process(ratio, total, n * args.wave) / total
            print(f"{n:>7} {f:>13} {total:>12} {old:>12.2%} {new:>8.2%} {limit:>8.2%}")
            if new > limit or (n >= 16 and f >= 400 and abs(new - ratio) > 0.01):
                failed = True
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
