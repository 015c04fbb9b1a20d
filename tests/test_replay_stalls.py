"""
`tailkit replay` serves calls that stalled mid-stream with their gap as a pause.

The simulator cuts a stalled stream a stall cutoff after its last chunk before the gap
(`tailkit.simulation.RouteSample.stall_cut`); a replay that served every call at an even pace
would never let a stall cutoff fire. So the outcome table keeps each call's gap and where it
sat, the file carries them, a request that draws a stalled call is told where to pause, and
the chunks come close enough together that a stream that did not stall is never cut.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time

from pathlib import Path

import httpx
import numpy as np
import pytest

from tailkit.config import parse_plan
from tailkit.errors import ConfigError
from tailkit.ingest import ingest_paths
from tailkit.replay._tables import _outcomes, chunk_tokens, served_models
from tailkit.serve import ModelProfile, ServeConfig, Server, serve_outcomes
from tailkit.serve._draw import draw
from tailkit.serve.lowlevel import Outcomes, dump_outcomes
from tailkit.simulation import RouteSample, load_samples
from tailkit.store import Store


TOKENS = 200
PACE_S = 0.02


def _stalling() -> RouteSample:
    """Calls of 200 tokens at about 20 ms a token; 8 % stall 5-10 s mid-stream."""
    rng = np.random.default_rng(4)
    n = 1000
    ttft = rng.lognormal(0.0, 0.2, n)
    total = ttft + (TOKENS - 1) * PACE_S * np.exp(0.1 * rng.standard_normal(n))
    total[:80] += rng.uniform(5.0, 10.0, 80)
    return RouteSample.from_latencies(
        total, ttft_s=ttft, output_tokens=np.full(n, float(TOKENS)), error_rate=0.05,
        error_s=np.full(5, 0.5),
    )  # fmt: skip


def test_a_stalled_call_is_served_with_its_gap_as_a_pause(tmp_path: Path) -> None:
    """Slot for slot the simulator's stalls; through the file; a draw says where to pause."""
    sample = _stalling()
    assert sample.gap_table is not None
    assert sample.stall_start_table is not None
    table = _outcomes(sample, TOKENS)
    assert table.counts is not None
    assert table.pause_s is not None
    assert table.pause_at_s is not None
    pause = np.repeat(table.pause_s, table.counts)
    at = np.repeat(table.pause_at_s, table.counts)
    stalled = sample.gap_table > 0.0
    assert stalled.mean() == pytest.approx(0.08 * 0.95, abs=0.002)  # of the finished slots
    assert np.array_equal(pause > 0.0, stalled)
    assert np.array_equal(pause[stalled], sample.gap_table[stalled])
    assert np.allclose(at[stalled], sample.stall_start_table[stalled])
    # the file carries the pauses
    path = tmp_path / "outcomes.json"
    path.write_text(dump_outcomes({"m": (table, 5)}, time_scale=1.0, seed=0), encoding="utf-8")
    served = serve_outcomes(path).models["m"].outcomes
    assert served is not None
    assert served.pause_s is not None
    assert served.pause_at_s is not None
    assert np.allclose(served.pause_s, table.pause_s, atol=1e-6)
    assert np.allclose(served.pause_at_s, table.pause_at_s, atol=1e-6)
    # a request that draws a stalled call pauses for its gap after the tokens due by then
    profile = ModelProfile(outcomes=served)
    scale = 0.5
    rng = random.Random(0)  # noqa: S311 - a seeded draw, not cryptography
    entry = next(i for i, gap in enumerate(served.pause_s) if gap > 0.0)
    d = draw(rng, profile, time_scale=scale, max_tokens=None, entry=entry)
    gap, first, total = served.pause_s[entry], served.ttft_s[entry], served.total_s[entry]
    assert d.pause_s == pytest.approx(scale * gap)
    assert d.gen_s == pytest.approx(scale * (total - first))  # the pause is in the generation
    normal = total - first - gap
    last = first + normal * (d.pause_after - 1) / TOKENS  # the last token before the pause
    assert abs(last - served.pause_at_s[entry]) <= normal / TOKENS + 1e-6
    # one that did not stall does not pause
    calm = next(i for i, g in enumerate(served.pause_s) if g == 0.0 and served.kinds[i] == "o")
    d = draw(rng, profile, time_scale=scale, max_tokens=None, entry=calm)
    assert (d.pause_after, d.pause_s) == (0, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pause_s": (0.0,)}, "both pause_s and pause_at_s"),
        ({"pause_s": (0.5, 0.0), "pause_at_s": (0.2,)}, "one value per outcome"),
        ({"pause_s": (2.0,), "pause_at_s": (0.2,)}, "a pause needs"),
        ({"pause_s": (0.5,), "pause_at_s": (0.05,)}, "a pause needs"),
    ],
)
def test_a_pause_that_does_not_fit_is_refused(kwargs: dict[str, object], message: str) -> None:
    """A pause before the first token or past the end names what is wrong."""
    with pytest.raises(ConfigError, match=message):
        Outcomes((0.1,), (1.0,), "o", **kwargs)  # type: ignore[arg-type]


def test_chunks_under_a_stall_cutoff_leave_normal_streams_uncut() -> None:
    """Under a stall cutoff, chunks come at most half of it apart on normal streams."""
    sample = _stalling()
    assert chunk_tokens(sample, TOKENS, None) == math.ceil(TOKENS / 8)
    ok = sample.ok_entries
    assert sample.gap_table is not None
    gen = sample.end_table[:ok] - sample.ttft_table[:ok] - sample.gap_table[:ok]
    for cutoff in (0.25, 0.6, 3.0):
        size = chunk_tokens(sample, TOKENS, cutoff)
        gaps = gen * size / TOKENS  # seconds between chunks, at each stream's even pace
        assert float(np.quantile(gaps, 0.999)) <= 0.5 * cutoff + 1e-9
        assert size <= math.ceil(TOKENS / 8)
    # at 8 chunks an answer, a chunk would come later than a short cutoff on most streams
    assert float(np.median(gen * math.ceil(TOKENS / 8) / TOKENS)) > 0.25


def test_a_served_stream_pauses_where_its_call_stalled() -> None:
    """Over HTTP, a stalled call's stream goes silent for its gap after the tokens due by then."""
    # 20 tokens over 0.2 s of generation, silent for 0.8 s after the 11th (half-way)
    table = Outcomes((0.05,), (1.05,), "o", output_tokens=20, pause_s=(0.8,), pause_at_s=(0.15,))
    config = ServeConfig(models={"m": ModelProfile(outcomes=table, chunk_tokens=1)}, seed=1)

    async def main() -> list[float]:
        async with Server(config) as server, httpx.AsyncClient(base_url=server.url) as client:
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            seen: list[float] = []
            async with client.stream("POST", "/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choices = json.loads(line[len("data: ") :]).get("choices") or [{}]
                    if choices[0].get("delta", {}).get("content"):  # a content token
                        seen.append(time.monotonic())
            return seen

    seen = asyncio.run(main())
    assert len(seen) == 20
    gaps = np.diff(seen)
    longest = int(np.argmax(gaps))
    assert longest == 10  # after the 11th token: where the call stalled
    assert gaps[longest] >= 0.5 * 0.8  # the server never sends early; only lateness shrinks it


STALL_WORKFLOW = """
tailkit_plan: 1
workflow: stalls
deadline_s: 30
hedge_budget: 0.15
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  ask:
    route: a/m
    expected_tokens: {input: 2000, output: 400}
    cutoff_s: 20.0
    stall_cutoff_s: 1.0
    on_cutoff: hedge
    hedge_route: b/m
"""


def test_the_replays_aligned_tables_pause_the_stalled_calls(tmp_path: Path) -> None:
    """What `tailkit replay` serves (tables aligned by job): each stalled call pauses."""
    rng = np.random.default_rng(5)
    lines = []
    for provider in ("a", "b"):
        for i in range(800):
            ttft = round(float(rng.lognormal(0.0, 0.3)), 4)
            k = int(rng.integers(360, 440))
            total = ttft + (k - 1) * PACE_S * float(np.exp(0.15 * rng.standard_normal()))
            total += float(rng.uniform(10.0, 25.0)) if rng.random() < 0.08 else 0.0
            lines.append(json.dumps({
                "call_id": f"{provider}-{i}", "provider": provider, "model": "m",
                "input_tokens": 2000, "output_tokens": k, "status": "ok",
                "ttft_s": ttft, "total_s": round(total, 4),
            }))  # fmt: skip
    (tmp_path / "calls.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plan = parse_plan(STALL_WORKFLOW)
    with Store.open(tmp_path / "calls.duckdb") as store:
        assert ingest_paths(store, [tmp_path / "calls.jsonl"]).ok
        samples = load_samples(store, plan, seed=1)
        served = served_models(plan, samples, store=store, seed=1)
    for route in ("a/m", "b/m"):
        table, chunk = served.tables[served.ids[("ask", route)]]
        assert table.group == "ask"  # aligned by job (here: by size)
        assert table.pause_s is not None
        assert table.pause_at_s is not None
        sample = samples[("ask", route)]
        assert sample.gap_s is not None
        paused = sum(g > 0.0 for g in table.pause_s) / len(table.pause_s)
        assert paused == pytest.approx(float((sample.gap_s > 0.0).mean()), abs=0.02)
        assert all(g == 0.0 or g > 5.0 for g in table.pause_s)  # the 10-25 s stalls
        assert chunk < math.ceil(400 / 8)  # chunks close enough for a 1 s stall cutoff
