"""
An example service: tailkit's executor behind an HTTP API, the way a team would deploy it.

``POST /answer {"question": "..."}`` runs a three-step workflow under one deadline:

    classify (LLM) ──▶ lookup (a plain tool coroutine) ──▶ answer (LLM, streamed)

The LLM steps go through the official ``openai`` SDK (`openai_chat_attempt`) to one model on
two providers; the calibrated plan (``plan.yaml``, made by ``calibrate.py``) says when a
step hedges to the other provider, and an error or a 429 fails over there. The deadline is
the request's (tailkit's ``x-tailkit-deadline`` / ``x-tailkit-remaining-s`` headers), else
the plan's ``deadline_s``: every step, retry and hedge spends that one budget.

Operations:

- ``GET /metrics``: Prometheus text counters, fed by the executor's event hook (attempts by
  role and status, cutoffs, extra attempts granted and denied, breakers) and by the service
  (requests by outcome, plan reloads).
- Traces: OpenTelemetry spans, one per request, step and attempt (set ``TRACES``).
- ``SIGHUP`` or ``POST /admin/reload``: re-read the plan file and swap it in with
  `Executor.replace_plan`. Requests running finish under the plan they started with; the
  ledger, the budgets and the breakers carry over; no ledger line is lost.
- ``SIGTERM``: uvicorn stops taking requests and lets those running finish; then the
  executor closes, which writes the last ledger lines and closes the file.

Environment:

    PLAN                the plan file (default: plan.yaml beside this file)
    <PROVIDER>_BASE_URL where each provider of the plan is, e.g. OPENAI_BASE_URL, AZURE_BASE_URL
    <PROVIDER>_API_KEY  its API key (default: "unused", for a local `tailkit serve`)
    LEDGER              the ledger, one JSON line per attempt (default: ledger.jsonl)
    TRACES              unset: no tracing; "-": spans printed to stdout; else a file of spans,
                        one JSON object a line (use an OTLP exporter in production)

Run it, from this folder: ``uvicorn app:app --port 8080`` (one worker: the hedge budget, the
breakers and ``SIGHUP`` are per process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import signal
import sys

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai

from opentelemetry import trace
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from tailkit.adapters import openai_chat_attempt
from tailkit.config import Plan, load_plan
from tailkit.deadline import deadline_from_headers, now
from tailkit.errors import TailkitError
from tailkit.executor import Attempt, AttemptFn, Event, Executor, Observer, new_run_id
from tailkit.ledger import JsonlSink, Ledger


HERE = Path(__file__).resolve().parent
TOOL_PROVIDER = "local"  # the tool step's route in the plan: no client, no HTTP
logger = logging.getLogger("answer-service")
tracer = trace.get_tracer("answer-service")


# --- the workflow -------------------------------------------------------------------------


FACTS = {
    "billing": "Invoices are issued on the 1st; refunds take 5 business days.",
    "shipping": "Orders ship within 48 hours from the nearest warehouse.",
}


async def lookup(attempt: Attempt) -> str:
    """
    The tool step: a plain coroutine (here a stand-in for a database or a search call).

    The executor runs it like any attempt: it gets a ledger line, a span, the step's cutoffs
    and the run's deadline (it is cancelled when the deadline passes).
    """
    label = attempt.inputs["classify"].text.strip().lower()
    await asyncio.sleep(random.lognormvariate(math.log(0.03), 0.6))
    return FACTS.get(label.split(" ")[0] if label else "", "No fact on file for this topic.")


def workflow(question: str, clients: dict[str, openai.AsyncOpenAI]) -> dict[str, AttemptFn]:
    """
    The attempt function of each step, for one question.

    An LLM step's attempt goes to the client of its route's provider: the executor picks the
    route (first attempt, hedge, failover, breaker), the function only sends. The functions
    are made per request because the question is in them (a workflow run takes no input of
    its own: its first step reads none).
    """

    def llm(messages: Any, **params: Any) -> AttemptFn:
        calls = {name: openai_chat_attempt(c, messages, **params) for name, c in clients.items()}
        return lambda attempt: calls[attempt.provider](attempt)

    def answer_messages(attempt: Attempt) -> list[dict[str, str]]:
        fact = attempt.inputs["lookup"]
        return [
            {"role": "system", "content": f"Answer briefly. Known fact: {fact}"},
            {"role": "user", "content": question},
        ]

    topic = "Answer with one word: billing, shipping or other."
    classify = [{"role": "system", "content": topic}, {"role": "user", "content": question}]
    return {
        "classify": llm(classify, max_tokens=8),
        "lookup": lookup,
        "answer": llm(answer_messages, max_tokens=400),
    }


# --- metrics ------------------------------------------------------------------------------


class Metrics:
    """
    Counters for ``/metrics``, in Prometheus' text format (swap in prometheus_client at will).
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def inc(self, name: str, **labels: Any) -> None:
        """
        Add one to counter ``name`` with these labels.
        """
        self.counts[name, tuple(sorted((k, str(v)) for k, v in labels.items()))] += 1

    def on_event(self, event: Event) -> None:
        """
        The executor's event hook: it runs inside the event loop, so it only counts.
        """
        labels: dict[str, Any] = {"step": event.step}
        if event.kind == "attempt_started":
            labels["role"] = event.detail.get("role")
        elif event.kind == "attempt_ended":
            labels["status"] = event.detail.get("status")
            labels["provider"] = event.provider
        elif event.kind == "extra_granted":
            labels["action"] = event.detail.get("action")
        elif event.kind == "extra_denied":  # the budget or the throttle said no
            labels.update(action=event.detail.get("action"), reason=event.detail.get("reason"))
        elif event.kind.startswith(("breaker_", "throttle_")):  # about a provider
            labels = {"provider": event.provider}
        self.inc(f"tailkit_{event.kind}_total", **labels)

    def render(self) -> str:
        """
        Every counter, in the Prometheus text format.
        """
        lines, typed = [], set()
        for (name, labels), value in sorted(self.counts.items()):
            if name not in typed:
                typed.add(name)
                lines.append(f"# TYPE {name} counter")
            inner = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{inner}}} {value}" if inner else f"{name} {value}")
        return "\n".join(lines) + "\n"


# --- the service --------------------------------------------------------------------------


class Service:
    """
    What the process holds: the plan file, the executor, one SDK client per provider.
    """

    def __init__(self, plan_path: Path, ledger_path: Path) -> None:
        self.plan_path = plan_path
        self.metrics = Metrics()
        plan = load_plan(plan_path)
        self.clients = {
            provider: openai.AsyncOpenAI(
                base_url=os.environ[f"{provider.upper()}_BASE_URL"],
                api_key=os.environ.get(f"{provider.upper()}_API_KEY", "unused"),
                max_retries=0,  # the executor retries (the adapter turns them off anyway)
            )
            for provider in providers(plan)
        }
        # One ledger for the process's life: a reload swaps the plan, never the ledger.
        self.executor = Executor(
            plan,
            ledger=Ledger(JsonlSink(ledger_path)),
            observer=Observer(self.metrics.on_event),  # traces too, once OpenTelemetry is set
        )

    def reload(self) -> Plan:
        """
        Re-read the plan file and run it from now on.

        Raises:
            TailkitError: The file is not a valid plan, or it names a provider this process
                has no client for (a restart adds one): the running plan stays.
        """
        plan = load_plan(self.plan_path)
        unknown = providers(plan) - set(self.clients)
        if unknown:
            msg = f"the new plan names provider(s) {', '.join(sorted(unknown))}: restart to add"
            raise TailkitError(msg)
        self.executor.replace_plan(plan)
        self.metrics.inc("service_plan_reloads_total")
        logger.info("plan reloaded from %s: %s", self.plan_path, summary(plan))
        return plan

    def reload_on_signal(self) -> None:
        """
        `reload` for ``SIGHUP``: a bad plan file is logged, and the running plan stays.
        """
        try:
            self.reload()
        except TailkitError as exc:
            logger.error("plan not reloaded, the running one stays: %s", exc)

    async def aclose(self) -> None:
        """
        Close the executor (its last ledger lines are written), then the clients.
        """
        await self.executor.aclose()  # waits for losing attempts, closes the ledger file
        for client in self.clients.values():
            await client.close()


def providers(plan: Plan) -> set[str]:
    """
    The providers the plan's LLM routes call (each needs a client).
    """
    return {route.provider for route in plan.routes.values()} - {TOOL_PROVIDER}


def summary(plan: Plan) -> dict[str, Any]:
    """
    What a reload reports: the deadline, the budget and each step's action.
    """
    fields = ("signal", "ttft_cutoff_s", "stall_cutoff_s", "cutoff_s", "on_cutoff", "hedge_route")
    steps = {name: {f: getattr(step, f) for f in fields} for name, step in plan.steps.items()}
    return {"deadline_s": plan.deadline_s, "hedge_budget": plan.hedge_budget, "steps": steps}


# --- HTTP ---------------------------------------------------------------------------------


async def answer(request: Request) -> JSONResponse:
    """
    ``POST /answer``: one workflow run under the request's deadline.

    200 with the answer; 504 when the deadline passed first, 502 when a step failed for good.
    """
    service: Service = request.app.state.service
    question = str((await request.json()).get("question", ""))
    executor = service.executor
    # the request's deadline when it carries one, else the plan's: one budget for the run
    deadline = deadline_from_headers(request.headers)
    budget_s = executor.plan.deadline_s if math.isinf(deadline) else deadline - now()
    run_id = new_run_id()
    with tracer.start_as_current_span("POST /answer", attributes={"tailkit.run_id": run_id}):
        run = await executor.run(
            workflow(question, service.clients), run_id=run_id, deadline_s=budget_s
        )
    outcome = "ok" if run.ok else "missed" if run.cancelled else "failed"
    service.metrics.inc("service_requests_total", outcome=outcome)
    body: dict[str, Any] = {"run_id": run_id, "elapsed_s": round(run.elapsed_s, 3)}
    if run.ok:
        return JSONResponse({**body, "answer": run.results["answer"].text})
    errors = {name: repr(error) for name, error in run.failed.items()}
    status = 504 if run.cancelled else 502
    return JSONResponse({**body, "error": outcome, "steps": errors}, status_code=status)


async def metrics(request: Request) -> PlainTextResponse:
    """
    ``GET /metrics``: the counters.
    """
    return PlainTextResponse(request.app.state.service.metrics.render())


async def reload(request: Request) -> JSONResponse:
    """
    ``POST /admin/reload``: swap in the plan file; 400 and the old plan if it is bad.
    """
    try:
        plan = request.app.state.service.reload()
    except TailkitError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse(summary(plan))


def tracing() -> Any:
    """
    Configure OpenTelemetry from ``TRACES``; return the tracer provider (``None``: none).
    """
    where = os.environ.get("TRACES")
    if not where:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    out = sys.stdout if where == "-" else open(where, "a", encoding="utf-8")  # noqa: SIM115
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(None) + "\n")
    provider = TracerProvider(resource=Resource.create({"service.name": "answer-service"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """
    Start: tracing, the service, the ``SIGHUP`` handler. Stop: close them, ledger first.
    """
    traces = tracing()
    service = Service(
        Path(os.environ.get("PLAN", HERE / "plan.yaml")),
        Path(os.environ.get("LEDGER", "ledger.jsonl")),
    )
    app.state.service = service
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, service.reload_on_signal)
    try:
        yield
    finally:  # uvicorn got SIGTERM (or Ctrl-C) and the requests running have finished
        loop.remove_signal_handler(signal.SIGHUP)
        await service.aclose()
        if traces is not None:
            traces.shutdown()  # exports the spans still batched


app = Starlette(
    routes=[
        Route("/answer", answer, methods=["POST"]),
        Route("/metrics", metrics),
        Route("/admin/reload", reload, methods=["POST"]),
    ],
    lifespan=lifespan,
)
logging.basicConfig()  # reloads are logged at INFO, warnings from any library
logger.setLevel(logging.INFO)
