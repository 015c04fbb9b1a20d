"""
The simulator plays live routing: the batch rule, its observations, and fixed routing untouched.
"""

from __future__ import annotations

import dataclasses
import json
import math

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailkit.config import LiveRouting, Plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.ingest import ingest_paths
from tailkit.simulation import (
    RouteSample,
    ThinSampleError,
    compare_policies,
    load_samples,
    simulate,
    simulate_model,
    workflow_model,
)
from tailkit.simulation.lowlevel import (
    Draws,
    LiveState,
    RunOutcome,
    reference_live,
    simulate_runs,
    step_routes,
)
from tailkit.store import Store
from tests.test_twin import LIVE_PLAN, _live_samples


TWO = """\
tailkit_plan: 1
workflow: two
deadline_s: 30
hedge_budget: 1.0
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  h/m: {provider: h, model: m}
steps:
  s:
    route: a/m
    cutoff_s: 3.0
    on_cutoff: retry
    predicted: {p50_s: 1.0, p99_s: 3.0, hedge_rate: 0.0}
"""


def _flat(seconds: float) -> RouteSample:
    """A route whose every call takes ``seconds`` (not streamed)."""
    return RouteSample.from_grid(np.full(16, seconds))


def _two(live: LiveRouting | None, **step: Any) -> Plan:
    """One step on a/m, b/m as candidates, with ``live`` and other fields replaced."""
    plan = parse_plan(TWO)
    s = dataclasses.replace(plan.steps["s"], candidates=("a/m", "b/m"), live=live, **step)
    return dataclasses.replace(plan, steps={"s": s})


def _rule(**kw: object) -> LiveRouting:
    fields: dict[str, object] = {
        "quantile": 0.5,
        "cutoff_bounds_s": (1.5, 4.0),
        "prior_s": {"a/m": 5.0, "b/m": 3.0},
        "window": 5,
        "min_calls": 3,
        "explore_every": 4,
    }
    fields.update(kw)
    return LiveRouting(**fields)  # type: ignore[arg-type]


def _decisions(
    plan: Plan, samples: dict[tuple[str, str], RouteSample], runs: int, concurrency: int
) -> tuple[list[str], list[float], list[bool], LiveState]:
    """The engine's route, cutoff and explore flag of step ``s`` in each run."""
    model = workflow_model(plan, samples)
    state = LiveState(concurrency)
    out = simulate_runs(model, Draws(runs, seed=1), live=state)
    live = out.steps[0].live
    assert live is not None
    routes = plan.steps["s"].first_routes()
    return (
        [routes[r] for r in live.route.tolist()],
        live.cutoff_s.tolist(),
        live.explored.tolist(),
        state,
    )


FLAT = {("s", "a/m"): _flat(1.0), ("s", "b/m"): _flat(2.0), ("s", "h/m"): _flat(1.0)}


def test_priors_stand_while_thin_then_the_window_decides() -> None:
    """Runs one by one: b's lower prior wins until the windows fill; explore every 4th run."""
    routes, cuts, explored, _ = _decisions(_two(_rule()), FLAT, 9, 1)
    # runs 0-2: thin windows, priors a 5.0, b 3.0: b, cut at 3.0; run 3 explores a (cut at
    # its prior 5.0 clamped to 4.0); runs 4-6: b's window [2, 2, 2] -> 2.0 beats a's prior;
    # run 7 explores a again; run 8: still b (a has 2 calls, below min_calls)
    assert routes == ["b/m", "b/m", "b/m", "a/m", "b/m", "b/m", "b/m", "a/m", "b/m"]
    assert cuts == [3.0, 3.0, 3.0, 4.0, 2.0, 2.0, 2.0, 4.0, 2.0]
    assert explored == [False, False, False, True, False, False, False, True, False]


def test_a_full_window_takes_over_from_the_prior() -> None:
    """Once a's window holds min_calls observations its value (1 s) beats b's (2 s)."""
    rule = _rule(explore_every=2, min_calls=2)
    routes, cuts, _, state = _decisions(_two(rule), FLAT, 8, 1)
    # 0 b (prior), 1 explore a, 2 b (one call: still its prior), 3 explore a (b's window
    # [2, 2] -> 2.0 is best); a now [1, 1]: 1.0 is best from run 4 on, cut at 1.0 clamped to
    # 1.5; runs 5 and 7 explore b, cut at its 2.0
    assert routes == ["b/m", "a/m", "b/m", "a/m", "a/m", "b/m", "a/m", "b/m"]
    assert cuts == [3.0, 4.0, 3.0, 4.0, 1.5, 2.0, 1.5, 2.0]
    assert state.windows("s")["a/m"].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert state.windows("s")["b/m"].tolist() == [2.0, 2.0, 2.0]  # run 7's is still in flight


def test_a_cut_first_attempt_is_censored_and_its_quantile_sets_the_high_bound() -> None:
    """Cut at its cutoff, a first attempt tells inf; a window whose quantile is inf cuts high."""
    rule = _rule(prior_s={"a/m": 5.0, "b/m": 1.0}, cutoff_bounds_s=(1.5, 2.5), explore_every=0)
    samples = {**FLAT, ("s", "b/m"): _flat(2.0)}
    routes, cuts, _, state = _decisions(_two(rule), samples, 6, 1)
    # b's prior (1.0) clamps to 1.5 < 2.0: cut, retried; its window fills with inf, so b's
    # value becomes inf: a (prior 5.0) is best from run 3 on, cut at the high bound 2.5
    assert routes == ["b/m", "b/m", "b/m", "a/m", "a/m", "a/m"]
    assert cuts == [1.5, 1.5, 1.5, 2.5, 2.5, 2.5]
    assert state.windows("s")["b/m"].tolist() == [math.inf] * 3
    assert state.windows("s")["a/m"].tolist() == [1.0, 1.0]


def test_cutoffs_stay_within_the_bounds() -> None:
    """Whatever the windows say, every live cutoff is within the plan's bounds."""
    plan = parse_plan(LIVE_PLAN)
    result = simulate(plan, _live_samples(), runs=3000, seed=4)
    assert {s.name for s in result.live} == {"draft", "check", "polish"}
    for summary in result.live:
        low, high = plan.steps[summary.name].live.cutoff_bounds_s  # type: ignore[union-attr]
        assert summary.cutoff_min_s is not None
        assert summary.cutoff_max_s is not None
        assert low <= summary.cutoff_min_s < summary.cutoff_max_s <= high
        assert sum(summary.route_share.values()) == pytest.approx(1.0)


def test_concurrent_runs_decide_from_the_state_at_their_batch_start() -> None:
    """Four runs in flight: all four use the priors; the next batch sees all four observations."""
    routes, cuts, explored, _ = _decisions(_two(_rule()), FLAT, 12, 4)
    # batch 0 (runs 0-3): priors; run 3 is an explore turn (the counter still advances)
    assert routes[:4] == ["b/m", "b/m", "b/m", "a/m"]
    assert cuts[:4] == [3.0, 3.0, 3.0, 4.0]
    # batch 1 (runs 4-7): b's window [2, 2, 2] -> 2.0; a has one call: its prior stands
    assert routes[4:8] == ["b/m", "b/m", "b/m", "a/m"]
    assert cuts[4:8] == [2.0, 2.0, 2.0, 4.0]
    assert explored == [False, False, False, True] * 3
    one, _, _, _ = _decisions(_two(_rule(explore_every=0)), FLAT, 4, 1)
    four, _, _, _ = _decisions(_two(_rule(explore_every=0)), FLAT, 4, 4)
    assert one == four == ["b/m"] * 4
    # b's prior (1.0, cut at 1.5) is wrong: its first call (2 s) is cut, and its window's inf
    # sends the next run to a; four runs in flight all went by the prior before it was seen
    stale = _rule(explore_every=0, prior_s={"a/m": 1.2, "b/m": 1.0}, min_calls=1)
    alone, _, _, _ = _decisions(_two(stale), FLAT, 8, 1)
    together, _, _, _ = _decisions(_two(stale), FLAT, 8, 4)
    assert alone == ["b/m"] + ["a/m"] * 7
    assert together == ["b/m"] * 4 + ["a/m"] * 4


def test_stale_state_changes_the_decisions() -> None:
    """The same plan with 1 and with 8 runs in flight: the same rule, other decisions."""
    plan = parse_plan(LIVE_PLAN)
    model = workflow_model(plan, _live_samples())
    runs = 400
    picks = {}
    for concurrency in (1, 8):
        out = simulate_runs(model, Draws(runs, seed=2), live=LiveState(concurrency))
        picks[concurrency] = out
    draft = 0
    one, eight = (picks[c].steps[draft].live for c in (1, 8))
    assert one is not None
    assert eight is not None
    assert not np.array_equal(one.cutoff_s, eight.cutoff_s, equal_nan=True)
    # in a batch of 8 every run that does not explore gets the same cutoff
    for lo in range(0, runs, 8):
        rows = slice(lo, lo + 8)
        plain = (eight.route[rows] >= 0) & ~eight.explored[rows]
        best = eight.cutoff_s[rows][plain]
        assert best.size == 0 or np.all(best == best[0])


@pytest.mark.parametrize("concurrency", [1, 5, 16])
def test_the_engine_decides_as_the_one_run_reference(concurrency: int) -> None:
    """Route, reason and cutoff of every live decision, and every run's end, as the reference."""
    model = workflow_model(parse_plan(LIVE_PLAN), _live_samples())
    runs = 400
    draws = Draws(runs, seed=21, keep=True)
    stacks = {s.name: draws.stack(s.name) for s in model.steps}
    per_run = [[[int(x) for x in stacks[s.name][:, r]] for s in model.steps] for r in range(runs)]
    reference = reference_live(model, per_run, concurrency=concurrency)
    engine = simulate_runs(model, draws, live=LiveState(concurrency))
    for i, step in enumerate(model.steps):
        chosen = engine.steps[i].live
        if step.live is None:
            assert chosen is None
            continue
        assert chosen is not None
        for r, (_, decided) in enumerate(reference):
            d = decided.get(step.name)
            if d is None:
                assert chosen.route[r] == -1
                continue
            assert step.live.routes[chosen.route[r]] == d.route, (r, step.name)
            assert bool(chosen.explored[r]) == (d.why == "explore")
            assert chosen.cutoff_s[r] == d.cutoff_s
    np.testing.assert_array_equal(engine.end_s, [t.end_s for t, _ in reference])
    np.testing.assert_array_equal(engine.ok, [t.ok for t, _ in reference])


def test_blocks_of_runs_decide_as_one_block() -> None:
    """Two blocks of 100 runs through one state (batches of 16 span them): as one of 200."""
    model = workflow_model(parse_plan(LIVE_PLAN), _live_samples())
    whole = simulate_runs(model, Draws(200, seed=5), live=LiveState(16))
    state, draws = LiveState(16), Draws(100, seed=5)
    parts: list[RunOutcome] = [simulate_runs(model, draws, live=state) for _ in range(2)]
    np.testing.assert_array_equal(whole.end_s, np.concatenate([p.end_s for p in parts]))
    for i, step in enumerate(whole.steps):
        if step.live is not None:
            got = np.concatenate([p.steps[i].live.route for p in parts])  # type: ignore[union-attr]
            np.testing.assert_array_equal(step.live.route, got)


def test_live_false_is_fixed_routing_byte_for_byte() -> None:
    """live=False: the numbers of the same plan without candidates or live blocks, exactly."""
    plan = parse_plan(LIVE_PLAN)
    fixed = dataclasses.replace(
        plan,
        steps={n: dataclasses.replace(s, candidates=(), live=None) for n, s in plan.steps.items()},
    )
    samples = _live_samples()
    off = simulate(plan, samples, runs=5000, seed=3, live=False)
    before = simulate(fixed, samples, runs=5000, seed=3)
    assert off.live == ()
    assert json.dumps(off.as_dict(runs=True)) == json.dumps(before.as_dict(runs=True))
    on = simulate(plan, samples, runs=5000, seed=3)
    assert on.as_dict() != before.as_dict()
    assert "live" in on.as_dict()


def test_a_plan_without_live_blocks_is_unchanged() -> None:
    """No live block: concurrency and live change nothing, and the result says nothing of it."""
    plan = parse_plan(TWO)
    samples = dict(FLAT)
    samples[("s", "a/m")] = RouteSample.lognormal(1.2, 0.6)
    base = simulate(plan, samples, runs=3000, seed=9)
    changes: list[dict[str, Any]] = [{"concurrency": 1}, {"concurrency": 7}, {"live": False}]
    for kw in changes:
        again = simulate(plan, samples, runs=3000, seed=9, **kw)
        assert json.dumps(again.as_dict(runs=True)) == json.dumps(base.as_dict(runs=True))
    assert base.live == ()
    assert "live" not in base.as_dict()


def test_a_route_with_a_slower_tail_gets_few_first_attempts() -> None:
    """Two routes with one median, one with a far heavier tail: it gets little beyond exploring."""
    rule = _rule(
        quantile=0.95, cutoff_bounds_s=(1.0, 20.0), prior_s={"a/m": 4.0, "b/m": 4.0},
        window=100, min_calls=20, explore_every=50,
    )  # fmt: skip
    samples = {
        ("s", "a/m"): RouteSample.lognormal(2.0, 0.25),
        ("s", "b/m"): RouteSample.lognormal(2.0, 1.0),
        ("s", "h/m"): _flat(5.0),
    }
    plan = _two(rule, cutoff_s=8.0, on_cutoff="hedge", hedge_route="h/m")
    result = simulate(plan, samples, runs=20_000, seed=6)
    (summary,) = result.live
    assert summary.route_share["b/m"] < 0.03  # its explore turns (2 %), and a few more
    assert summary.explore_rate == pytest.approx(1 / 50, abs=1e-3)
    assert summary.cutoff_mean_s == pytest.approx(samples[("s", "a/m")].quantile(0.95), rel=0.1)
    swapped = simulate(
        plan, {**samples, ("s", "a/m"): samples[("s", "b/m")], ("s", "b/m"): samples[("s", "a/m")]},
        runs=20_000, seed=6,
    )  # fmt: skip
    assert swapped.live[0].route_share["a/m"] < 0.03


def test_the_result_reports_each_live_step_in_json() -> None:
    """Per live step: first attempts, route shares, explore rate, live cutoff mean/min/max."""
    result = simulate(parse_plan(LIVE_PLAN), _live_samples(), runs=2000, seed=1)
    out = json.loads(json.dumps(result.as_dict()))
    assert set(out["live"]) == {"draft", "check", "polish"}
    draft = out["live"]["draft"]
    assert set(draft) == {
        "first_attempts", "route_share", "explore_rate", "cutoff_mean_s", "cutoff_min_s",
        "cutoff_max_s",
    }  # fmt: skip
    assert draft["first_attempts"] == 2000
    assert set(draft["route_share"]) == {"a/m", "f/m", "c/m"}
    assert draft["explore_rate"] == pytest.approx(0.2, abs=0.002)
    assert 2.0 <= draft["cutoff_min_s"] <= draft["cutoff_mean_s"] <= draft["cutoff_max_s"] <= 6.0


def test_reference_policies_route_fixed() -> None:
    """compare_policies: the plan routes live, the reference policies on each step's route."""
    results = compare_policies(parse_plan(LIVE_PLAN), _live_samples(), runs=2000, seed=1)
    assert results["plan"].live
    assert all(not results[p].live for p in ("none", "retry_p95", "hedge_p95"))


def test_concurrency_below_one_is_refused() -> None:
    """No run in flight is no simulation."""
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        simulate(parse_plan(LIVE_PLAN), _live_samples(), runs=10, concurrency=0)
    with pytest.raises(ValueError, match="concurrency"):
        simulate_model(workflow_model(parse_plan(TWO), FLAT), runs=10, concurrency=0)


def test_a_live_steps_candidates_are_routes_it_may_use() -> None:
    """step_routes: a live step's candidates join its routes; a fixed step's do not."""
    plan = parse_plan(LIVE_PLAN)
    assert step_routes(plan.steps["draft"]) == ("a/m", "b/m", "f/m", "c/m")
    fixed = dataclasses.replace(plan.steps["draft"], live=None)
    assert step_routes(fixed) == ("a/m", "b/m")


STORE_PLAN = """\
tailkit_plan: 1
workflow: w
deadline_s: 30
routes:
  p/m: {provider: p, model: m}
  q/m: {provider: q, model: m}
  r/m: {provider: r, model: m}
steps:
  s:
    route: p/m
    candidates: [p/m, q/m, r/m]
    cutoff_s: 4.0
    on_cutoff: retry
"""


def _ledger(path: Path) -> Path:
    """p/m: 300 calls, old and slow then recent and fast; q/m: 300 calls; r/m: 5 calls."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    rows = []
    for i in range(300):
        old = i < 150
        rows.append({
            "call_id": f"p{i}", "provider": "p", "model": "m", "status": "ok",
            "total_s": (3.0 if old else 1.0) + i / 1000,
            "started_at": (start + timedelta(days=0 if old else 3, seconds=i)).isoformat(),
        })  # fmt: skip
        rows.append({
            "call_id": f"q{i}", "provider": "q", "model": "m", "status": "ok",
            "total_s": 2.0 + i / 1000,
            "started_at": (start + timedelta(days=3, seconds=i)).isoformat(),
        })  # fmt: skip
    rows += [
        {"call_id": f"r{i}", "provider": "r", "model": "m", "status": "ok", "total_s": 1.0}
        for i in range(5)
    ]
    out = path / "calls.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_load_samples_loads_candidates_and_calls_since(tmp_path: Path) -> None:
    """A fixed step's thin candidate is left out, a live step's refused; since= keeps the recent."""
    plan = parse_plan(STORE_PLAN)
    with Store.open(tmp_path / "s.duckdb") as store:
        assert ingest_paths(store, [_ledger(tmp_path)]).ok
        samples = load_samples(store, plan, min_calls=100)
        assert set(samples) == {("s", "p/m"), ("s", "q/m")}  # r/m has 5 calls: left out
        assert samples[("s", "p/m")].calls == 300
        live = _rule(prior_s={"p/m": 2.0, "q/m": 2.0, "r/m": 2.0})
        routed = dataclasses.replace(
            plan, steps={"s": dataclasses.replace(plan.steps["s"], live=live)}
        )
        with pytest.raises(ThinSampleError, match="route r/m has 5 calls"):
            load_samples(store, routed, min_calls=100)
        recent = load_samples(store, plan, min_calls=100, since=datetime(2026, 12, 2, tzinfo=UTC))
        assert recent[("s", "p/m")].calls == 150
        assert recent[("s", "p/m")].quantile(0.5) < 1.3 < samples[("s", "p/m")].quantile(0.5)
        assert recent[("s", "q/m")].calls == 300
        with pytest.raises(ThinSampleError, match=r"p/m has no calls"):
            load_samples(store, plan, min_calls=100, since=datetime(2027, 1, 1, tzinfo=UTC))
        with pytest.raises(ConfigError, match="time-zone-aware") as naive:
            load_samples(store, plan, min_calls=100, since=datetime(2026, 12, 2))
        assert naive.value.field == "since"


def _variant_plan() -> Plan:
    """LIVE_PLAN with a downgrade on check and a draft that only routes (no cutoff)."""
    plan = parse_plan(LIVE_PLAN)
    steps = dict(plan.steps)
    steps["check"] = dataclasses.replace(
        steps["check"], on_cutoff="downgrade", downgrade_route="d/small"
    )
    steps["draft"] = dataclasses.replace(
        steps["draft"], cutoff_s=None, on_cutoff="wait", hedge_route=None, upgrade_route=None
    )
    return dataclasses.replace(plan, steps=steps)


@pytest.mark.parametrize("shared", [False, True])
def test_downgrades_routing_only_and_shared_repeats_as_the_reference(shared: bool) -> None:
    """A downgrade, a live step without a cutoff, repeats that share the job: as the reference."""
    from tailkit.config import Shared

    plan = _variant_plan()
    sharing = None
    if shared:
        both = Shared(other_provider=0.5, same_provider=0.8, source="test", evidence="given")
        sharing = dict.fromkeys(plan.steps, both)
    model = workflow_model(plan, _live_samples(), sharing=sharing)
    runs = 300
    draws = Draws(runs, seed=8, keep=True)
    stacks = {s.name: draws.stack(s.name) for s in model.steps}
    per_run = [[[int(x) for x in stacks[s.name][:, r]] for s in model.steps] for r in range(runs)]
    reference = reference_live(model, per_run, concurrency=3)
    engine = simulate_runs(model, draws, live=LiveState(3))
    draft = engine.steps[0].live
    assert draft is not None
    assert np.isnan(draft.cutoff_s).all()  # it only routes
    assert {d["draft"].route for _, d in reference} == {"a/m", "f/m", "c/m"}
    for i, step in enumerate(model.steps):
        if step.live is None:
            continue
        chosen = engine.steps[i].live
        assert chosen is not None
        got = [step.live.routes[r] if r >= 0 else None for r in chosen.route.tolist()]
        assert got == [d[step.name].route if step.name in d else None for _, d in reference]
    np.testing.assert_allclose(engine.end_s, [t.end_s for t, _ in reference], rtol=1e-12)
    np.testing.assert_array_equal(engine.ok, [t.ok for t, _ in reference])


def test_the_command_plays_live_and_fixed(tmp_path: Path) -> None:
    """The simulate command: the live block in --json; --fixed has none; --concurrency 0 refused."""
    from typer.testing import CliRunner

    from tailkit.cli import app
    from tailkit.config import dump_plan

    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [_ledger(tmp_path)]).ok
    live = _rule(prior_s={"p/m": 2.0, "q/m": 2.0}, cutoff_bounds_s=(1.0, 8.0))
    text = STORE_PLAN.replace("[p/m, q/m, r/m]", "[p/m, q/m]")
    plan = parse_plan(text)
    routed = dataclasses.replace(plan, steps={"s": dataclasses.replace(plan.steps["s"], live=live)})
    path = tmp_path / "plan.yaml"
    path.write_text(dump_plan(routed))
    base = ["simulate", str(path), "--db", str(db), "--runs", "2000", "--min-calls", "100"]
    runner = CliRunner()
    played = runner.invoke(app, [*base, "--json", "--concurrency", "4"])
    assert played.exit_code == 0, played.output
    shares = json.loads(played.output)["policies"]["plan"]["live"]["s"]["route_share"]
    assert set(shares) == {"p/m", "q/m"}
    assert sum(shares.values()) == pytest.approx(1.0)
    fixed = runner.invoke(app, [*base, "--json", "--fixed"])
    assert fixed.exit_code == 0, fixed.output
    assert "live" not in json.loads(fixed.output)["policies"]["plan"]
    refused = runner.invoke(app, [*base, "--concurrency", "0"])
    assert refused.exit_code == 2
    assert "--concurrency" in refused.output


@pytest.mark.parametrize("concurrency", [1, 16])
def test_when_every_value_is_a_cut_call_the_least_cut_route_goes_first(concurrency: int) -> None:
    """a/m cut on half its calls, b/m on a tenth: both inf at p95; b/m wins, as the reference."""
    rule = _rule(
        quantile=0.95, cutoff_bounds_s=(1.0, 3.0), prior_s={"a/m": 2.0, "b/m": 2.5},
        window=100, min_calls=20, explore_every=50,
    )  # fmt: skip
    samples = {
        ("s", "a/m"): RouteSample.lognormal(3.0, 0.5),  # half past the cutoff of 3 s
        ("s", "b/m"): RouteSample.lognormal(3.0 / math.exp(1.2816 * 0.5), 0.5),  # a tenth
        ("s", "h/m"): _flat(1.0),
    }
    model = workflow_model(_two(rule, cutoff_s=3.0, on_cutoff="retry"), samples)
    runs = 600
    draws = Draws(runs, seed=4, keep=True)
    stack = draws.stack("s")
    per_run = [[[int(x) for x in stack[:, r]]] for r in range(runs)]
    reference = reference_live(model, per_run, concurrency=concurrency)
    engine = simulate_runs(model, draws, live=LiveState(concurrency))
    live = engine.steps[0].live
    assert live is not None
    routes = model.steps[0].live.routes  # type: ignore[union-attr]
    assert [routes[r] for r in live.route.tolist()] == [d["s"].route for _, d in reference]
    late = live.route[200:][~live.explored[200:]]
    assert np.mean(late == routes.index("b/m")) > 0.95
