"""
tailkit: measure LLM latency tails and keep agent workflows inside their deadline.

The package is in three layers; a layer imports only the ones below it (the import-linter
contracts in ``pyproject.toml`` check this):

- **The runtime** -- standard library only (PyYAML for plans, httpx or a provider SDK for the
  adapters): what a service imports, with ``pip install tailkit``.
  `tailkit.deadline` (the one deadline a run shares, its scopes and headers),
  `tailkit.executor` (cutoffs, hedging, failover and budgets around each attempt),
  `tailkit.adapters` (attempt functions for real providers), `tailkit.ledger` (one line per
  attempt), `tailkit.serve` (a provider with a latency tail, on loopback), `tailkit.config`
  (the plan file, written atomically with `tailkit._atomic`), and the shared vocabulary:
  `tailkit.errors`, `tailkit.record` (the call record's columns), `tailkit.text` (how numbers
  are written), `tailkit.estimate` (a figure with its interval).
- **The analysis** -- DuckDB, NumPy, SciPy (``pip install 'tailkit[analysis]'``): what turns
  logged calls into a plan. `tailkit.ingest` and `tailkit.formats` read logs into
  `tailkit.store`; `tailkit.fit` fits latency distributions and `tailkit.tails` the tail table
  (`stats`); `tailkit.simulation` plays a plan against the fits (`simulate`) and
  `tailkit.calibration` searches for the best one (`calibrate`); `tailkit.check` judges a plan
  against a ledger, `tailkit.refresh` recalibrates it when it drifted, `tailkit.replay`
  rehearses it against `tailkit.serve`, `tailkit.races` finds races between two logs,
  `tailkit.report` draws the figures, `tailkit.engines` reads files in place or with Dask.
- **The workflows and commands** -- `tailkit.demo` (the whole loop on sample data) and
  `tailkit.cli` (the ``tailkit`` command: parse, call one library function, render).

The entry points: `ingest_paths` into a `Store`, `stats`, `calibrate` to a `Plan` (`dump_plan`,
`load_plan`), `simulate` to predict it; in production, an `Executor` running the plan.
Importing ``tailkit`` is cheap: these names load their module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailkit._lazy import lazy_exports


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
_exported = lazy_exports(__name__, _WHERE)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("tailkit")
    return _exported(name)


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
