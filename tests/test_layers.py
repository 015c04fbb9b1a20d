"""
The layers of the package: the runtime a service imports loads nothing of the analysis layer.

The import-linter contracts in pyproject.toml check the import graph; these tests check what an
import really loads, in a fresh interpreter, and that `tailkit.deadline` stands on the standard
library alone.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from pathlib import Path

import pytest

import tailkit.deadline


# What the runtime layer is made of (tailkit/__init__.py's docstring), plus the lazy loader of
# the package itself.
RUNTIME = {
    "_atomic", "_config", "_lazy", "adapters", "config", "deadline", "errors", "estimate",
    "executor", "ledger", "record", "serve", "text",
}  # fmt: skip


def _loaded_by(module: str) -> list[str]:
    """
    The modules a fresh interpreter holds after ``import module``, minus those it starts with.
    """
    code = (
        "import sys; before = set(sys.modules)\n"
        f"import {module}\n"
        "import json; print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded: list[str] = json.loads(out)
    return loaded


def _third_party(modules: list[str]) -> list[str]:
    roots = {name.split(".")[0] for name in modules}
    return sorted(roots - set(sys.stdlib_module_names) - {"tailkit"})


@pytest.mark.parametrize(
    "module",
    [
        "tailkit.deadline",
        "tailkit.ledger",
        "tailkit.executor",
        "tailkit.executor.lowlevel",
        "tailkit.serve",
        "tailkit.serve.lowlevel",
        "tailkit.adapters",
        "tailkit.config",
    ],
)
def test_runtime_modules_load_only_the_runtime(module: str) -> None:
    """
    Importing a runtime module loads only runtime modules of tailkit and no third-party package.
    """
    loaded = _loaded_by(module)
    tailkit_modules = [name for name in loaded if name.split(".")[0] == "tailkit"]
    outside = [
        name for name in tailkit_modules if name != "tailkit" and name.split(".")[1] not in RUNTIME
    ]

    assert [] == outside
    assert [] == _third_party(loaded)


def test_deadline_loads_nothing_of_tailkit_but_itself() -> None:
    """
    `tailkit.deadline` is a standalone leaf: importing it loads no other tailkit module.
    """
    loaded = _loaded_by("tailkit.deadline")

    assert {"tailkit", "tailkit._lazy"} == {
        name for name in loaded if name.startswith("tailkit") and "deadline" not in name
    }


def test_serve_does_not_load_the_executor() -> None:
    """
    `tailkit.serve` shares the deadline and the ledger with the executor, not the executor.
    """
    loaded = _loaded_by("tailkit.serve")

    assert "tailkit.deadline" in loaded
    assert "tailkit.ledger" in loaded
    assert [] == [name for name in loaded if name.startswith("tailkit.executor")]


def test_deadline_source_imports_only_the_standard_library() -> None:
    """
    Every module of `tailkit.deadline` imports the standard library and its own modules only.
    """
    folder = Path(tailkit.deadline.__file__).parent
    imported: set[str] = set()
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module)
    outside = sorted(
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names
        and name != "__future__"
        and not name.startswith("tailkit.deadline")
    )

    assert [] == outside
