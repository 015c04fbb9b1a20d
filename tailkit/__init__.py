"""
tailkit: measure LLM latency tails and keep agent workflows inside their deadline.

Importing ``tailkit`` is cheap: the public names below load their module on first use.
"""

from __future__ import annotations

import importlib

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from tailkit.calibration import calibrate
    from tailkit.config import Plan, dump_plan, load_plan
    from tailkit.errors import TailkitError
    from tailkit.executor import Executor
    from tailkit.ingest import IngestReport, ScanOptions, ingest_paths
    from tailkit.record import Buckets
    from tailkit.simulation import simulate
    from tailkit.store import Store
    from tailkit.tails import stats

__all__ = [
    "Buckets",
    "Executor",
    "IngestReport",
    "Plan",
    "ScanOptions",
    "Store",
    "TailkitError",
    "calibrate",
    "dump_plan",
    "ingest_paths",
    "load_plan",
    "simulate",
    "stats",
]

_WHERE = {
    "Buckets": "tailkit.record",
    "Executor": "tailkit.executor",
    "Plan": "tailkit.config",
    "calibrate": "tailkit.calibration",
    "dump_plan": "tailkit.config",
    "load_plan": "tailkit.config",
    "simulate": "tailkit.simulation",
    "IngestReport": "tailkit.ingest",
    "ScanOptions": "tailkit.ingest",
    "Store": "tailkit.store",
    "TailkitError": "tailkit.errors",
    "ingest_paths": "tailkit.ingest",
    "stats": "tailkit.tails",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("tailkit")
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'tailkit' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
