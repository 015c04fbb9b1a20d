"""
Claims that match the evidence: a transient verdict says what confirms a fresh attempt escapes.

Single calls can only say that a tail looks transient; repeat attempts (hedges and retries of
slow calls) or paired calls (the same job on other routes) confirm it, or contradict it when
the slowness belongs to the job (hidden work). Slow spells are met again by a retry on the same
provider. Seeded scenarios with a known answer, on several seeds each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tailkit.fit import tail_kind
from tailkit.fit._tailkind import SPELL_RETRY, UNCONFIRMED
from tailkit.fit.lowlevel import hedge_evidence
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tailkit.store.lowlevel import paired_calls_sql
from tailkit.tails import TableQuery, tail_report


SEEDS = range(3)


def _stalls(rng: np.random.Generator, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """
    Latency with 3 % independent 5x stalls, and token counts that explain nothing.
    """
    latency = rng.lognormal(np.log(5), 0.3, n)
    latency[rng.random(n) < 0.03] *= 5
    return latency, rng.integers(50, 1000, n)


@pytest.mark.parametrize("seed", SEEDS)
def test_single_calls_only_look_transient(seed: int) -> None:
    """Without repeat attempts or paired calls the verdict claims no escape, and says so."""
    latency, tokens = _stalls(np.random.default_rng(seed))

    verdict = tail_kind(latency, output_tokens=tokens)

    assert "transient" == verdict.kind
    assert verdict.escape_confirmed_by is None
    assert verdict.sentence.endswith(UNCONFIRMED)
    assert "a fresh attempt escapes them" not in verdict.sentence


@pytest.mark.parametrize("seed", SEEDS)
def test_repeat_attempts_or_paired_calls_confirm_the_escape(seed: int) -> None:
    """Evidence that says transient is named as what confirms it; weak evidence is not."""
    latency, tokens = _stalls(np.random.default_rng(seed))

    repeats = tail_kind(latency, output_tokens=tokens, hedges=hedge_evidence(60, 44))
    paired = tail_kind(latency, output_tokens=tokens, paired=hedge_evidence(80, 61))
    weak = tail_kind(latency, output_tokens=tokens, hedges=hedge_evidence(10, 8))

    assert "repeat attempts" == repeats.escape_confirmed_by
    assert "repeat attempts confirm a fresh attempt escapes it" in repeats.sentence
    assert "paired calls" == paired.escape_confirmed_by
    assert "61 of 80 slow calls' jobs finished fast on another route" in paired.sentence
    assert weak.escape_confirmed_by is None
    assert "looks transient in single calls; 8 of 10 fresh attempts" in weak.sentence
    assert weak.sentence.endswith("too few (20 needed) to confirm a fresh attempt escapes it")


def test_paired_calls_that_stay_slow_contradict_single_calls() -> None:
    """Jobs slow on every route (hidden work): paired calls say a fresh attempt is as slow."""
    latency, tokens = _stalls(np.random.default_rng(0))

    verdict = tail_kind(latency, output_tokens=tokens, paired=hedge_evidence(100, 15))

    assert ("mixed", None) == (verdict.kind, verdict.escape_confirmed_by)
    assert verdict.sentence.startswith("mixed: 15 of 100 slow calls' jobs")
    assert "a fresh attempt is as slow" in verdict.sentence


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_spell_is_not_escaped_by_a_retry_on_the_same_provider(seed: int) -> None:
    """A 2-hour slow spell looks transient; the sentence says a same-provider retry meets it."""
    rng = np.random.default_rng(seed)
    n = 6000
    started = np.sort(rng.uniform(0, 24 * 3600, n))
    latency = rng.lognormal(np.log(5), 0.3, n)
    latency[(started > 10 * 3600) & (started < 12 * 3600)] *= 4

    verdict = tail_kind(latency, output_tokens=rng.integers(50, 1000, n), started_at_s=started)

    assert "transient" == verdict.kind
    assert verdict.spells
    assert verdict.sentence.endswith(SPELL_RETRY)
    assert UNCONFIRMED in verdict.sentence


@pytest.mark.parametrize("seed", SEEDS)
def test_stalls_spread_over_the_day_are_no_spell(seed: int) -> None:
    """Independent stalls over the day: no spell sentence."""
    rng = np.random.default_rng(seed)
    latency, tokens = _stalls(rng)
    started = np.sort(rng.uniform(0, 24 * 3600, latency.size))

    verdict = tail_kind(latency, output_tokens=tokens, started_at_s=started)

    assert not verdict.spells
    assert SPELL_RETRY not in verdict.sentence


def _paired_log(path: Path, rng: np.random.Generator, *, shared: bool, jobs: int = 2000) -> Path:
    """
    Every job on routes p and q, with a 4 % minority of slow calls (5x).

    The slowness is shared by both routes' calls of a job (hidden work) or drawn per call
    (transient). Tokens explain nothing.
    """
    slow_job = rng.random(jobs) < 0.04
    rows = []
    for provider in ("p", "q"):
        slow = slow_job if shared else rng.random(jobs) < 0.04
        latency = rng.lognormal(np.log(5), 0.3, jobs) * np.where(slow, 5.0, 1.0)
        rows.append(
            pl.DataFrame(
                {
                    "call_id": [f"{provider}{i}" for i in range(jobs)],
                    "run_id": [f"{provider}-r{i}" for i in range(jobs)],
                    "job_key": [f"job{i}" for i in range(jobs)],
                    "step": ["answer"] * jobs,
                    "attempt": [0] * jobs,
                    "role": ["primary"] * jobs,
                    "provider": [provider] * jobs,
                    "model": ["m"] * jobs,
                    "started_at": pl.Series(rng.permutation(jobs) * 7.0 * 1e6).cast(
                        pl.Datetime("us", "UTC")
                    ),
                    "total_s": latency,
                    "input_tokens": [1000] * jobs,
                    "output_tokens": rng.integers(50, 1000, jobs),
                    "status": ["ok"] * jobs,
                }
            )
        )
    pl.concat(rows).write_parquet(path)
    return path


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("shared", "confirmed"), [(False, "paired calls"), (True, "")])
def test_the_table_reads_paired_calls_from_job_keys(
    tmp_path: Path, seed: int, shared: bool, confirmed: str
) -> None:
    """Same job on two routes: independent stalls are confirmed; hidden work contradicts."""
    log = _paired_log(tmp_path / "calls.parquet", np.random.default_rng(seed), shared=shared)
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [log])
        verdicts = tail_report(store, TableQuery(by=("provider",), bucket=())).verdicts

    row = verdicts.filter(pl.col("provider") == "p").row(0, named=True)
    assert row["paired_pairs"] >= 80  # one partner per call beyond the p95 (about 100)
    assert confirmed == row["escape_confirmed_by"], row["verdict"]
    if shared:
        assert row["paired_share_hi"] < 0.5
        assert "mixed" == row["tail_kind"]
        assert "a fresh attempt is as slow" in row["verdict"]
    else:
        assert row["paired_share_lo"] > 0.5
        assert "transient" == row["tail_kind"]
        assert "paired calls confirm a fresh attempt escapes it" in row["verdict"]


def test_a_table_without_job_keys_says_single_calls_only(tmp_path: Path) -> None:
    """No job key, no repeat: the table's transient verdict claims no escape."""
    log = _paired_log(tmp_path / "calls.parquet", np.random.default_rng(0), shared=False)
    pl.read_parquet(log).drop("job_key").write_parquet(log)
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [log])
        verdicts = tail_report(store, TableQuery(by=("provider",), bucket=())).verdicts

    for row in verdicts.iter_rows(named=True):
        assert (0, "") == (row["paired_pairs"], row["escape_confirmed_by"])
        assert row["verdict"].endswith(UNCONFIRMED), row["verdict"]


def test_each_slow_call_counts_once_however_many_routes_its_job_ran_on(tmp_path: Path) -> None:
    """A job on four routes: a slow call pairs with one partner, not three."""
    rng = np.random.default_rng(5)
    jobs = 400
    frames = []
    for provider in "abcd":
        latency = rng.lognormal(np.log(5), 0.3, jobs)
        frames.append(
            pl.DataFrame(
                {
                    "call_id": [f"{provider}{i}" for i in range(jobs)],
                    "job_key": [f"j{i}" for i in range(jobs)],
                    "provider": [provider] * jobs,
                    "model": ["m"] * jobs,
                    "total_s": latency,
                    "status": ["ok"] * jobs,
                }
            )
        )
    log = tmp_path / "calls.parquet"
    pl.concat(frames).write_parquet(log)
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [log])
        slow = store.fetchall(
            "SELECT provider, count(*) FROM calls AS c WHERE total_s > (SELECT "
            "quantile_cont(total_s, 0.95) FROM calls WHERE provider = c.provider) GROUP BY 1"
        )
        pairs = store.fetchall(paired_calls_sql("calls", ("provider",)))

    assert sorted(slow) == sorted((p, n) for p, n, _ in pairs)
