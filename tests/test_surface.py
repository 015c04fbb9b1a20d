"""
The public surface: each root name is the documented object, whatever was imported before.

A root name that shares its name with a subpackage is a function on first access and the
subpackage once the subpackage has been imported (``tailkit.calibrate`` was). So the root names
are checked by identity in a fresh interpreter, before and after importing every module.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tailkit
import tailkit.deadline
import tailkit.executor
import tailkit.executor.lowlevel
import tailkit.ledger
import tailkit.serve
import tailkit.serve.lowlevel

from ._surface import HOMES, every_module, import_every_module, wrong_root_names
from .conftest import ROOT


def test_root_names_are_the_documented_objects_before_and_after_importing_everything() -> None:
    """
    In a fresh interpreter each root name is its home's object, and still is after every import.
    """
    code = (
        "import sys\n"
        "from tests._surface import import_every_module, wrong_root_names\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('tailkit.'))\n"
        "assert loaded == ['tailkit._lazy', 'tailkit.errors'], loaded\n"
        "before = wrong_root_names()\n"
        "import_every_module()\n"
        "print(before, wrong_root_names())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )

    assert 0 == run.returncode, run.stderr
    assert "[] []\n" == run.stdout


def test_root_names_are_the_documented_objects_here() -> None:
    """
    In this process too (where the other tests imported what they import), twice over.
    """
    assert sorted(HOMES) == sorted(tailkit.__all__)
    assert [] == wrong_root_names()
    import_every_module()
    assert [] == wrong_root_names()
    assert tailkit.calibrate is not tailkit.calibration
    assert tailkit.simulate is not tailkit.simulation


def test_no_root_name_is_a_module_name() -> None:
    """
    No root name shares its name with a subpackage or module of tailkit.
    """
    children = {name.split(".")[1] for name in every_module()}

    assert set() == set(tailkit.__all__) & children


@pytest.mark.parametrize(
    "package",
    [
        tailkit.deadline,
        tailkit.executor,
        tailkit.executor.lowlevel,
        tailkit.ledger,
        tailkit.serve,
        tailkit.serve.lowlevel,
    ],
    ids=lambda package: package.__name__,
)
def test_every_public_name_resolves(package: object) -> None:
    """
    Every name in a runtime package's ``__all__`` is there, once.
    """
    names: list[str] = getattr(package, "__all__")  # noqa: B009 - typed as object

    assert len(set(names)) == len(names)
    assert [] == [name for name in names if not hasattr(package, name)]


def test_low_level_names_are_not_top_level() -> None:
    """
    A building block is in its package's low-level module, not in the package's ``__all__``.
    """
    assert set() == set(tailkit.executor.__all__) & set(tailkit.executor.lowlevel.__all__)
    assert set() == set(tailkit.serve.__all__) & set(tailkit.serve.lowlevel.__all__)


@pytest.mark.parametrize("home", [tailkit.deadline, tailkit.ledger], ids=lambda m: m.__name__)
def test_executor_keeps_the_names_it_used_to_export(home: object) -> None:
    """
    ``from tailkit.executor import deadline_after, Ledger`` still gives the objects of their homes.
    """
    names: list[str] = getattr(home, "__all__")  # noqa: B009 - typed as object
    kept = {"LEDGER_FIELDS", "Sink", "check_record"}  # the ledger's own, never the executor's

    assert [] == [
        name
        for name in names
        if name not in kept and getattr(tailkit.executor, name) is not getattr(home, name)
    ]
