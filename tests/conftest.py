"""
Shared fixtures: paths to the corpus and samples, and a fresh store per test.
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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """
    A new, empty store in a temporary folder.
    """
    with Store.open(tmp_path / "t.duckdb") as s:
        yield s
