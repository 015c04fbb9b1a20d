"""
Packaging promises: cheap imports, module boundaries, a helpful command without extras, docs.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import tailkit

from tailkit import _entry
from tailkit.cli import app

from ._surface import wrong_root_names
from .conftest import ROOT


_HEAVY = ("duckdb", "polars", "pyarrow", "numpy", "scipy", "matplotlib", "typer", "rich")


@pytest.mark.parametrize(
    "module",
    [
        "tailkit",
        "tailkit.record",
        "tailkit.errors",
        "tailkit.formats",
        "tailkit.config",
        "tailkit.deadline",
        "tailkit.ledger",
        "tailkit.executor",
        "tailkit.serve",
        "tailkit.adapters",
    ],
)
def test_import_is_cheap(module: str) -> None:
    """
    Importing the package (or its leaf modules) loads none of the heavy libraries.
    """
    code = f"import sys, {module}; print(sorted(m for m in {_HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert "[]\n" == out


def test_import_contracts_are_kept() -> None:
    """
    import-linter finds every module boundary in pyproject.toml respected.
    """
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )

    assert 0 == run.returncode, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    "tool",
    [["ruff", "check", "tailkit", "tests", "benchmarks", "data_samples"], ["mypy"]],
    ids=["ruff", "mypy"],
)
def test_lint_and_types_are_clean(tool: list[str]) -> None:
    """
    The ruff and mypy --strict checks configured in pyproject.toml report nothing.
    """
    run = subprocess.run(
        [sys.executable, "-m", *tool], capture_output=True, text=True, cwd=ROOT, check=False
    )

    assert 0 == run.returncode, run.stdout + run.stderr


def test_command_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """
    Without the analysis extra the command prints which extra to install, not a traceback.
    """
    monkeypatch.setattr(_entry.importlib.util, "find_spec", lambda name: None)

    assert 1 == _entry.main()
    assert (
        "Error: the tailkit command needs the 'analysis' extra (duckdb, typer, rich, pyarrow, "
        "xxhash not installed): pip install 'tailkit[analysis]'\n"
    ) == capsys.readouterr().err


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_quick_start_has_exactly_two_commands() -> None:
    """
    The quick start is two commands: run on the samples, and the test command CI runs.
    """
    section = _readme().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```console\n(.*?)\n```", section, flags=re.DOTALL)

    assert 2 == len(commands)
    assert "tailkit demo" in commands[0]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_every_command_is_in_the_readme() -> None:
    """
    Each CLI command has a reference page in docs/ and help text.
    """
    readme = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]

    assert {"ingest", "summary", "rejects"} <= set(names)
    for name in names:
        assert f"\n# `tailkit {name}" in readme
    assert all(c.callback and c.callback.__doc__ for c in app.registered_commands)


def test_public_names_are_documented_and_resolve() -> None:
    """
    `tailkit.__all__` matches the public API list of docs/package.md, and every name loads.
    """
    section = (ROOT / "docs" / "package.md").read_text().split("## Public API", 1)[1]
    documented = set(re.findall(r"`(\w+)`", section)) - {"tailkit"}

    assert set(tailkit.__all__) == documented
    assert [] == wrong_root_names()  # each is its home module's object (tests/test_surface.py)
