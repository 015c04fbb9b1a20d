"""
The example service (examples/service) as a team would run it: uvicorn, two providers, one down.

Two ``tailkit serve`` instances are the providers (``openai`` answers 5xx to everything), the
service runs in uvicorn in a subprocess with its committed, calibrated plan, and requests go
through httpx with tailkit's deadline header. The plan is reloaded twice while requests run
(``POST /admin/reload``, then ``SIGHUP``), and the service is stopped with ``SIGTERM`` while
it answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tailkit.config import load_plan
from tailkit.executor import REMAINING_HEADER


pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "service"
STARTUP_S = 120.0  # how long a process may take to start listening (a busy machine)
QUESTIONS = ["When will my refund arrive?", "Where is my parcel?", "Do you ship to Norway?"]


def _serve(profile: Path, procs: list[subprocess.Popen[str]]) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailkit", "serve", "--profile", str(profile), "--port", "0",
         "--json"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    procs.append(proc)
    assert proc.stdout is not None
    return str(json.loads(proc.stdout.readline())["url"])


def _listening(log: Path, proc: subprocess.Popen[str]) -> str:
    """
    The service's URL, once uvicorn says it listens (its startup, the lifespan, is done).
    """
    give_up = time.monotonic() + STARTUP_S
    while time.monotonic() < give_up:
        found = re.search(r"Uvicorn running on (http://\S+)", log.read_text())
        if found:
            return found.group(1)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(log.read_text())


@pytest.fixture
def service(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """
    Two providers (openai down) and the example service in uvicorn, stopped afterwards.
    """
    # openai answers 5xx to everything (after its usual TTFT, stalls included); azure is
    # healthy: no faults, no stalls (a stalled hedge after a failed first attempt may miss)
    profile = yaml.safe_load((EXAMPLE / "providers.yaml").read_text())
    profile["models"]["openai/gpt-4.1-mini"]["faults"] = {"error_5xx": 1.0}
    down = tmp_path / "down.yaml"
    down.write_text(yaml.safe_dump(profile))
    profile["models"]["azure/gpt-4.1-mini"].update(faults={}, stall_share=0.0)
    healthy = tmp_path / "healthy.yaml"
    healthy.write_text(yaml.safe_dump(profile))
    plan = tmp_path / "plan.yaml"
    plan.write_text((EXAMPLE / "plan.yaml").read_text())
    procs: list[subprocess.Popen[str]] = []
    try:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": _serve(down, procs),
            "AZURE_BASE_URL": _serve(healthy, procs),
            "PLAN": str(plan),
            "LEDGER": str(tmp_path / "ledger.jsonl"),
            "TRACES": str(tmp_path / "spans.jsonl"),
        }
        log = tmp_path / "service.log"
        with log.open("w") as out:
            app = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(EXAMPLE),
                 "--host", "127.0.0.1", "--port", "0", "--no-access-log"],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        procs.append(app)
        yield {"url": _listening(log, app), "proc": app, "log": log, "plan": plan, "dir": tmp_path}
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


async def _ask(client: httpx.AsyncClient, n: int, deadline_s: float) -> list[httpx.Response]:
    headers = {REMAINING_HEADER: str(deadline_s)}
    return await asyncio.gather(*(
        client.post("/answer", json={"question": QUESTIONS[i % 3]}, headers=headers)
        for i in range(n)
    ))  # fmt: skip


def _metrics(text: str) -> Counter[str]:
    """
    ``/metrics`` as counter name -> total over its labels, and each full line's value.
    """
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] += int(value)
            if "{" in key:
                out[key.split("{")[0]] += int(value)
    return out


async def _traffic(service: dict[str, Any], deadline_s: float) -> tuple[list[httpx.Response], Any]:
    """
    24 requests; meanwhile a bad plan refused, a good one reloaded, and a SIGHUP; the metrics.
    """
    plan_path: Path = service["plan"]
    calibrated = plan_path.read_text()
    # long client timeouts: the service's own deadline is what is tested
    async with httpx.AsyncClient(base_url=service["url"], timeout=60) as client:
        first = asyncio.ensure_future(_ask(client, 12, deadline_s))
        await asyncio.sleep(0)  # the requests are on their way while the plan changes
        plan_path.write_text("tailkit_plan: 1\nworkflow: broken\n")
        refused = await client.post("/admin/reload")
        assert refused.status_code == 400, refused.text
        plan_path.write_text(calibrated.replace("hedge_budget: 0.1 ", "hedge_budget: 0.2 "))
        reloaded = await client.post("/admin/reload")
        assert reloaded.json()["hedge_budget"] == 0.2, reloaded.text
        answers = await first
        second = asyncio.ensure_future(_ask(client, 12, deadline_s))
        await asyncio.sleep(0)
        os.kill(service["proc"].pid, signal.SIGHUP)
        answers += await second
        give_up = time.monotonic() + STARTUP_S
        while "service_plan_reloads_total 2" not in (metrics := await client.get("/metrics")).text:
            assert time.monotonic() < give_up, metrics.text  # the SIGHUP was never handled
            await asyncio.sleep(0.05)
    return answers, _metrics(metrics.text)


async def _stop_while_answering(service: dict[str, Any], deadline_s: float) -> list[Any]:
    """
    6 more requests, and SIGTERM once all 6 runs have started: they are answered all the same.
    """
    async with httpx.AsyncClient(base_url=service["url"], timeout=60) as client:
        last = asyncio.ensure_future(_ask(client, 6, deadline_s))
        started = 'tailkit_step_started_total{step="classify"}'
        # SIGTERM once they all run (on a machine slow enough that they are done by the time
        # /metrics says so, it goes after: the test is then weaker, never wrong)
        while _metrics((await client.get("/metrics")).text)[started] < 24 + 6:
            if last.done():
                break
            await asyncio.sleep(0.01)
        service["proc"].send_signal(signal.SIGTERM)
        return await last


def _check_traces(spans_file: Path, requests: int, attempts: int) -> None:
    """
    Each request's span is the parent of its three steps' spans, and those of the attempts.
    """
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    roots = {s["context"]["span_id"] for s in spans if s["name"] == "POST /answer"}
    assert len(roots) == requests
    steps = [s for s in spans if s["name"].startswith("tailkit.step ")]
    names = Counter(s["name"].removeprefix("tailkit.step ") for s in steps)
    assert names == Counter(classify=requests, lookup=requests, answer=requests)
    assert all(s["parent_id"] in roots for s in steps)
    step_ids = {s["context"]["span_id"] for s in steps}
    assert sum(s["parent_id"] in step_ids for s in spans) == attempts


def test_example_service_answers_reloads_and_keeps_every_ledger_line(
    service: dict[str, Any],
) -> None:
    """The example answers in its deadline with one provider down, reloads, flushes on SIGTERM."""
    deadline_s = load_plan(EXAMPLE / "plan.yaml").deadline_s
    answers, metrics = asyncio.run(_traffic(service, deadline_s))
    answers += asyncio.run(_stop_while_answering(service, deadline_s))
    # uvicorn shuts down gracefully, then ends by the signal it got (or 0, by version)
    assert service["proc"].wait(timeout=STARTUP_S) in (0, -signal.SIGTERM)
    log = service["log"].read_text()
    assert "Application shutdown complete" in log, log
    assert "plan not reloaded" not in log

    # every request answered, inside its deadline, although openai failed every call; the
    # last 6 while the service was shutting down
    bodies = [r.json() for r in answers]
    assert [r.status_code for r in answers] == [200] * 30, [b for b in bodies if "error" in b]
    assert all(b["answer"] and b["elapsed_s"] <= deadline_s for b in bodies), bodies
    assert metrics['service_requests_total{outcome="ok"}'] == 24
    assert metrics["service_plan_reloads_total"] == 2

    # the ledger: one line per attempt started, none lost across the reloads and the shutdown
    lines = [json.loads(x) for x in (service["dir"] / "ledger.jsonl").read_text().splitlines()]
    before_stop = {b["run_id"] for b in bodies[:24]}
    assert (
        sum(line["run_id"] in before_stop for line in lines)
        == (metrics["tailkit_attempt_started_total"])
    )
    assert metrics["tailkit_attempt_ended_total"] == metrics["tailkit_attempt_started_total"]
    assert {line["run_id"] for line in lines} == {b["run_id"] for b in bodies}
    winners = Counter(line["run_id"] for line in lines if line["winner"])
    assert set(winners.values()) == {3}  # classify, lookup, answer: one winner each

    # openai was tried, failed (or was cut by a hedge), and its breaker took it out
    openai_lines = [line for line in lines if line["provider"] == "openai"]
    assert "error" in {line["status"] for line in openai_lines}
    assert all(line["status"] != "ok" for line in openai_lines)
    assert metrics['tailkit_breaker_opened_total{provider="openai"}'] >= 1

    # every attempt of the 30 runs has its span, and its ledger line
    _check_traces(service["dir"] / "spans.jsonl", len(bodies), len(lines))
