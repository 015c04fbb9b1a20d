"""
Repeat attempts of slow calls (`repeat_attempts_sql`): exact, deterministic, in bounded memory.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from tailkit.store import _repeats
from tailkit.store.lowlevel import repeat_attempts_sql


def _store(path: Path, seed: int) -> Path:
    """
    Three routes of first attempts; 400 cut ones, each repeated by a hedge and a retry.

    The two repeats are numbered alike, so the first repeat is a tie only a fixed order settles.
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for r, provider in enumerate(("a", "b", "c")):
        for i in range(3000 + 500 * r):
            rows.append({"run_id": f"{provider}{i}", "provider": provider, "attempt": 0,
                         "role": "primary", "status": "ok",
                         "total_s": round(float(rng.lognormal(1.0 + r / 4, 0.6)), 3),
                         "censored_at_s": None})  # fmt: skip
    for i in range(400):
        run, provider = f"a{i}", "a"
        rows[i] |= {"status": "cancelled", "total_s": None, "censored_at_s": 30.0}
        for role in ("hedge", "retry"):
            rows.append({"run_id": run, "provider": "b" if role == "hedge" else provider,
                         "attempt": 1, "role": role, "status": "ok",
                         "total_s": round(float(rng.lognormal(1.2, 0.6)), 3),
                         "censored_at_s": None})  # fmt: skip
    frame = pl.DataFrame(rows, infer_schema_length=None).with_columns(
        call_id=pl.Series([f"c{i}" for i in range(len(rows))]),
        step=pl.lit("answer"),
        model=pl.lit("m"),
        started_at=pl.lit(0).cast(pl.Datetime("us", "UTC")),
        attrs=pl.lit(None, dtype=pl.Utf8),
    )
    db = path / f"s{seed}.duckdb"
    with duckdb.connect(str(db)) as con:
        con.register("frame", frame.to_arrow())
        con.execute("CREATE TABLE calls AS SELECT * FROM frame")
    return db


def _reference(db: Path) -> tuple[int, int]:
    """
    Pairs and escapes computed in Python: numpy's p75 (type 7) of each route's first attempts.
    """
    with duckdb.connect(str(db), read_only=True) as con:
        calls = pl.from_arrow(con.sql("SELECT * FROM calls").to_arrow_table())
    assert isinstance(calls, pl.DataFrame)
    firsts = calls.filter((pl.col("attempt") == 0) & (pl.col("status") == "ok"))
    p75 = {
        p: float(np.quantile(g["total_s"].to_numpy(), 0.75))
        for (p,), g in firsts.group_by("provider")
    }
    repeats = calls.filter(pl.col("attempt") > 0).sort(
        "attempt", "started_at", "call_id", "role", "total_s"
    )
    first_repeat = repeats.group_by("run_id", maintain_order=True).first()
    cut = set(calls.filter(pl.col("censored_at_s") > 0)["run_id"])
    pairs = escaped = 0
    for row in first_repeat.iter_rows(named=True):
        if row["run_id"] in cut:
            pairs += 1
            escaped += row["total_s"] < p75[row["provider"]]
    return pairs, escaped


@pytest.mark.parametrize("band", [0.005, -0.2], ids=["banded", "bracket-missed"])
def test_pairs_and_escapes_are_exact_and_the_same_on_every_run(
    tmp_path: Path, band: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Pairs and escapes are exact, and the same on every run.

    The p75 reference comes from its band, or ``quantile_cont`` where the band missed; the
    first repeat of a call is one fixed attempt, whatever DuckDB's threads do.
    """
    monkeypatch.setattr(_repeats, "_BAND", band)
    db = _store(tmp_path, seed=5)
    expected = _reference(db)
    with duckdb.connect(str(db), read_only=True) as con:
        seen = {tuple(con.execute(repeat_attempts_sql("calls")).fetchone() or ()) for _ in range(5)}
        con.execute("SET threads = 1")
        seen.add(tuple(con.execute(repeat_attempts_sql("calls")).fetchone() or ()))
    assert {expected} == seen
    assert expected[0] == 400
