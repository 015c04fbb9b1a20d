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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """
    A new, empty store in a temporary folder.
    """
    with Store.open(tmp_path / "t.duckdb") as s:
        yield s
