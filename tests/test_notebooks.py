"""
The notebooks in ``notebooks/`` run top to bottom in a fresh kernel, and are committed clean.
"""

from __future__ import annotations

import sys

from pathlib import Path

import pytest


nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpec  # noqa: E402 - after the skips above
from jupyter_client.manager import AsyncKernelManager  # noqa: E402


NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
CELL_TIMEOUT_S = 900
NAMES = [
    "01_where_is_the_tail.ipynb",
    "02_calibrate_a_workflow.ipynb",
    "03_review_production_traces.ipynb",
]


class _ThisPython(AsyncKernelManager):
    """
    A kernel on this interpreter (``sys.executable``), without any installed kernel spec.
    """

    @property
    def kernel_spec(self) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python 3 (tailkit tests)",
            language="python",
        )


def test_the_notebooks_are_the_ones_documented() -> None:
    """Every notebook in notebooks/ is one of the three the README there describes."""
    assert sorted(NAMES) == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    guide = (NOTEBOOKS / "README.md").read_text(encoding="utf-8")
    assert all(name in guide for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name: str) -> None:
    """A committed notebook has no outputs and no execution counts (outputs stay out of git)."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code
    assert [] == [i for i, c in enumerate(code) if c.outputs or c.execution_count is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str) -> None:
    """The notebook executes in a fresh kernel with cwd notebooks/, every cell without error."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        # Notebook 03's rehearsal slows down to keep time on a busy machine (up to real time):
        # a cell's time depends on the machine's load, by design.
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        kernel_manager_class=_ThisPython,  # owned by the client: shut down after the run
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    errors = [
        o for c in notebook.cells if c.cell_type == "code" for o in c.outputs
        if o.get("output_type") == "error"
    ]  # fmt: skip
    assert [] == errors


def test_the_rehearsal_notebook_keeps_time_as_replay_does() -> None:
    """Notebook 03 takes its time scale from replay's probe and shows its timing check."""
    notebook = nbformat.read(NOTEBOOKS / "03_review_production_traces.ipynb", as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")

    assert "from tailkit.replay import replay" in code
    assert "time_scale=" not in code  # no fixed speed-up: replay picks it, and checks it
    assert "SCALE" not in code
    assert "timing = rehearsal.fidelity" in code
    assert "timing.describe()" in code
    assert "if not timing.ok:" in code
    assert "profile_from_stats" not in code  # no table of served defaults beside the replay
