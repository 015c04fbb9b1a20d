"""
Time-scaled rehearsals: `scale_plan`, and the executor's ``time_scale``, on a virtual clock.

The executor runs the scaled plan and writes its ledger back in plan seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import types

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import tailkit._config._model as model_module
import tailkit.executor._attempt as attempt_module
import tailkit.executor._executor as executor_module

from tailkit._config._scale import SECONDS_FIELDS
from tailkit.config import (
    Basis,
    LiveRouting,
    Plan,
    PlanInterval,
    PlanPrediction,
    Route,
    Shared,
    Step,
    StepInterval,
    StepPrediction,
    Tokens,
    parse_plan,
    scale_plan,
)
from tailkit.errors import ConfigError
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    AttemptRecord,
    Chunk,
    Executor,
    Ledger,
    MemorySink,
    RunResult,
)
from tests._fakeloop import VirtualLoop


# Every field of the plan model that holds no seconds, by class. A field added to the model
# fails `test_every_field_of_the_plan_model_is_classified` until it is listed here or, when it
# is a duration, in SECONDS_FIELDS (and so scaled).
UNITLESS: dict[str, tuple[str, ...]] = {
    "Route": ("provider", "model"),
    "Tokens": ("input", "output"),
    "StepInterval": ("level", "hedge_rate"),
    "StepPrediction": ("hedge_rate", "interval"),
    "Basis": ("calls", "bucket", "quantile", "censored", "shared", "route_choice"),
    "LiveRouting": ("quantile", "window", "min_calls", "explore_every"),
    "Shared": ("other_provider", "same_provider", "source", "evidence", "pairs"),
    "Step": (
        "name", "route", "depends_on", "required", "expected_tokens", "idempotent", "tool",
        "signal",
        "on_cutoff", "hedge_route", "downgrade_route", "upgrade_route", "candidates", "live",
        "predicted", "basis",
    ),
    "PlanPrediction": ("miss_rate", "extra_attempts", "interval"),
    "PlanInterval": ("level", "miss_rate", "extra_attempts"),
    "Plan": ("workflow", "routes", "steps", "hedge_budget", "predicted"),
}  # fmt: skip


def _model_classes() -> dict[str, type]:
    return {
        name: cls
        for name, cls in inspect.getmembers(model_module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == model_module.__name__
    }


def test_every_field_of_the_plan_model_is_classified() -> None:
    """Each plan dataclass field is either scaled (SECONDS_FIELDS) or known to hold no seconds."""
    classes = _model_classes()
    assert set(classes) == set(UNITLESS)
    assert set(SECONDS_FIELDS) <= set(classes.values())
    for name, cls in classes.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        seconds = set(SECONDS_FIELDS.get(cls, ()))
        assert seconds | set(UNITLESS[name]) == fields, name
        assert not seconds & set(UNITLESS[name]), name
        assert {f for f in fields if f.endswith("_s")} <= seconds, name


def _full_plan() -> Plan:
    """A plan with every optional field set, so no seconds field is None."""
    step_interval = StepInterval(level=0.95, p50_s=(9.0, 11.0), p99_s=(30.0, 50.0),
                                 hedge_rate=(0.01, 0.09))  # fmt: skip
    step = Step(
        "draft", "a/m", depends_on=(), required=True, expected_tokens=Tokens(1000, 500),
        idempotent=True, signal="ttft", ttft_cutoff_s=2.5, stall_cutoff_s=1.5, cutoff_s=12.0,
        on_cutoff="hedge", hedge_route="b/m", downgrade_route="b/m", upgrade_route="b/m",
        candidates=("a/m", "b/m"),
        live=LiveRouting(quantile=0.95, cutoff_bounds_s=(1.0, 2.0),
                         prior_s={"a/m": 2.0, "b/m": 2.2}, window=50, min_calls=5,
                         explore_every=10),
        predicted=StepPrediction(p50_s=10.0, p99_s=40.0, hedge_rate=0.05, interval=step_interval),
        basis=Basis(calls=900, bucket="in 1k-4k / out 300-600", quantile=0.95, censored=0.02,
                    shared=Shared(0.4, 0.5, "job keys", "300 jobs", 15),
                    route_choice="a/m: fewer misses"),
    )  # fmt: skip
    plan_interval = PlanInterval(level=0.95, p50_s=(9.0, 11.0), p99_s=(math.inf, math.inf),
                                 miss_rate=(0.0, 0.1), extra_attempts=(0.0, 0.1))  # fmt: skip
    return Plan(
        "w", 60.0, {"a/m": Route("a", "m"), "b/m": Route("b", "m")}, {"draft": step},
        hedge_budget=0.05,
        predicted=PlanPrediction(p50_s=10.0, p99_s=math.inf, miss_rate=0.05,
                                 extra_attempts=0.05, interval=plan_interval),
    )  # fmt: skip


def _pairs(before: object, after: object, path: str) -> Iterator[tuple[str, Any, Any, bool]]:
    """(path, before, after, is seconds) for every leaf field of two plans, side by side."""
    if isinstance(before, dict):
        assert isinstance(after, dict)
        assert list(before) == list(after), path
        for key in before:
            yield from _pairs(before[key], after[key], f"{path}.{key}")
        return
    seconds = SECONDS_FIELDS.get(type(before), ())
    for field in dataclasses.fields(before):  # type: ignore[arg-type]
        old, new = getattr(before, field.name), getattr(after, field.name)
        where = f"{path}.{field.name}"
        if field.name in seconds and isinstance(old, dict):  # names -> seconds
            for key in old:
                yield f"{where}.{key}", old[key], new[key], True
        elif dataclasses.is_dataclass(old) or isinstance(old, dict):
            yield from _pairs(old, new, where)
        else:
            yield where, old, new, field.name in seconds


@pytest.mark.parametrize("factor", [0.25, 0.01, 4.0])
def test_scale_plan_multiplies_every_seconds_field_and_nothing_else(factor: float) -> None:
    """Every seconds field (bounds too) is times the factor; every other field is unchanged."""
    plan = _full_plan()
    scaled = scale_plan(plan, factor)
    leaves = list(_pairs(plan, scaled, "plan"))
    assert all(old is not None for _, old, _, _ in leaves)  # nothing left untested
    seen = set()
    for where, old, new, is_seconds in leaves:
        if is_seconds:
            seen.add(where.rsplit(".", 2)[-2] if "interval" in where else where)
            expected = tuple(v * factor for v in old) if isinstance(old, tuple) else old * factor
            assert new == expected, where
        else:
            assert new == old, where
    assert "plan.deadline_s" in seen
    assert "plan.steps.draft.cutoff_s" in seen
    assert scale_plan(plan, 1) == plan
    assert plan == _full_plan()  # the input is untouched


@pytest.mark.parametrize("factor", [0, -0.01, math.nan, math.inf, True, "0.01"])
def test_scale_plan_refuses_a_factor_that_is_not_a_positive_number(factor: Any) -> None:
    """A zero, negative, infinite or non-numeric factor is refused with its value."""
    with pytest.raises(ConfigError, match=r"positive finite number.*got"):
        scale_plan(_full_plan(), factor)


@pytest.mark.parametrize("time_scale", [0, -1.0, 10.5, math.nan, math.inf, "0.01"])
def test_executor_refuses_a_time_scale_outside_0_to_10(time_scale: Any) -> None:
    """time_scale must be in (0, 10]; the error names the parameter, the value and the fix."""
    with pytest.raises(ConfigError, match=r"time_scale must be in \(0, 10\].*the server") as info:
        Executor(_full_plan(), time_scale=time_scale)

    assert ("time_scale", time_scale) == (info.value.field, info.value.value)
    assert "--" not in str(info.value)


def test_executor_accepts_the_edges_and_keeps_the_plan_object_at_scale_1() -> None:
    """Scale 1 runs the very plan given; 10 (the slowest) is accepted and scales the plan."""
    plan = _full_plan()
    assert Executor(plan).plan is plan
    slow = Executor(plan, time_scale=10)
    assert (slow.plan.deadline_s, slow.profile_plan) == (600.0, plan)


# A rehearsal against a fake provider: every latency is in plan seconds, times `scale`.

PLAN = """\
tailkit_plan: 1
workflow: rehearsal
deadline_s: 30
hedge_budget: 1.0
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  extract:
    route: a/m
    cutoff_s: 2
    on_cutoff: hedge
    hedge_route: b/m
  draft:
    route: a/m
    depends_on: [extract]
    signal: ttft
    ttft_cutoff_s: 1.5
    on_cutoff: hedge
    hedge_route: b/m
  flaky:
    route: a/m
    depends_on: [extract]
  polish:
    route: a/m
    depends_on: [draft]
    stall_cutoff_s: 1
    cutoff_s: 20
    on_cutoff: retry
  late:
    route: a/m
    depends_on: [polish]
    required: false
"""
EPOCH = datetime(2026, 11, 29, 12, tzinfo=UTC)


def rehearsal_plan() -> Plan:
    """The plan above, `late` predicted to take 21 s (so `polish` acts earlier)."""
    plan = parse_plan(PLAN)
    late = dataclasses.replace(
        plan.steps["late"], predicted=StepPrediction(p50_s=21.0, p99_s=40.0, hedge_rate=0.0)
    )
    return dataclasses.replace(plan, steps={**plan.steps, "late": late})


def provider(scale: float) -> Callable[[Attempt], Any]:
    """The fake provider, every sleep in plan seconds times ``scale``."""

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds * scale)

    async def stream(first_s: float, gaps: list[float]) -> AsyncIterator[Any]:
        yield Chunk(kind="role")
        await sleep(first_s)
        yield "first"
        for gap in gaps:
            await sleep(gap)
            yield "more"
        yield FINAL

    async def answer(seconds: float, fail: bool = False) -> str:
        await sleep(seconds)
        if fail:
            msg = "overloaded"
            raise AttemptError(msg, http_status=503)
        return "ok"

    def fn(a: Attempt) -> Any:
        first = a.role == "primary"
        if a.step == "extract":
            return answer(5.0 if first else 1.0)
        if a.step == "draft":
            return stream(4.0, [0.5]) if first else stream(0.5, [0.5])
        if a.step == "flaky":
            return answer(0.5, fail=first)
        if a.step == "polish":
            return stream(0.5, [0.25, 5.0]) if first else stream(0.5, [0.25])
        return answer(100.0)

    return fn


def rehearse(
    plan: Plan,
    monkeypatch: pytest.MonkeyPatch,
    *,
    time_scale: float,
    provider_scale: float,
    **run: Any,
) -> tuple[RunResult, list[AttemptRecord]]:
    """One run on a fresh virtual loop whose wall clock starts at EPOCH: (result, ledger)."""
    loop = VirtualLoop()
    wall = types.SimpleNamespace(time=lambda: EPOCH.timestamp() + loop.time())
    monkeypatch.setattr(attempt_module, "time", wall)
    monkeypatch.setattr(executor_module, "time", wall)
    sink = MemorySink()

    async def main() -> RunResult:
        executor = Executor(plan, ledger=Ledger(sink), seed=7, time_scale=time_scale)
        async with executor:
            result: RunResult = await executor.run(provider(provider_scale), run_id="r", **run)
        return result

    try:
        result = loop.run_until_complete(main())
    finally:
        loop.close()
    return result, sink.records


def _close(a: datetime | None, b: datetime | None, scale: float) -> bool:
    # Wall instants are whole microseconds; one microsecond of rounding grows by 1/scale.
    if a is None or b is None:
        return a is b
    return abs(a - b) <= timedelta(microseconds=1 + 1 / scale)


@pytest.mark.parametrize("scale", [0.01, 0.25, 4.0])
def test_a_scaled_rehearsal_makes_the_same_decisions_and_writes_plan_seconds(
    scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a provider scaled by s, time_scale=s decides as scale 1 does, in plan seconds."""
    plan = rehearsal_plan()
    want, want_ledger = rehearse(plan, monkeypatch, time_scale=1.0, provider_scale=1.0)
    got, got_ledger = rehearse(plan, monkeypatch, time_scale=scale, provider_scale=scale)

    # the scenario exercises every kind of cutoff, a retry after an error, and the deadline
    cutoffs = {r.attrs.get("cutoff") for r in want_ledger}
    assert {"total", "ttft", "stall"} <= cutoffs
    assert {"hedge", "retry"} <= {r.role for r in want_ledger}
    assert want.cancelled == ("late",)
    assert want.ok

    assert (got.ok, got.finished, got.cancelled, got.skipped, set(got.failed)) == (
        want.ok, want.finished, want.cancelled, want.skipped, set(want.failed))  # fmt: skip
    assert (got.deadline_s, got.denials) == (want.deadline_s, want.denials)
    assert got.elapsed_s == pytest.approx(want.elapsed_s, rel=1e-9)
    assert len(got_ledger) == len(want_ledger)
    for mine, theirs in zip(got_ledger, want_ledger, strict=True):
        for field in dataclasses.fields(AttemptRecord):
            a, b = getattr(mine, field.name), getattr(theirs, field.name)
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-9, abs=1e-12), (mine.call_id, field.name)
            elif isinstance(b, datetime) or field.name == "deadline_at":
                assert _close(a, b, scale), (mine.call_id, field.name, a, b)
            else:
                assert a == b, (mine.call_id, field.name)


def test_the_ledger_of_a_rehearsal_is_in_plan_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 0.01, the hedge that answers in 0.01 real seconds is written as 1 s, 2 s in."""
    _, ledger = rehearse(rehearsal_plan(), monkeypatch, time_scale=0.01, provider_scale=0.01)
    hedge, primary = (r for r in ledger if r.step == "extract")
    assert (hedge.role, hedge.winner) == ("hedge", True)
    assert hedge.total_s == pytest.approx(1.0)
    assert primary.censored_at_s == pytest.approx(3.0)
    assert _close(primary.started_at, EPOCH, 0.01)
    assert _close(hedge.started_at, EPOCH + timedelta(seconds=2), 0.01)
    assert primary.deadline_at is not None
    assert _close(primary.deadline_at, EPOCH + timedelta(seconds=30), 0.01)


def test_an_unscaled_plan_against_a_scaled_provider_never_fires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The problem a time scale solves: provider seconds against a 100x server, no cutoff."""
    result, ledger = rehearse(rehearsal_plan(), monkeypatch, time_scale=1.0, provider_scale=0.01)
    assert not any("cutoff" in r.attrs for r in ledger)
    assert result.cancelled == ()


def test_run_deadline_s_is_in_plan_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """run(deadline_s=4) on a 0.01 executor cuts at 0.04 real seconds, reported as 4 s."""
    plan = rehearsal_plan()
    want, _ = rehearse(plan, monkeypatch, time_scale=1.0, provider_scale=1.0, deadline_s=4.0)
    got, ledger = rehearse(plan, monkeypatch, time_scale=0.01, provider_scale=0.01, deadline_s=4.0)
    assert got.deadline_s == 4.0
    assert got.elapsed_s == pytest.approx(4.0)
    assert (got.finished, got.cancelled) == (want.finished, want.cancelled)
    assert got.cancelled == ("late",)
    assert all(_close(r.deadline_at, EPOCH + timedelta(seconds=4), 0.01) for r in ledger)


def test_the_plan_page_names_every_scaled_field() -> None:
    """docs/plan.md's rehearsal section names every field scale_plan scales."""
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "plan.md").read_text("utf-8")
    section = page.split("## Rehearsing against a time-scaled server", 1)[1].split("\n## ", 1)[0]
    names = {name for fields in SECONDS_FIELDS.values() for name in fields}
    assert [name for name in sorted(names) if f"`{name}`" not in section] == []


def test_events_stay_on_the_real_clock_while_the_ledger_is_in_plan_seconds() -> None:
    """The event hook sees the measured 0.01 s; the ledger line of the same attempt says 1 s."""
    from tailkit.executor import Event, Observer
    from tests._fakeloop import run

    seen: list[Event] = []
    sink = MemorySink()
    plan = parse_plan(PLAN)

    async def main() -> None:
        executor = Executor(plan, ledger=Ledger(sink), observer=Observer(seen.append,
                            tracing=False), time_scale=0.01)  # fmt: skip
        async with executor:
            await executor.run_step("flaky", provider(0.01), run_id="r")

    run(main())
    ended = [e for e in seen if e.kind == "attempt_ended"]
    assert [e.detail["total_s"] for e in ended] == [pytest.approx(0.005)] * 2
    assert [r.total_s for r in sink.records] == [pytest.approx(0.5)] * 2
