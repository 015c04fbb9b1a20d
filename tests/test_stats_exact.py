"""
The tail table in bounded memory equals tailkit.fit on every call.

Quantiles and intervals exactly, fits within their sampling error; the approximate mode's
stated error holds.
"""

from __future__ import annotations

import math

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tailkit.errors import OutOfMemoryError
from tailkit.fit import empirical_quantiles, fit_lognormal, phase_split, tail_warning
from tailkit.fit._quantiles import KaplanMeier
from tailkit.fit.lowlevel import KaplanMeierStream, sorted_quantiles
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tailkit.tails import TableQuery, tail_report
from tailkit.tails import _bands as bands_module
from tailkit.tails import _table as table_module


QS = (0.5, 0.9, 0.95, 0.99)
FIT_MAX_N = 500


def _group(rng: np.random.Generator, provider: str, n: int, *, cut: float) -> dict[str, Any]:
    """
    ``n`` calls of one provider: latencies to the millisecond (ties), some cut, a few failed.
    """
    total = np.round(rng.lognormal(0.5, 0.6, n), 3)
    ttft = np.round(total * rng.uniform(0.05, 0.5, n), 3)
    u = rng.uniform(size=n)
    is_cut = u < cut
    failed = (u >= cut) & (u < cut + 0.03)
    cut_at = np.round(np.minimum(total, rng.uniform(0.5, 4.0, n)), 3)
    start = np.datetime64("2026-01-01T00:00:00") + np.sort(rng.integers(0, 86_400_000, n)).astype(
        "timedelta64[ms]"
    )
    return {
        "call_id": [f"{provider}-{i}" for i in range(n)],
        "provider": [provider] * n,
        "model": ["m"] * n,
        "started_at": start,
        "status": np.where(is_cut, "cancelled", np.where(failed, "error", "ok")),
        "total_s": np.where(is_cut | failed, None, total).tolist(),
        "ttft_s": np.where(is_cut | failed | (u > 0.9), None, ttft).tolist(),
        "censored_at_s": np.where(is_cut, cut_at, None).tolist(),
        "output_tokens": rng.integers(20, 800, n),
        "input_tokens": rng.integers(100, 3000, n),
    }


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    A store of a few thousand calls per group: uncut, cut, small and tiny groups.
    """
    rng = np.random.default_rng(18)
    parts = [
        _group(rng, "plain", 3000, cut=0.0),
        _group(rng, "cut", 2500, cut=0.08),
        _group(rng, "heavy", 1500, cut=0.3),
        _group(rng, "small", 300, cut=0.0),
        _group(rng, "smallcut", 250, cut=0.1),
    ]
    frame = pl.concat([pl.DataFrame(p, strict=False) for p in parts], how="vertical_relaxed")
    folder = tmp_path_factory.mktemp("exact")
    frame.write_parquet(folder / "calls.parquet")
    db = folder / "s.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [folder / "calls.parquet"]).ok
    return db


def _calls(db: Path) -> pl.DataFrame:
    with Store.open(db, read_only=True) as store:
        frame = pl.from_arrow(
            store.arrow(
                "SELECT provider, CASE WHEN status = 'ok' THEN total_s END AS total_s, "
                "CASE WHEN status = 'ok' THEN ttft_s END AS ttft_s, censored_at_s "
                "FROM calls WHERE (status = 'ok' AND total_s > 0) OR censored_at_s > 0"
            )
        )
    assert isinstance(frame, pl.DataFrame)
    return frame


def _arrays(calls: pl.DataFrame, provider: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    part = calls.filter(pl.col("provider") == provider)
    return tuple(
        part[c].fill_null(np.nan).to_numpy() for c in ("total_s", "censored_at_s", "ttft_s")
    )  # type: ignore[return-value]


def _table(db: Path, **kwargs: Any) -> pl.DataFrame:
    with Store.open(db, read_only=True) as store:
        return tail_report(
            store, TableQuery(by=("provider",), bucket=()), fit_max_n=FIT_MAX_N, **kwargs
        ).table


def test_quantiles_and_intervals_equal_tailkit_fit_on_every_call(db: Path) -> None:
    """
    p50..p99 and p99/p50 with their intervals are empirical_quantiles' on all calls, exactly.
    """
    table, calls = _table(db), _calls(db)
    methods = set()
    for row in table.iter_rows(named=True):
        total, cut, _ = _arrays(calls, row["provider"])
        censored = {"censored_at_s": cut} if row["censored_share"] > 0 else {}
        est = empirical_quantiles(total, qs=QS, **censored)
        wide = empirical_quantiles(total, qs=(0.5, 0.99), level=0.975, **censored)
        methods.add(est[0].method)
        for e in est:
            name = f"p{round(e.q * 100)}_s"
            assert (row[name], row[f"{name}_lo"], row[f"{name}_hi"]) == (
                e.value, e.interval.low, e.interval.high,
            )  # fmt: skip
        ratio_lo = wide[1].interval.low / wide[0].interval.high
        ratio_hi = (
            wide[1].interval.high / wide[0].interval.low if wide[0].interval.low > 0 else math.inf
        )
        assert row["p99_p50"] == est[3].value / est[0].value
        assert (row["p99_p50_lo"], row["p99_p50_hi"]) == (ratio_lo, ratio_hi)
    assert {"Kaplan-Meier", "order statistics"} == methods


@pytest.mark.parametrize(
    ("band", "estimates"),
    [(None, True), (0.005, True), (-1.0, True), (0.005, False)],
    ids=["aggregated", "banded", "sorted", "no-estimates"],
)
def test_moments_phase_quantiles_and_warnings_use_every_call(
    db: Path, band: float | None, estimates: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Uncut groups' lognormal fit, TTFT/generation quantiles and warnings come from every call.

    Also when the TTFT, generation and speed quantiles do not fit in DuckDB's memory: read
    exactly from a band around DuckDB's estimate (``banded``), or sorted out of core where
    every band misses (``sorted``, a band of negative width) or the estimates themselves ran
    out of memory (``no-estimates``): the same numbers.
    """
    holistic = band is None
    if band is not None:
        monkeypatch.setattr(table_module, "HOLISTIC_BYTES_PER_CALL", 1 << 60)
        monkeypatch.setattr(bands_module, "BAND", band)
        if not estimates:

            def out_of_memory() -> str:
                msg = "DuckDB ran out of memory"
                raise OutOfMemoryError(msg)

            monkeypatch.setattr(table_module, "band_estimates_sql", out_of_memory)
        missed = bands_module.exact_in_bands
        seen: list[tuple[dict[int, int], dict[int, int]]] = []

        def spy(*args: Any) -> tuple[dict[int, int], dict[int, int]]:
            seen.append(missed(*args))
            return seen[-1]

        monkeypatch.setattr(table_module, "exact_in_bands", spy)
    with Store.open(db, read_only=True) as store:
        assert holistic == table_module.holistic_fits(store)
    table, calls = _table(db), _calls(db)
    speeds = _speeds(db)
    for row in table.iter_rows(named=True):
        total, cut, ttft = _arrays(calls, row["provider"])
        split = phase_split(ttft, total)
        assert row["ttft_p50_s"] == pytest.approx(split.ttft_p50_s, rel=1e-12)
        assert row["ttft_p99_s"] == pytest.approx(split.ttft_p99_s, rel=1e-12)
        assert row["gen_p50_s"] == pytest.approx(split.gen_p50_s, rel=1e-12)
        assert row["gen_p99_s"] == pytest.approx(split.gen_p99_s, rel=1e-12)
        if row["censored_share"] == 0:
            y = np.log(total[~np.isnan(total)])
            assert row["mu"] == pytest.approx(np.mean(y), rel=1e-12)
            assert row["sigma"] == pytest.approx(np.std(y), rel=1e-12)
            cut = None
        said = tail_warning(total, censored_at_s=cut)
        assert (row["warning"] or None) == said
        p50, p10 = np.quantile(speeds[row["provider"]], [0.5, 0.1])
        assert row["tokens_per_s_p50"] == pytest.approx(p50, rel=1e-12)
        assert row["tokens_per_s_p10"] == pytest.approx(p10, rel=1e-12)
    if band is not None:  # the bands held, or all missed and the sorted pass stepped in
        ((phase, speed),) = seen
        banded = band > 0 and estimates
        assert (len(phase), len(speed)) == ((0, 0) if banded else (table.height,) * 2)


def _speeds(db: Path) -> dict[str, np.ndarray]:
    """
    Per provider, the generation speed of every call whose speed counts (`SPEED`).
    """
    with Store.open(db, read_only=True) as store:
        rows = store.fetchall(
            "SELECT provider, list((output_tokens - 1) / (total_s - ttft_s)) FROM calls "
            "WHERE status = 'ok' AND total_s > 0 AND output_tokens >= 2 AND total_s > ttft_s "
            "GROUP BY ALL"
        )
    return {provider: np.array(speeds) for provider, speeds in rows}


def test_censored_fits_are_within_their_sampling_error(db: Path) -> None:
    """
    With cut calls the lognormal fit reads a sample, within four standard errors of every call's.
    """
    table, calls = _table(db), _calls(db)
    checked = 0
    for row in table.filter(pl.col("censored_share") > 0).iter_rows(named=True):
        total, cut, _ = _arrays(calls, row["provider"])
        full = fit_lognormal(total, censored_at_s=cut)
        if row["n_ok"] + row["censored_share"] * row["n"] <= FIT_MAX_N:
            # every call, in another order: the same optimum up to rounding
            assert row["mu"] == pytest.approx(full.mu, rel=1e-9)
            assert row["sigma"] == pytest.approx(full.sigma, rel=1e-9)
            continue
        checked += 1
        se = full.sigma / math.sqrt(FIT_MAX_N)
        assert abs(row["mu"] - full.mu) < 4 * se
        assert abs(row["sigma"] - full.sigma) < 4 * se
    assert checked == 2


def test_table_does_not_depend_on_the_order_of_the_calls(db: Path, tmp_path: Path) -> None:
    """
    The same calls stored in reverse order give the same table, the sampled fits included.
    """
    with Store.open(db, read_only=True) as store:
        rows = store.arrow("SELECT * EXCLUDE (ingest_id) FROM calls ORDER BY source_row DESC")
    other = tmp_path / "r.duckdb"
    with Store.open(other) as store:
        store._con.register("reversed_rows", rows)  # test-only bulk insert of an Arrow table
        store.execute("INSERT INTO calls BY NAME SELECT *, 2 AS ingest_id FROM reversed_rows")
    first = _table(db)
    again = _table(other)
    # SQL sums log latencies in storage order: the closed-form fit agrees to rounding only
    moments = ["mu", "sigma"]
    assert first.drop(moments).equals(again.drop(moments))
    for name in moments:
        np.testing.assert_allclose(first[name].to_numpy(), again[name].to_numpy(), rtol=1e-12)


def test_kaplan_meier_stream_is_the_whole_curve_bit_for_bit() -> None:
    """
    Fed in random chunks, the streamed Kaplan-Meier quantiles equal the whole curve's exactly.
    """
    rng = np.random.default_rng(5)
    q = np.array([0.5, 0.9, 0.95, 0.99])
    for trial in range(60):
        n = int(rng.integers(5, 3000))
        values = np.round(rng.lognormal(0, 1, n), int(rng.integers(0, 3)))
        cut = rng.uniform(size=n) < rng.choice([0.0, 0.05, 0.5, 0.95])
        if trial % 7 == 0:
            cut[np.argsort(values)[-max(1, n // 20) :]] = True  # the slowest cut: p99 hidden
        if not cut.any():
            cut[0] = True
        observed, censored = values[~cut], values[cut]
        level = float(rng.choice([0.8, 0.95, 0.99]))
        want = KaplanMeier.fit(observed, censored).quantiles(q, level)
        times, inverse = np.unique(values, return_inverse=True)
        events = np.bincount(inverse, weights=~cut, minlength=times.size).astype(np.int64)
        cuts = np.bincount(inverse, weights=cut, minlength=times.size).astype(np.int64)
        stream = KaplanMeierStream(n, q, level)
        edges = np.sort(rng.choice(np.arange(1, times.size + 1), size=3)) if times.size > 3 else []
        for part in np.split(np.arange(times.size), edges):
            stream.add(times[part], events[part], cuts[part])
        got = stream.quantiles()
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def test_order_statistic_ranks_read_from_sorted_values_match_sorted_quantiles() -> None:
    """
    The table's order statistics read at their ranks equal sorted_quantiles on the array.
    """
    from tailkit.fit.lowlevel import OrderStatisticRanks

    rng = np.random.default_rng(9)
    for n in (1, 2, 5, 37, 368, 1000, 4321):
        x = np.sort(np.round(rng.lognormal(0, 1, n), 2))
        q = np.array([0.5, 0.9, 0.95, 0.99])
        ranks = OrderStatisticRanks.of(np.array([n]), q, 0.05)

        def at(i: np.ndarray, x: np.ndarray = x) -> np.ndarray:
            return x[np.clip(i, 0, x.size - 1)]

        got = ranks.quantiles(at(ranks.below), at(ranks.above), at(ranks.low), at(ranks.high))
        want = sorted_quantiles(x, np.array([0]), np.array([n]), q, 0.05)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_approx_mode_states_an_error_that_holds(db: Path) -> None:
    """
    With approx, each uncut row's stated rank error bounds the true rank of p50..p99.
    """
    table, calls = _table(db, approx=True), _calls(db)
    assert "approx_rank_error" in table.columns
    for row in table.iter_rows(named=True):
        total, _, _ = _arrays(calls, row["provider"])
        x = np.sort(total[~np.isnan(total)])
        error = row["approx_rank_error"]
        if row["censored_share"] > 0:
            assert error == 0.0
            continue
        assert 0.0 <= error < 0.05
        for q in QS:
            v = row[f"p{round(q * 100)}_s"]
            below = np.searchsorted(x, v, side="left") / x.size
            at_or_below = np.searchsorted(x, v, side="right") / x.size
            assert below - error <= q + 1e-12
            assert at_or_below + error >= q - 1e-12
            assert row[f"p{round(q * 100)}_s_lo"] <= v <= row[f"p{round(q * 100)}_s_hi"]


def test_a_view_over_parquet_gives_the_same_table(db: Path, tmp_path: Path) -> None:
    """
    With ``calls`` a view over Parquet (query in place) the table is the stored one's.
    """
    parquet = tmp_path / "calls.parquet"
    with Store.open(db, read_only=True) as store:
        store.execute(f"COPY calls TO '{parquet}' (FORMAT parquet)")
    with Store.open(tmp_path / "v.duckdb") as store:
        store.execute("DROP TABLE calls")
        store.execute(f"CREATE VIEW calls AS SELECT * FROM read_parquet('{parquet}')")
    # The view's size is unknown, so its TTFT, generation and speed quantiles are sorted (and
    # may differ from DuckDB's aggregate in the last bit); the moments' sums run in any order.
    close = ["mu", "sigma", "ttft_p50_s", "ttft_p99_s", "gen_p50_s", "gen_p99_s",
             "tokens_per_s_p50", "tokens_per_s_p10"]  # fmt: skip
    view, stored = _table(tmp_path / "v.duckdb"), _table(db)
    assert view.drop(close).equals(stored.drop(close))
    for name in close:
        assert view[name].to_numpy() == pytest.approx(stored[name].to_numpy(), rel=1e-12)
