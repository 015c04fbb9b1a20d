"""
`tailkit replay`: outcome tables, serving them, the timing error, and replay against simulation.
"""

from __future__ import annotations

import asyncio
import json
import math
import random

from pathlib import Path

import numpy as np
import pytest

from rich.console import Console
from typer.testing import CliRunner

from tailkit.calibration import calibrate, workflow_of
from tailkit.check.lowlevel import rate
from tailkit.cli import app
from tailkit.cli._replay import render_replay
from tailkit.config import dump_plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.estimate import Estimate
from tailkit.executor import AttemptError
from tailkit.ingest import ingest_paths
from tailkit.replay import replay
from tailkit.replay._fidelity import fidelity
from tailkit.replay._replay import _chosen_scale
from tailkit.replay._tables import _outcomes
from tailkit.replay.lowlevel import MAX_ERROR_SHARE, agrees, smallest_cutoff_s, timing_errors
from tailkit.serve import ModelProfile, ServeConfig, Server, serve_outcomes
from tailkit.serve.lowlevel import INVALID_MARK, Outcomes, dump_outcomes
from tailkit.simulation import RouteSample, load_samples, simulate_model, workflow_model
from tailkit.simulation.lowlevel import default_as_independent
from tailkit.store import Store


WORKFLOW = """
tailkit_plan: 1
workflow: small
deadline_s: 24
hedge_budget: 0.1
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  a/small: {provider: a, model: small}
steps:
  ask:
    route: a/m
    expected_tokens: {input: 2000, output: 300}
    hedge_route: b/m
  answer:
    depends_on: [ask]
    route: b/m
    expected_tokens: {input: 2000, output: 300}
    hedge_route: a/m
  tag:
    depends_on: [ask]
    required: false
    route: a/small
    expected_tokens: {input: 2000, output: 300}
"""


def _calls(path: Path, *, seed: int = 1, per_route: int = 1500) -> None:
    """A log of three routes: lognormal TTFT with 8 % stalls ×6, a decode time, 2 % errors."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as out:
        for provider, model, median in (("a", "m", 2.0), ("b", "m", 2.5), ("a", "small", 1.0)):
            for i in range(per_route):
                ttft = median * math.exp(0.3 * rng.standard_normal())
                if rng.random() < 0.08:
                    ttft *= 6
                total = ttft + 4.0 * math.exp(0.2 * rng.standard_normal())
                failed = rng.random() < 0.02
                row = {
                    "call_id": f"{provider}-{model}-{i}", "provider": provider, "model": model,
                    "input_tokens": 2000, "output_tokens": 300,
                    "status": "error" if failed else "ok",
                    "ttft_s": None if failed else round(ttft, 4),
                    "total_s": round(total if not failed else 1.5, 4),
                }  # fmt: skip
                out.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store with the three routes, and the small workflow calibrated on it."""
    folder = tmp_path_factory.mktemp("replay")
    _calls(folder / "calls.jsonl")
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [folder / "calls.jsonl"]).ok
        found = calibrate(store, parse_plan(WORKFLOW), runs=4000, check_runs=20_000, seed=2)
    plan = folder / "plan.yaml"
    plan.write_text(dump_plan(found.plan), encoding="utf-8")
    return db, plan


def test_outcome_table_is_the_simulators_table() -> None:
    """The served table, expanded by its counts, is slot for slot the simulator's table."""
    rng = np.random.default_rng(3)
    total = np.sort(rng.lognormal(0.0, 0.5, 900))
    sample = RouteSample.from_latencies(
        total, ttft_s=total * 0.3, error_rate=0.05, error_s=np.full(10, 0.2), invalid_rate=0.02
    )
    table = _outcomes(sample, 300)
    counts = table.counts
    assert counts is not None
    assert 65_536 == sum(counts) == table.slots
    ends = np.repeat(table.total_s, counts)
    firsts = np.repeat(table.ttft_s, counts)
    kinds = np.repeat(np.array(list(table.kinds)), counts)
    assert np.array_equal(ends, sample.end_table)
    ok = sample.ok_entries
    assert np.array_equal(firsts[:ok], sample.ttft_table[:ok])
    assert (kinds[ok:] == "e").all()
    assert np.array_equal(kinds[:ok] == "i", sample.invalid_table[:ok])
    assert len(table.kinds) < 65_536 / 10  # each measured call once (split by invalid slots)


def test_outcomes_are_drawn_by_their_counts() -> None:
    """Each entry is drawn in proportion to its count."""
    table = Outcomes((0.1, 0.2, 0.3), (1.0, 1.0, 1.0), "ooe", counts=(1, 6, 3))
    rng = random.Random(0)  # noqa: S311 - a seeded draw, not cryptography
    draws = [table.pick(rng) for _ in range(20_000)]
    for entry, share in ((0, 0.1), (1, 0.6), (2, 0.3)):
        seen = draws.count(entry) / len(draws)
        assert abs(seen - share) < 5 * math.sqrt(share * (1 - share) / len(draws))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttft_s": (0.1,), "total_s": (1.0, 2.0), "kinds": "oo"}, "equal, non-zero"),
        ({"ttft_s": (2.0,), "total_s": (1.0,), "kinds": "o"}, "ttft_s <= total_s"),
        ({"ttft_s": (0.1,), "total_s": (1.0,), "kinds": "x"}, r"o \(ok\), e \(error\)"),
        ({"ttft_s": (0.1,), "total_s": (1.0,), "kinds": "o", "counts": (0,)}, "counts"),
    ],
)
def test_bad_outcome_tables_are_refused(kwargs: dict[str, object], message: str) -> None:
    """A malformed table names what is wrong."""
    with pytest.raises(ConfigError, match=message):
        Outcomes(**kwargs)  # type: ignore[arg-type]


def test_outcomes_file_round_trips_and_names_its_errors(tmp_path: Path) -> None:
    """dump_outcomes → serve_outcomes gives the same tables; a broken file names itself."""
    table = Outcomes((0.1, 0.5), (1.0, 2.0), "oi", output_tokens=40, counts=(3, 1))
    path = tmp_path / "outcomes.json"
    path.write_text(dump_outcomes({"m": (table, 5)}, time_scale=0.5, seed=4, lead_s=0.01))
    config = serve_outcomes(path)
    assert (0.5, 4) == (config.time_scale, config.seed)
    served = config.models["m"].outcomes
    assert served is not None
    assert (table.ttft_s, table.total_s, table.kinds, table.counts) == (
        served.ttft_s, served.total_s, served.kinds, served.counts)  # fmt: skip
    assert (40, 0.01, 5) == (served.output_tokens, served.lead_s, config.models["m"].chunk_tokens)
    path.write_text('{"tailkit_outcomes": 1, "models": {"m": {"ttft_s": [1], "total_s": [0.5]}}}')
    with pytest.raises(ConfigError, match=r"outcomes.json: models\.m"):
        serve_outcomes(path)
    with pytest.raises(ConfigError, match="no such outcomes file"):
        serve_outcomes(tmp_path / "missing.json")


def test_served_outcomes_fail_and_invalidate_as_measured() -> None:
    """Errors answer 5xx, invalid outputs carry the mark, and the access log keeps the intent."""
    import httpx

    table = Outcomes((0.01, 0.02, 0.03), (0.02, 0.02, 0.05), "oei", output_tokens=8)
    config = ServeConfig(models={"m": ModelProfile(outcomes=table, chunk_tokens=4)},
                         time_scale=0.1, seed=5)  # fmt: skip

    async def main() -> tuple[list[int], list[str], list[dict[str, object]]]:
        async with Server(config) as server, httpx.AsyncClient(base_url=server.url) as client:
            statuses, texts = [], []
            for _ in range(60):
                response = await client.post(
                    "/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                )
                statuses.append(response.status_code)
                if response.status_code == 200:
                    texts.append(response.json()["choices"][0]["message"]["content"])
            return statuses, texts, [r.attrs for r in server.records]

    statuses, texts, attrs = asyncio.run(main())
    assert {200, 500} == set(statuses)
    assert any(t.startswith(INVALID_MARK) for t in texts)
    assert any(not t.startswith(INVALID_MARK) for t in texts)
    intended = {(round(a["intended_ttft_s"], 9), round(a["intended_total_s"], 9)) for a in attrs}
    assert {(0.001, 0.002), (0.002, 0.002), (0.003, 0.005)} == intended


def test_timing_errors_join_the_ledger_to_the_access_log(tmp_path: Path) -> None:
    """Each client timing is compared with the server's intent for the same key and attempt."""
    access, ledger = tmp_path / "access.jsonl", tmp_path / "ledger.jsonl"
    access.write_text(
        "\n".join(json.dumps(r) for r in [
            {"idempotency_key": "k1", "attempt": 0,
             "attrs": {"intended_ttft_s": 0.10, "intended_total_s": 0.50}},
            {"idempotency_key": "k1", "attempt": 1,
             "attrs": {"intended_ttft_s": 0.20, "intended_total_s": 0.30}},
            {"idempotency_key": "k2", "attempt": 0, "attrs": {}},
        ]) + "\n"
    )  # fmt: skip
    ledger.write_text(
        "\n".join(json.dumps(r) for r in [
            {"idempotency_key": "k1", "attempt": 0, "ttft_s": 1.2, "total_s": 5.1, "status": "ok"},
            {"idempotency_key": "k1", "attempt": 1, "ttft_s": 2.1, "total_s": None,
             "status": "cancelled"},
            {"idempotency_key": "k2", "attempt": 0, "ttft_s": 1.0, "total_s": 2.0, "status": "ok"},
        ]) + "\n"
    )  # fmt: skip
    errors = timing_errors([ledger], access, factor=0.1)
    assert [0.02, 0.01, 0.01] == pytest.approx(errors)
    found = fidelity(time_scale=0.1, smallest_cutoff_s=1.0, lead_s=0.0, errors_s=errors,
                     loop_lag_s=[0.0])  # fmt: skip
    assert found.error_s == pytest.approx(0.04 / 3 / 0.1)  # mean |error| 13.3 ms real
    assert found.p95_s == pytest.approx(0.19)  # type 7: 0.01 + 0.9 x (0.02 - 0.01), real s
    assert not found.ok  # 0.13 s of a 1 s cutoff is 13 %, over the 2 % allowed


def test_a_slower_scale_is_chosen_for_a_larger_error() -> None:
    """The chosen time scale grows with the measured error share, within its bounds."""
    assert _chosen_scale(0.05, 0.04) == pytest.approx(0.15)
    assert _chosen_scale(0.05, 0.0) == pytest.approx(0.0125)
    assert 1.0 == _chosen_scale(0.5, 1.0)


def test_agreement_rules() -> None:
    """Inside the interval, within 15 %, or overlapping the predicted interval agrees."""
    seen = Estimate(0.10, 0.06, 0.15, 200)
    assert agrees(0.07, seen)
    assert agrees(0.16, Estimate(0.14, 0.13, 0.15, 9000))  # 12.5 % apart
    assert not agrees(0.02, seen)
    assert agrees(0.02, seen, (0.01, 0.07))
    low, high = rate(0, 50).low, rate(0, 50).high
    assert (0.0, pytest.approx(0.0711, abs=1e-3)) == (low, high)


def test_smallest_cutoff_ignores_waiting_steps(small: tuple[Path, Path]) -> None:
    """The smallest cutoff is over steps that act; a workflow without cutoffs has none."""
    from tailkit.config import load_plan

    plan = load_plan(small[1])
    acting = [s for s in plan.steps.values() if s.on_cutoff != "wait"]
    assert acting
    assert math.isinf(smallest_cutoff_s(workflow_of(plan)))


@pytest.mark.slow
def test_replay_agrees_with_the_simulation(small: tuple[Path, Path], tmp_path: Path) -> None:
    """Both sides' miss rate and extra attempts fall in the observed 99.9 % interval."""
    from scipy import stats

    from tailkit.config import load_plan

    db, plan_path = small
    plan = load_plan(plan_path)
    with Store.open(db, read_only=True) as store:
        result = replay(store, plan, runs=200, out_dir=tmp_path, seed=1)
        samples = load_samples(store, plan, seed=1)
    found = result.fidelity
    if not found.ok:
        # Even at its slowest time scale the replay could not keep time: the machine was too
        # busy (its client loop's lag, the server's bias and jitter: which of them dominates
        # depends on who else holds the cores, so the test does not ask), the error it measured
        # is over what it allows, and it must refuse to judge rather than print numbers that
        # mean nothing.
        assert found.error_share > MAX_ERROR_SHARE, found.describe()
        assert found.requests > 0, found.describe()
        assert "can't tell" == result.verdict
        assert any("too busy for the figures to mean anything" in n for n in result.notes)
    # every call here has one size and no job key, so the replay serves independent repeats:
    # the executor is judged against the simulator fed the same (the low end of the plan's
    # default sharing, which the replay's own predicted interval spans)
    served = default_as_independent(plan)
    assert served is not None
    judged = zip(result.sides, (workflow_of(plan), plan), strict=True) if found.ok else ()
    for side, predicted_plan in judged:
        model = workflow_model(predicted_plan, samples, sharing=served)
        predicted = simulate_model(model, runs=100_000, seed=1)
        assert side.agrees["miss_rate"], side.label
        misses = round(side.observed["miss_rate"].value * side.runs)
        test = stats.binomtest(misses, side.runs, predicted.miss_rate)
        assert test.pvalue > 0.001, (side.label, misses, predicted.miss_rate)
        firsts = side.observed["extra_attempts"].n
        extras = round(side.observed["extra_attempts"].value * firsts)
        expected = predicted.extra_attempts * firsts
        assert stats.poisson.cdf(extras, expected) > 0.0005, (side.label, extras, expected)
        assert stats.poisson.sf(extras - 1, expected) > 0.0005, (side.label, extras, expected)
        p50 = side.observed["p50_s"]
        assert abs(p50.value - side.predicted["p50_s"]) <= 0.15 * side.predicted["p50_s"]
    assert (tmp_path / "ledger-without-plan.jsonl").exists()
    assert (tmp_path / "ledger-with-plan.jsonl").exists()
    assert 0 == result.sides[0].observed["extra_attempts"].value
    console = Console(record=True, width=120)
    render_replay(result, console)
    text = console.export_text()
    for label in ("without plan", "with plan", "miss rate", "p99 s", "extra attempts"):
        assert label in text
    assert "replay timing error" in text
    doc = result.to_json()
    assert [s.label for s in result.sides] == [s["label"] for s in doc["sides"]]


def test_cli_replay_refuses_a_plan_without_cutoffs(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    """A workflow that was never calibrated has nothing to rehearse: the fix is named."""
    from tailkit.config import load_plan

    db, plan_path = small
    bare = tmp_path / "bare.yaml"
    bare.write_text(dump_plan(workflow_of(load_plan(plan_path))), encoding="utf-8")
    result = CliRunner().invoke(app, ["replay", str(bare), "--db", str(db)])
    assert 1 == result.exit_code
    assert "calibrate it first" in result.output
    result = CliRunner().invoke(app, ["replay", str(tmp_path / "nope.yaml"), "--db", str(db)])
    assert 1 == result.exit_code
    assert "nope.yaml" in result.output


def test_quiet_prints_the_verdict_line_only() -> None:
    """`replay -q` prints the verdict and whether the plan helps, as the table's last line."""
    from types import SimpleNamespace

    from tailkit.cli._replay import verdict_line
    from tailkit.replay.lowlevel import compare_sides

    helps = SimpleNamespace(verdict="agrees", effect=compare_sides((40, 10), (400, 400)))
    unsure = SimpleNamespace(verdict="can't tell", effect=compare_sides((13, 14), (200, 200)))

    assert verdict_line(helps).startswith(  # type: ignore[arg-type]
        "replay agrees with the simulation; the plan helps: "
    )
    assert verdict_line(unsure).startswith(  # type: ignore[arg-type]
        "replay can't tell with the simulation; can't tell whether the plan helps: "
    )


class _RaisingExecutor:
    """An executor whose odd runs end in the adapter's deadline error instead of a result."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def run(self, attempt_fns: object, *, run_id: str | None = None) -> None:
        self.ran.append(str(run_id))
        if int(str(run_id).rsplit("-", 1)[1]) % 2:
            msg = "a/m at http://127.0.0.1:1/v1: the deadline passed before the request was sent"
            raise AttemptError(msg, status="timeout")


def test_a_run_that_raises_is_a_counted_error_not_the_replays_end() -> None:
    """An exception escaping one run is returned as that run's error; the other runs go on."""
    from tailkit.replay._sides import run_counted

    executor = _RaisingExecutor()

    async def runs() -> list[str | None]:
        return list(
            await asyncio.gather(
                *(run_counted(executor, None, run_id=f"with-plan-{i}") for i in range(4))
            )
        )

    errors = asyncio.run(runs())

    assert 4 == len(executor.ran)
    deadline = "the deadline passed before the request was sent"
    assert [None, f"AttemptError: a/m at http://127.0.0.1:1/v1: {deadline}"] * 2 == errors


def test_a_run_that_ended_in_an_error_without_ledger_lines_is_a_miss(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    """Runs that raised before writing a line count as misses of the side's miss rate."""
    from tailkit.config import load_plan
    from tailkit.executor import Executor, JsonlSink, Ledger
    from tailkit.replay._replay import _side
    from tailkit.replay._sides import SideRun

    plan = load_plan(small[1])
    ledger_path = tmp_path / "ledger.jsonl"
    ledger = Ledger(JsonlSink(ledger_path))
    executor = Executor(plan, ledger=ledger)

    async def answer(attempt: object) -> str:
        return "ok"

    async def runs() -> None:
        for i in range(6):
            result = await executor.run(answer, run_id=f"with-plan-{i}", deadline_s=1e6)
            assert result.ok

    asyncio.run(runs())
    ledger.close()
    errors = (("with-plan-6", "AttemptError: x"), ("with-plan-7", "AttemptError: y"))
    run = SideRun("with plan", 8, 0, ledger_path, errors)

    predicted = dict.fromkeys(("miss_rate", "p50_s", "p99_s", "extra_attempts"), 0.0)
    side = _side(plan, run, (predicted, {}))

    assert 2 == side.errors
    miss = side.observed["miss_rate"]
    assert (0.25, 8) == (miss.value, miss.n)
    assert miss.low > 0.0
