"""
How ``plan.yaml`` was made: rehearse the workflow against two local providers, then calibrate.

A team with traffic calibrates on its own ledger: the service's ``ledger.jsonl`` is the call
log (``tailkit ingest ledger.jsonl --format trace`` and ``tailkit calibrate workflow.yaml``,
steps 3 and 4 below). This example has no traffic yet, so it makes some:

1. start ``tailkit serve --profile providers.yaml`` twice, one server per provider;
2. run the service's own workflow (`app.workflow`: the OpenAI SDK, the tool coroutine) ``RUNS``
   times under the uncalibrated ``workflow.yaml``, half of them with each provider first, so
   both routes of each LLM step are measured; every attempt, the tool's included, goes to one
   ledger;
3. ``tailkit ingest`` the ledger into a store;
4. ``tailkit calibrate workflow.yaml`` on that store writes ``plan.yaml``.

Run it from this folder: ``python calibrate.py`` (about a minute). The runs are real time,
so the measured latencies are the servers' as they answered; the seeds fix the servers' draws,
not the timings, so two runs give close plans, not identical ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

from pathlib import Path

import openai

from app import HERE, providers, workflow

from tailkit.config import Plan, load_plan
from tailkit.executor import Executor
from tailkit.ledger import JsonlSink, Ledger


RUNS = 600  # 300 with each provider first: each route x bucket gets >= 200 calls, as calibrate asks
CONCURRENCY = 16
QUESTIONS = [
    "When will my refund arrive?",
    "Where is my parcel?",
    "Can I change the billing address on an invoice?",
    "Do you ship to Norway?",
    "What is your favourite colour?",
]


def swapped(plan: Plan) -> Plan:
    """
    The plan with each LLM step's route and hedge route swapped: the other provider first.
    """
    steps = {
        name: dataclasses.replace(step, route=step.hedge_route, hedge_route=step.route)
        if step.hedge_route
        else step
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps)


async def rehearse(plan: Plan, urls: dict[str, str], ledger_path: Path) -> None:
    """
    ``RUNS`` workflow runs, half under ``plan`` and half under `swapped` (one shared ledger).
    """
    clients = {p: openai.AsyncOpenAI(base_url=urls[p], api_key="unused") for p in urls}
    ledger = Ledger(JsonlSink(ledger_path))
    executors = [Executor(plan, ledger=ledger), Executor(swapped(plan), ledger=ledger)]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> bool:
        async with gate:
            fns = workflow(QUESTIONS[i % len(QUESTIONS)], clients)
            return bool((await executors[i % 2].run(fns)).ok)

    oks = await asyncio.gather(*(one(i) for i in range(RUNS)))
    for executor in executors:
        await executor.aclose()
    for client in clients.values():
        await client.close()
    print(f"rehearsal: {sum(oks)} of {RUNS} runs ok, {ledger.counts()['attempts']} ledger lines")


def tailkit(*args: str) -> None:
    """
    Run a ``tailkit`` command, echoing it.
    """
    print("$ tailkit", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "tailkit", *args], check=True)  # noqa: S603 - ours


def main() -> None:
    """
    The four steps of the module docstring.
    """
    work = Path(tempfile.mkdtemp(prefix="answer-service-"))
    plan = load_plan(HERE / "workflow.yaml")
    servers, urls = [], {}
    try:
        for seed, provider in enumerate(sorted(providers(plan)), start=1):
            profile = str(HERE / "providers.yaml")
            server = subprocess.Popen(  # noqa: S603 - our own command line
                [sys.executable, "-m", "tailkit", "serve", "--profile", profile, "--port", "0",
                 "--seed", str(seed), "--json"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            servers.append(server)
            started = server.stdout.readline() if server.stdout else ""
            urls[provider] = json.loads(started)["url"]  # it prints its URL once listening
        asyncio.run(rehearse(plan, urls, work / "ledger.jsonl"))
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    db = str(work / "calls.duckdb")
    tailkit("ingest", str(work / "ledger.jsonl"), "--format", "trace", "--db", db)
    plan_path = HERE / "plan.yaml"
    tailkit("calibrate", str(HERE / "workflow.yaml"), "--db", db, "--out", str(plan_path))
    note = (
        f"# Made by calibrate.py: {RUNS} runs of the workflow against two `tailkit serve\n"
        "# --profile providers.yaml` servers (half with each provider first), their ledger\n"
        "# ingested (--format trace), then `tailkit calibrate workflow.yaml`. With traffic of\n"
        "# your own, calibrate on the service's ledger instead (README.md).\n"
    )
    plan_path.write_text(note + plan_path.read_text())
    print(f"ledger and store kept in {work}")


if __name__ == "__main__":
    os.chdir(HERE)
    main()
