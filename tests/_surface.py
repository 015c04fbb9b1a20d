"""
The root names and their homes, and importing every module: light, for a fresh interpreter.

Imports nothing of tailkit but the root package (and `tailkit.errors`), so that
tests/test_surface.py can check the root names before anything else was imported.
"""

from __future__ import annotations

import importlib
import pkgutil

import tailkit

from tailkit.errors import MissingExtraError


# Each root name and the module that documents it (tailkit/__init__.py, README's public API).
HOMES = {
    "Buckets": "tailkit.record",
    "Executor": "tailkit.executor",
    "IngestReport": "tailkit.ingest",
    "Plan": "tailkit.config",
    "ScanOptions": "tailkit.ingest",
    "Store": "tailkit.store",
    "TailkitError": "tailkit.errors",
    "calibrate": "tailkit.calibration",
    "dump_plan": "tailkit.config",
    "ingest_paths": "tailkit.ingest",
    "load_plan": "tailkit.config",
    "simulate": "tailkit.simulation",
    "stats": "tailkit.tails",
}


def every_module() -> list[str]:
    """
    The name of every module of the package (``__main__`` left out: importing it runs the CLI).
    """
    found = pkgutil.walk_packages(tailkit.__path__, "tailkit.")
    return sorted(info.name for info in found if info.name.rsplit(".", 1)[-1] != "__main__")


def import_every_module() -> None:
    """
    Import every module; one that needs an extra that is not installed is left out.
    """
    for name in every_module():
        try:
            importlib.import_module(name)
        except MissingExtraError:
            continue


def wrong_root_names() -> list[str]:
    """
    The root names that are not the object their home module defines.
    """
    return [
        f"tailkit.{name} is {getattr(tailkit, name)!r}, not {home}.{name}"
        for name, home in HOMES.items()
        if getattr(tailkit, name) is not getattr(importlib.import_module(home), name)
    ]
