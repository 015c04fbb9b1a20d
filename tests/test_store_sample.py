"""
group_sample_sql: a seeded, bounded, order-independent sample of every group's calls.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tailkit.store import Store
from tailkit.store.lowlevel import group_sample_sql


def _fill(store: Store, sizes: dict[str, int], *, reverse: bool = False) -> None:
    """
    Calls of providers with the given numbers of calls, inserted forwards or backwards.
    """
    parts = [f"SELECT '{p}' AS provider, i FROM range({n}) AS r(i)" for p, n in sizes.items()]
    order = "DESC" if reverse else "ASC"
    store.execute(
        "INSERT INTO calls (call_id, provider, model, status, total_s, ingest_id, source_row) "
        f"SELECT provider || '-' || i, provider, 'm', 'ok', 1.0 + (i * 7919 % 1000) / 100.0, "
        f"{2 if reverse else 1}, i FROM ({' UNION ALL '.join(parts)}) ORDER BY provider, i {order}"
    )


def _sample(store: Store, *, size: int, seed: int, where: str = "TRUE") -> list[tuple[str, str]]:
    sql = group_sample_sql("calls", ["provider"], size=size, seed=seed, where=where)
    return sorted(store.fetchall(f"SELECT provider, call_id FROM ({sql})"))


def test_sample_is_capped_whole_when_small_and_deterministic(tmp_path: Path) -> None:
    """
    A big group gives exactly ``size`` calls, a small one all of its calls; the seed repeats it.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        _fill(store, {"big": 5000, "small": 40, "edge": 300})
        first = _sample(store, size=300, seed=7)
        again = _sample(store, size=300, seed=7)
        other = _sample(store, size=300, seed=8)

    per = Counter(p for p, _ in first)
    assert {"big": 300, "small": 40, "edge": 300} == per
    assert len(set(first)) == len(first)  # without replacement
    assert first == again
    assert first != other


def test_sample_does_not_depend_on_row_order_or_provenance(tmp_path: Path) -> None:
    """
    The same calls inserted in the opposite order, by another ingest, give the same sample.
    """
    with Store.open(tmp_path / "a.duckdb") as a, Store.open(tmp_path / "b.duckdb") as b:
        _fill(a, {"x": 3000, "y": 1000})
        _fill(b, {"x": 3000, "y": 1000}, reverse=True)
        assert _sample(a, size=200, seed=3) == _sample(b, size=200, seed=3)


def test_sample_filters_first_and_keeps_every_column(tmp_path: Path) -> None:
    """
    ``where`` picks the rows before sampling; the columns of the source come back unchanged.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        _fill(store, {"x": 1000})
        sql = group_sample_sql("calls", ["provider"], size=50, seed=1, where="total_s > 5")
        rel = store.relation(sql)
        columns = rel.columns
        rows = rel.fetchall()
        calls_columns = store.relation("SELECT * FROM calls").columns
    assert columns == calls_columns
    assert 50 == len(rows)
    assert all(r[columns.index("total_s")] > 5 for r in rows)


def test_sample_is_roughly_uniform(tmp_path: Path) -> None:
    """
    Every call of a group is about equally likely to be drawn, over many seeds.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        _fill(store, {"x": 200})
        hits: Counter[str] = Counter()
        for seed in range(200):
            hits.update(c for _, c in _sample(store, size=50, seed=seed))
    # Each call is drawn with probability 1/4: 50 expected in 200 draws, sd ~6.1.
    assert 200 == len(hits)
    assert 20 < min(hits.values())
    assert max(hits.values()) < 80


def test_null_keys_are_a_group(tmp_path: Path) -> None:
    """
    Calls whose key is NULL form a group of their own and are sampled too.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        store.execute(
            "INSERT INTO calls (call_id, provider, status, total_s) "
            "SELECT 'c' || i, CASE WHEN i % 2 = 0 THEN 'p' END, 'ok', i FROM range(1, 601) r(i)"
        )
        sql = group_sample_sql("calls", ["provider"], size=100, seed=0)
        got = dict(store.fetchall(f"SELECT provider, count(*) FROM ({sql}) GROUP BY ALL"))
    assert {"p": 100, None: 100} == got


def test_bad_arguments_are_refused() -> None:
    """
    A size below one or no keys is refused with the argument's name.
    """
    with pytest.raises(ValueError, match="size must be at least 1"):
        group_sample_sql("calls", ["provider"], size=0, seed=0)
    with pytest.raises(ValueError, match="keys must name"):
        group_sample_sql("calls", [], size=10, seed=0)


def test_columns_narrow_the_sample_but_not_the_draw(tmp_path: Path) -> None:
    """
    Asking for fewer columns returns the same rows, with the keys and those columns only.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        _fill(store, {"x": 3000, "y": 500})
        narrow = group_sample_sql("calls", ["provider"], size=100, seed=4, columns=["call_id"])
        rel = store.relation(narrow)
        got = sorted(rel.fetchall())
        columns = rel.columns
    assert ["provider", "call_id"] == columns
    with Store.open(tmp_path / "s.duckdb") as store:
        assert got == _sample(store, size=100, seed=4)
