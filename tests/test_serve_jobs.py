"""
Aligned outcome tables: every request with one Idempotency-Key does one job.
"""

from __future__ import annotations

import asyncio
import json
import random

from pathlib import Path

import pytest

from tailkit.errors import ConfigError
from tailkit.serve import Limits, ModelProfile, ServeConfig, Server, serve_outcomes
from tailkit.serve._jobs import Jobs
from tailkit.serve.lowlevel import Outcomes, dump_outcomes

from .test_serve import chat, serving


def _table(totals: tuple[float, ...], *, rows: tuple[int, ...], **kw: object) -> Outcomes:
    return Outcomes(
        ttft_s=tuple(t / 2 for t in totals), total_s=totals, kinds="o" * len(totals),
        output_tokens=4, group="ask", rows=rows, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# Model a: four jobs, entry j = job j, a retry on a gets the next entry; model b: the same jobs
# on another route, 10x slower (its entry 4 is a spare call no row uses).
A = _table((1.0, 2.0, 3.0, 4.0), rows=(0, 1, 2, 3), repeats=(1, 2, 3, 0))
B = _table((10.0, 20.0, 30.0, 40.0, 99.0), rows=(0, 1, 2, 3))
ALIGNED = ServeConfig(
    models={"a": ModelProfile(outcomes=A), "b": ModelProfile(outcomes=B)},
    time_scale=0.001,
    seed=3,
)


def _served(server: Server) -> list[tuple[str, str, int, float]]:
    """(model, key, row, intended total in profile seconds) of every request, in order."""
    scale = server.config.time_scale
    return [
        (
            r.model, r.idempotency_key, int(r.attrs["job_row"]),
            round(float(r.attrs["intended_total_s"]) / scale, 6),
        )
        for r in server.records
    ]  # fmt: skip


def test_a_repeat_with_the_same_key_on_another_model_gets_the_same_job() -> None:
    """A hedge on b gets b's outcome of the job a's first attempt drew; a retry on a, a new call."""

    async def main() -> list[tuple[str, str, int, float]]:
        async with serving(ALIGNED) as server:
            for key in ("k1", "k2", "k3"):
                for model in ("a", "b", "a", "b"):
                    reply = await chat(server.port, model=model, headers={"Idempotency-Key": key})
                    assert 200 == reply.status
            return _served(server)

    served = asyncio.run(main())
    for key in ("k1", "k2", "k3"):
        (_, _, row, first), (_, _, row_b, hedge), (_, _, row_a, retry), (_, _, _, again) = [
            s for s in served if s[1] == key
        ]
        assert row == row_b == row_a
        assert 10.0 * first == hedge == again  # b: the same job, both times (no repeats given)
        assert retry == A.total_s[A.repeats[row]]  # type: ignore[index]
    assert len({s[2] for s in served if s[0] == "a"}) > 1  # new keys draw rows


def test_without_a_key_every_request_draws_a_row() -> None:
    """Requests that bring no key are independent draws from the rows, as before."""

    async def main() -> list[tuple[str, str, int, float]]:
        async with serving(ALIGNED) as server:
            for _ in range(40):
                assert 200 == (await chat(server.port, model="b")).status
            return _served(server)

    served = asyncio.run(main())
    assert {10.0, 20.0, 30.0, 40.0} == {s[3] for s in served}  # 99 s is no row's: never drawn


def test_keys_are_remembered_boundedly_and_draw_one_number_each() -> None:
    """At most ``keep`` keys are kept; a forgotten key draws anew; one draw per request."""
    jobs = Jobs(keep=2)
    rng, twin = random.Random(1), random.Random(1)  # noqa: S311 - a seeded simulation
    for key in ("x", "y", "z", "x", ""):
        jobs.entry(rng, A, model="a", key=key)
        twin.random()
    assert 2 == len(jobs)
    assert rng.random() == twin.random()


def test_aligned_tables_round_trip_and_old_files_still_load(tmp_path: Path) -> None:
    """group, rows and repeats survive the outcomes file; a file without them loads as before."""
    path = tmp_path / "outcomes.json"
    path.write_text(dump_outcomes({"a": (A, 1), "b": (B, 2)}, time_scale=0.5, seed=4))
    config = serve_outcomes(path)
    a, b = (config.models[m].outcomes for m in ("a", "b"))
    assert a is not None
    assert b is not None
    assert ("ask", A.rows, A.repeats) == (a.group, a.rows, a.repeats)
    assert ("ask", B.rows, None) == (b.group, b.rows, b.repeats)
    old = {
        "tailkit_outcomes": 1,
        "models": {"m": {"ttft_s": [0.5], "total_s": [1.0], "kinds": "o"}},
    }
    path.write_text(json.dumps(old))
    table = serve_outcomes(path).models["m"].outcomes
    assert table is not None
    assert (None, None, None) == (table.group, table.rows, table.repeats)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group": "g"}, "both a group and rows"),
        ({"rows": (0,)}, "both a group and rows"),
        (
            {"group": "g", "rows": (0, 5)},
            r"rows must be a non-empty list of entry numbers in 0 … 1",
        ),
        ({"group": "g", "rows": (0,), "repeats": (1,)}, "one entry per outcome"),
        ({"repeats": (0, 1)}, "repeats need aligned rows"),
    ],
)
def test_bad_alignments_are_refused(kwargs: dict[str, object], message: str) -> None:
    """A malformed alignment names what is wrong."""
    with pytest.raises(ConfigError, match=message):
        Outcomes((0.1, 0.2), (1.0, 2.0), "oo", **kwargs)  # type: ignore[arg-type]


def test_a_group_needs_one_number_of_rows() -> None:
    """Two tables of one group with different row counts are refused, naming both."""
    short = _table((1.0, 2.0), rows=(0, 1))
    with pytest.raises(ConfigError, match=r"'a' and 'c' of group 'ask' have 4 and 2 rows"):
        ServeConfig(models={"a": ModelProfile(outcomes=A), "c": ModelProfile(outcomes=short)})


def test_no_keys_kept_means_every_request_draws() -> None:
    """With keep_keys 0 the server remembers no job: a repeat is an independent draw."""

    async def main() -> list[tuple[str, str, int, float]]:
        async with serving(ALIGNED, limits=Limits(keep_keys=0)) as server:
            for _ in range(30):
                await chat(server.port, model="a", headers={"Idempotency-Key": "same"})
            return _served(server)

    assert len({s[2] for s in asyncio.run(main())}) > 1
