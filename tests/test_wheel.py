"""
The built wheel, installed in a fresh virtual environment, runs ``tailkit demo --quick``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile

from pathlib import Path

import pytest

from .conftest import ROOT


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("hatchling") is None,
    reason="building the wheel offline needs the build backend: pip install hatchling",
)
def test_the_installed_wheel_runs_the_demo_from_an_empty_folder(tmp_path: Path) -> None:
    """No clone at hand: the demo reads its package data and writes only under --out."""
    wheels, venv, cwd, out = (tmp_path / name for name in ("wheels", "venv", "cwd", "out"))
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [*pip, "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(wheels)],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    (wheel,) = wheels.glob("tailkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "tailkit/demo/data/workflow.yaml" in names
    assert "tailkit/demo/data/llmperf-leaderboard/NOTICE.md" in names
    assert {f"tailkit/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= names
    assert not any(name.endswith((".parquet", ".jsonl.gz")) for name in names)
    assert wheel.stat().st_size < 2_000_000
    # the dependencies come from this interpreter's site-packages; tailkit from the wheel
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, env=env
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", *pip[2:], "install", "--no-deps", "--no-index", "--force-reinstall",
         str(wheel)],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    where = subprocess.run(
        [python, "-c", "import tailkit; print(tailkit.__file__)"],
        check=True, capture_output=True, text=True, cwd=cwd, env=env,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(venv)

    run = subprocess.run(
        [venv / "bin" / "tailkit", "demo", "--quick", "--json", "--out", str(out)],
        capture_output=True, text=True, cwd=cwd, env=env, check=False,
    )  # fmt: skip

    assert 0 == run.returncode, run.stderr
    assert [] == list(cwd.iterdir())
    doc = json.loads(run.stdout)
    assert str(out / "report" / "index.html") == doc["report"]
    assert (out / "samples" / "calls.parquet").read_bytes() == (
        ROOT / "data_samples" / "production" / "calls.parquet"
    ).read_bytes()
    assert (out / "report" / "index.html").stat().st_size > 10_000

    pages = subprocess.run(
        [venv / "bin" / "tailkit", "docs", "plan", "--path"],
        capture_output=True, text=True, cwd=cwd, env=env, check=True,
    )  # fmt: skip
    assert Path(pages.stdout.strip()).is_relative_to(venv)
    assert Path(pages.stdout.strip()).read_text(encoding="utf-8") == (
        ROOT / "docs" / "plan.md"
    ).read_text(encoding="utf-8")
