"""
Shared fixtures (paths to the corpus and samples, a fresh store per test) and the files' order.
"""

from __future__ import annotations

import os

from collections.abc import Iterator
from pathlib import Path

import pytest

from hypothesis import settings

from tailkit.store import Store


# CI machines are shared and slow at times: no per-example deadline, and in CI a fixed
# derandomized search so that a red run can be replayed exactly.
settings.register_profile("tailkit", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "tailkit")


ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
LLMPERF = ROOT / "data_samples" / "llmperf-leaderboard" / "raw_data"
PRODUCTION = ROOT / "data_samples" / "production"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """
    Under xdist, the files holding a test marked slow go first, each file's tests kept in order.

    Workers take whole files (pyproject's ``--dist loadfile``) in the order collected; a file of
    a minute or more taken last (the wheel's, the notebooks', a Hypothesis property's) would
    leave the other core idle for that minute. Slow files first, then the many small ones, lets
    the small ones even out the end. Without xdist the order stays the files' own.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: in-file order is kept


@pytest.fixture(scope="session")
def production_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    The bundled production sample (200,000 calls) in a store, ingested once per test process.

    Four files read the same 200,000 calls; each ingest takes seconds, a copy milliseconds. Tests
    open this file with ``read_only=True``; one that adds to it copies it first.
    """
    from tailkit.ingest import ingest_paths

    db = tmp_path_factory.mktemp("production") / "calls.duckdb"
    with Store.open(db) as s:
        assert ingest_paths(s, [PRODUCTION / "calls.parquet"]).ok
    return db


@pytest.fixture(scope="session")
def llmperf_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    The llmperf leaderboard's raw data in a store, ingested once per test process (read-only).
    """
    from tailkit.ingest import ingest_paths

    db = tmp_path_factory.mktemp("llmperf") / "s.duckdb"
    with Store.open(db) as s:
        assert ingest_paths(s, [LLMPERF]).ok
    return db


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """
    A new, empty store in a temporary folder.
    """
    with Store.open(tmp_path / "t.duckdb") as s:
        yield s
