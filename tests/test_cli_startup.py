"""
Short commands import only what they use: ``--help``, ``docs`` and ``check`` in a fresh interpreter.

Start-up time is measured by benchmarks/startup.py; these tests check its cause instead, the
modules each command leaves in ``sys.modules`` (issue 31: short commands start fast).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys

from pathlib import Path
from types import ModuleType

import pytest
import typer

from typer._coercion import build_runtime_param  # typer's own coercion: the reference

from tailkit.cli import COMMANDS, app
from tailkit.cli._help import reflow
from tailkit.cli._startup import Shortcuts


ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
"""This checkout first: the child runs the tailkit these tests belong to, installed or not."""


def _load_benchmark() -> ModuleType:
    path = ROOT / "benchmarks" / "startup.py"
    spec = importlib.util.spec_from_file_location("bench_startup", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_startup"] = module
    spec.loader.exec_module(module)
    return module


bench = _load_benchmark()  # its plan and ledger are the small inputs of `tailkit check`


HEAVY = {"duckdb", "numpy", "polars", "scipy", "pandas", "pyarrow", "matplotlib"}
"""The analysis libraries: seconds of import between them."""

RUN = """
import json, runpy, sys
sys.argv = ["tailkit", *sys.argv[1:]]
try:
    runpy.run_module("tailkit", run_name="__main__")
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def _run(*args: str, tmp_path: Path) -> tuple[str, set[str]]:
    """
    What ``tailkit ARGS`` printed in a fresh interpreter, and the modules it held after.
    """
    result = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                            cwd=tmp_path, env=ENV, check=False, timeout=300)  # fmt: skip
    printed, _, line = result.stdout.rpartition("\nMODULES ")
    assert line.startswith("["), result.stdout + result.stderr
    return printed, set(json.loads(line))


def _modules(*args: str, tmp_path: Path) -> set[str]:
    return _run(*args, tmp_path=tmp_path)[1]


def _roots(modules: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in modules}


def _commands_loaded(modules: set[str]) -> set[str]:
    """
    The command modules (``tailkit.cli._stats`` ...) among ``modules``.
    """
    own = {target.partition(":")[0] for target, _ in COMMANDS.values()}
    return own & modules


def test_help_imports_no_analysis_library_and_no_command(tmp_path: Path) -> None:
    """`tailkit --help` lists every command without importing one, nor DuckDB, NumPy or yaml."""
    modules = _modules("--help", tmp_path=tmp_path)

    assert set() == _roots(modules) & (HEAVY | {"yaml"})
    assert set() == _commands_loaded(modules)
    assert set() == _roots(modules) & {"markdown_it", "pygments"}  # typer's, unused by our help


def test_docs_imports_its_command_only(tmp_path: Path) -> None:
    """`tailkit docs` and `tailkit docs stats` load the docs command, no analysis library."""
    # nor pydantic: typer checks values with it, but a PAGE given or not needs no check
    for args in (["docs"], ["docs", "stats"]):
        modules = _modules(*args, tmp_path=tmp_path)

        assert set() == _roots(modules) & (HEAVY | {"yaml", "rich", "pydantic"})
        assert {"tailkit.cli._docs"} == _commands_loaded(modules)


def test_check_on_a_small_ledger_imports_its_command_only(tmp_path: Path) -> None:
    """`tailkit check` loads no other command, no report, tail table or plotting library."""
    (tmp_path / "plan.yaml").write_text(bench.PLAN, encoding="utf-8")
    bench.write_ledger(tmp_path / "ledger.jsonl", runs=40, seed=1)

    printed, modules = _run("check", "plan.yaml", "ledger.jsonl", "--json", tmp_path=tmp_path)

    assert "plan.yaml" == json.loads(printed)["plan"]  # it ran and judged the plan
    assert {"tailkit.cli._check"} == _commands_loaded(modules)
    assert set() == _roots(modules) & {"polars", "pandas", "pyarrow", "matplotlib", "rich"}
    others = {"tailkit.report", "tailkit.tails", "tailkit.calibration", "tailkit.simulation",
              "tailkit.replay", "tailkit.races", "tailkit.serve", "tailkit.demo"}  # fmt: skip
    assert set() == others & modules


def test_rich_markdown_is_the_real_one_after_help(tmp_path: Path) -> None:
    """The stand-ins typer's help module was imported with are gone: rich.markdown is rich's."""
    check = (
        RUN
        + "import rich.markdown, rich.traceback\nprint('REAL', "
        + ("rich.markdown.Markdown.__module__, type(rich.traceback.Traceback).__name__)")
    )
    result = subprocess.run([sys.executable, "-c", check, "--help"], capture_output=True,
                            text=True, cwd=tmp_path, env=ENV, check=False, timeout=300)  # fmt: skip

    assert "REAL rich.markdown type" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_its_docstring(name: str) -> None:
    """The summary `tailkit --help` lists without loading a command is its docstring's own."""
    target, summary = COMMANDS[name]
    module, _, function = target.partition(":")
    docstring = inspect.getdoc(getattr(importlib.import_module(module), function))

    assert docstring
    assert summary == reflow(docstring).split("\n\n")[0]


def test_values_checked_without_pydantic_are_what_typer_makes_of_them() -> None:
    """None for every parameter, and text for every str one, come back as typer's coercion makes."""
    group = typer.main.get_command(app)
    texts = ["plan.yaml", "", " spaced out ", "ünïcode", "--not-a-flag", "3"]
    checked_text = 0
    for command in group.commands.values():  # type: ignore[attr-defined]
        ctx = command.context_class(command, info_name=command.name)
        for param in [*command.params, command.get_help_option(ctx)]:
            ours, typers = param.get_runtime_param(), build_runtime_param(param.type_descriptor)
            assert isinstance(ours, Shortcuts), param.name
            assert typers.coerce(None, param, ctx) == ours.coerce(None, param, ctx), param.name
            if param.type_descriptor.annotation is str:
                checked_text += 1
                for text in texts:
                    theirs, mine = typers.coerce(text, param, ctx), ours.coerce(text, param, ctx)
                    assert (type(theirs), theirs) == (type(mine), mine), (param.name, text)
    assert checked_text >= 5  # PLAN, PAGE, --format, --unit, ... were compared
