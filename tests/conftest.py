"""
Shared fixtures: paths to the corpus and samples, and a fresh store per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tailkit.store import Store


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
