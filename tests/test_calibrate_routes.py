"""
Calibrated first routes: a step's candidates, the route chosen among them, and why.
"""

from __future__ import annotations

import json
import math

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from typer.testing import CliRunner

from tailkit.calibration import Calibration, calibrate
from tailkit.cli import app
from tailkit.config import Shared, dump_plan, load_plan, parse_plan
from tailkit.ingest import ingest_paths
from tailkit.store import Store


RUNS, CHECK_RUNS = 3000, 6000
ROUTES = """
routes:
  a/m: {provider: a, model: m}
  a/n: {provider: a, model: n}
  b/n: {provider: b, model: n}
  b/x: {provider: b, model: x}
"""
START_S = 1_790_000_000.0  # 2026-09-21, seconds since the epoch


def write_calls(
    path: Path,
    routes: Mapping[str, dict[str, float]],
    *,
    n: int = 3000,
    seed: int = 0,
    hours: float = 24.0,
    same: bool = False,
    tag: str = "",
) -> None:
    """
    A JSONL log of ``n`` calls per route: a lognormal latency and a share of slow calls.

    ``routes`` maps ``provider/model`` to ``median`` seconds, ``tail`` (share of calls that
    take ``slow`` times longer) and ``from_h`` / ``to_h`` (hours of the log it covers, default
    all); ``same``: every route draws the same latencies (equal routes); ``tag`` starts every
    call id (two logs of one route).
    """
    rows = []
    for k, (name, shape) in enumerate(routes.items()):
        rng = np.random.default_rng(seed if same else seed + k)
        provider, model = name.split("/")
        latency = shape.get("median", 2.0) * np.exp(0.25 * rng.standard_normal(n))
        slow = rng.random(n) < shape.get("tail", 0.0)
        latency[slow] *= shape.get("slow", 8.0)
        start = shape.get("from_h", 0.0) * 3600.0
        span = (shape.get("to_h", hours) - shape.get("from_h", 0.0)) * 3600.0
        started = START_S + start + np.sort(rng.uniform(0.0, span, n))
        tokens = rng.integers(300, 400, n)
        rows += [
            {"call_id": f"{tag}{name}-{i}", "provider": provider, "model": model,
             "started_at": _iso(float(started[i])), "input_tokens": 2000,
             "output_tokens": int(tokens[i]), "status": "ok",
             "total_s": round(float(latency[i]), 4)}
            for i in range(n)
        ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).isoformat()


def store_of(folder: Path, routes: Mapping[str, dict[str, float]], **log: Any) -> Path:
    """
    A store in ``folder`` holding `write_calls`'s log.
    """
    write_calls(folder / "calls.jsonl", routes, **log)
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [folder / "calls.jsonl"]).ok
    return db


def workflow(steps: str, *, deadline: float = 12.0, budget: float = 0.08) -> str:
    """
    A workflow over `ROUTES` with these steps (YAML, indented by four).
    """
    return (
        f"tailkit_plan: 1\nworkflow: w\ndeadline_s: {deadline}\nhedge_budget: {budget}\n"
        f"{ROUTES}steps:\n{steps}"
    )


ONE_STEP = """\
  ask:
    route: {route}
    candidates: [{candidates}]
    expected_tokens: {{input: 2000, output: 350}}
"""


def run(db: Path, text: str, **options: Any) -> Calibration:
    """
    Calibrate the workflow ``text`` on the store ``db`` (few runs, no bootstrap).
    """
    with Store.open(db, read_only=True) as store:
        return calibrate(
            store, parse_plan(text), runs=RUNS, check_runs=CHECK_RUNS, seed=1, replicates=0,
            **options,
        )  # fmt: skip


@pytest.fixture(scope="module")
def tails(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store where a/m has a heavy tail (8 % of calls 8x slower) and b/n none."""
    return store_of(
        tmp_path_factory.mktemp("tails"),
        {"a/m": {"tail": 0.08}, "b/n": {"median": 2.2}, "a/n": {}, "b/x": {}},
    )


def test_the_candidate_with_the_better_tail_goes_first_and_the_basis_says_why(
    tails: Path,
) -> None:
    """a/m as written, b/n beside it: b/n goes first; basis, figures and rule say why."""
    found = run(tails, workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/n")))

    step = found.plan.steps["ask"]
    assert step.route == "b/n"
    assert step.candidates == ("a/m", "b/n")
    choice = found.route_choices["ask"]
    assert (choice.written, choice.chosen) == ("a/m", "b/n")
    a, b = choice.candidates
    assert (a.route, b.route) == ("a/m", "b/n")
    assert a.miss_rate is not None
    assert b.miss_rate is not None
    assert b.miss_rate < a.miss_rate
    assert step.basis is not None
    assert step.basis.route_choice == choice.sentence()
    assert step.basis.route_choice.startswith(f"a/m: miss {a.miss_rate:.1%}")
    assert "(chosen: b/n: fewest misses, then lower p99, then fewer extra attempts;" in (
        step.basis.route_choice
    )
    assert step.basis.calls == 3000  # the chosen route's sample
    assert parse_plan(dump_plan(found.plan)) == found.plan


@pytest.mark.parametrize("written", ["a/n", "b/n"])
def test_equal_candidates_keep_the_route_as_written(tmp_path: Path, written: str) -> None:
    """Two routes with the very same calls: the route the user wrote stays first."""
    db = store_of(tmp_path, {"a/n": {"tail": 0.05}, "b/n": {"tail": 0.05}}, same=True)

    found = run(db, workflow(ONE_STEP.format(route=written, candidates="a/n, b/n")))

    assert found.plan.steps["ask"].route == written
    choice = found.route_choices["ask"]
    first, second = choice.candidates
    assert first.miss_rate == second.miss_rate
    assert f"(chosen: {written}, as written:" in choice.sentence()


def test_a_step_without_candidates_keeps_its_route_and_says_nothing(tails: Path) -> None:
    """Only the step with candidates moves; the other keeps its route, no route_choice."""
    steps = ONE_STEP.format(route="a/m", candidates="a/m, b/n") + (
        "  after:\n    depends_on: [ask]\n    route: a/m\n"
        "    expected_tokens: {input: 2000, output: 350}\n"
    )
    found = run(tails, workflow(steps, deadline=25.0))

    assert found.plan.steps["ask"].route == "b/n"
    after = found.plan.steps["after"]
    assert after.route == "a/m"
    assert after.basis is not None
    assert after.basis.route_choice is None
    assert set(found.route_choices) == {"ask"}
    assert set(found.search.routes) == {"ask"}


def test_without_candidates_the_search_is_the_one_it_was(tails: Path) -> None:
    """A single candidate is no choice: the same plan as without candidates, same search."""
    alone = run(tails, workflow(ONE_STEP.replace("    candidates: [{candidates}]\n", "").format(
        route="a/m")))  # fmt: skip
    listed = run(tails, workflow(ONE_STEP.format(route="a/m", candidates="a/m")))

    assert alone.route_choices == {} == listed.route_choices
    assert alone.search.evaluated == listed.search.evaluated
    assert alone.search.choices == listed.search.choices
    assert alone.plan.steps["ask"].basis == listed.plan.steps["ask"].basis


def _independent(same_provider: float) -> dict[str, Shared]:
    return {"ask": Shared(other_provider=0.0, same_provider=same_provider, source="test",
                          evidence="set by the test")}  # fmt: skip


def test_a_hedge_may_go_to_another_candidate(tmp_path: Path) -> None:
    """a/m and b/x serve different models: a hedge between them is only there as candidates."""
    db = store_of(tmp_path, {"a/m": {"tail": 0.06}, "b/x": {"tail": 0.06, "median": 2.3}})
    text = workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/x"), budget=0.12)

    found = run(db, text, sharing=_independent(0.9))

    step = found.plan.steps["ask"]
    assert (step.route, step.on_cutoff, step.hedge_route) == ("a/m", "hedge", "b/x")
    alone = run(db, text.replace("    candidates: [a/m, b/x]\n", ""), sharing=_independent(0.9))
    assert alone.plan.steps["ask"].on_cutoff != "hedge"  # no other route serves model m
    assert found.result.miss_rate < alone.result.miss_rate


@pytest.mark.parametrize(("same_provider", "hedge_on"), [(0.0, "a"), (0.95, "b")])
def test_what_a_repeat_shares_on_a_provider_picks_the_hedge(
    tmp_path_factory: pytest.TempPathFactory, same_provider: float, hedge_on: str
) -> None:
    """Independent repeats: a hedge on a's faster routes; repeats that share a's slow: on b."""
    db = _three(tmp_path_factory)
    text = workflow(ONE_STEP.format(route="a/m", candidates="a/m, a/n, b/n"), budget=0.12)

    found = run(db, text, sharing=_independent(same_provider))

    step = found.plan.steps["ask"]
    assert step.route in ("a/m", "a/n")  # b/n is slower at the median
    assert step.on_cutoff == "hedge"
    assert step.hedge_route is not None
    assert step.hedge_route != step.route
    assert found.plan.routes[step.hedge_route].provider == hedge_on
    assert step.basis is not None
    assert step.basis.shared is not None
    assert step.basis.shared.same_provider == same_provider


_THREE: list[Path] = []


def _three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three routes with the same tail; b/n's median is 20 % slower (built once)."""
    if not _THREE:
        tail = {"tail": 0.06}
        shapes = {"a/m": tail, "a/n": tail, "b/n": {**tail, "median": 2.4}}
        _THREE.append(store_of(tmp_path_factory.mktemp("three"), shapes))
    return _THREE[0]


def test_a_thin_candidate_is_left_out_and_said_so(tmp_path: Path) -> None:
    """A candidate with too few calls is not tried; its figures say why, the rest goes on."""
    write_calls(tmp_path / "a.jsonl", {"a/m": {"tail": 0.05}})
    write_calls(tmp_path / "b.jsonl", {"b/n": {}}, n=50)
    db = tmp_path / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]).ok

    found = run(db, workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/n")))

    assert found.plan.steps["ask"].route == "a/m"
    _, thin = found.route_choices["ask"].candidates
    assert thin.miss_rate is None
    assert thin.calls is None
    assert thin.left_out == "fewer than 200 calls in the step's bucket"
    assert "b/n: left out, fewer than 200 calls in the step's bucket" in (
        found.plan.steps["ask"].basis.route_choice  # type: ignore[union-attr, operator]
    )


def test_cli_prints_a_line_per_step_with_candidates_and_json_holds_the_figures(
    tails: Path, tmp_path: Path
) -> None:
    """The table's route line, and --json's route_choice: candidates, figures, chosen."""
    source = tmp_path / "workflow.yaml"
    source.write_text(workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/n")))
    out = tmp_path / "plan.yaml"
    common = ["calibrate", str(source), "--out", str(out), "--db", str(tails), "--runs",
              str(RUNS), "--check-runs", str(CHECK_RUNS), "--replicates", "0"]  # fmt: skip
    runner = CliRunner()

    text = runner.invoke(app, common)
    payload = runner.invoke(app, [*common, "--json"])

    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    at = lines.index("first route among the candidates (workflow miss rate, p99, extra attempts):")
    assert lines[at + 1].startswith("  ask: a/m: miss ")
    assert "(chosen: b/n: fewest misses" in lines[at + 1]
    assert payload.exit_code == 0, payload.output
    data = json.loads(payload.stdout)
    choice = data["route_choice"]["ask"]
    assert (choice["written"], choice["chosen"]) == ("a/m", "b/n")
    assert [c["route"] for c in choice["candidates"]] == ["a/m", "b/n"]
    assert all(
        set(c) == {"route", "calls", "miss_rate", "p99_s", "extra_attempts", "left_out"}
        for c in choice["candidates"]
    )
    assert choice["candidates"][1]["miss_rate"] < choice["candidates"][0]["miss_rate"]
    assert data["plan"]["steps"]["ask"]["route"] == "b/n"
    assert data["plan"] == yaml.safe_load(out.read_text())
    assert load_plan(out).steps["ask"].basis.route_choice  # type: ignore[union-attr]
    assert math.isfinite(choice["candidates"][0]["p99_s"])
