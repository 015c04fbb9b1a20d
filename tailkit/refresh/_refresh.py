"""
`refresh`: one turn of the drift loop, from the ledgers to a plan file the service follows.

The turn: check the running plan against the ledgers of its runs (`tailkit.check.check_plan`);
if a line drifted (or when forced), ingest the ledgers into the store (ingest stores each call
once, so the same ledger ingested every turn adds only its new lines), calibrate the workflow
again on the store's recent calls with the running plan's deadline, hedge budget and routing
mode, and, when the new plan differs from the running one, write it over the plan file in one
step (`tailkit.config.write_plan`) after keeping the old one beside it. A service that follows
the file (`tailkit.executor.follow_plan`) swaps the new plan in on its next poll.

A recalibration that cannot run (too few recent calls of a route) is an outcome, not an
error: the old plan stays, and the report says how many calls there were and how many it
needs. A dry run does all of it on a copy of the store in memory and writes nothing.
"""

from __future__ import annotations

import os
import shutil

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tailkit._atomic import temp_beside
from tailkit.config import Plan, dump_plan, load_plan, write_plan
from tailkit.errors import ConfigError, TailkitError
from tailkit.estimate import LEVEL
from tailkit.refresh._report import (
    KEPT,
    NOT_RECALIBRATED,
    UNCHANGED,
    WOULD_WRITE,
    WRITTEN,
    Refresh,
)


if TYPE_CHECKING:
    from tailkit.calibration import Calibration
    from tailkit.formats import ScanOptions
    from tailkit.ingest import IngestReport
    from tailkit.record import Buckets
    from tailkit.store import Store


Ledgers = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
"""One ledger path, or several (files, folders or glob patterns), as `check_plan` takes them."""

SINCE = timedelta(hours=6)
"""What "recent" means by default: the six hours before the newest call in the store."""

DEFAULT_DB = Path("tailkit.duckdb")
"""The store file every command uses by default (``tailkit.store.DEFAULT_DB``)."""

BACKUP_SUFFIX = ".prev"
"""The old plan is kept as the plan file's name plus this, unless told where."""


def refresh(
    plan: str | os.PathLike[str],
    workflow: str | os.PathLike[str],
    ledgers: Ledgers,
    *,
    db: str | os.PathLike[str] = DEFAULT_DB,
    since: datetime | timedelta | None = SINCE,
    force: bool = False,
    dry_run: bool = False,
    backup: str | os.PathLike[str] | None = None,
    format: str = "trace",
    options: ScanOptions | None = None,
    tolerance: float | None = None,
    min_runs: int | None = None,
    level: float = LEVEL,
    runs: int = 20_000,
    check_runs: int = 100_000,
    seed: int = 0,
    replicates: int | None = None,
    min_calls: int | None = None,
    latency: str = "empirical",
    buckets: Buckets | None = None,
    memory_limit: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Refresh:
    """
    Check the running plan against its ledgers; if it drifted, recalibrate and replace it.

    Args:
        plan: The running plan's file: read, checked, and (on a drift) replaced.
        workflow: The workflow file the plan was calibrated from (the steps, routes and
            candidates as written); the plan's deadline, hedge budget and routing mode (live
            when any step of the running plan routes live) are kept.
        ledgers: The executor's ledger(s) of the running plan's runs: files, folders or glob
            patterns, as `tailkit.check.check_plan` takes them.
        db: The store file the ledgers are ingested into and the recalibration reads.
        since: The calls the recalibration reads: those that started at or after this
            instant (UTC when naive), or within this duration back from the newest call in
            the store, ledgers included (default six hours); ``None``: every call.
        force: Recalibrate even when nothing drifted.
        dry_run: Write nothing (not the store, the plan or the backup): ingest into a copy of
            the store in memory, and report what would be written.
        backup: Where the old plan is kept when a new one is written (``None``: the plan's
            path plus ``.prev``); replaced by each new write.
        format: The ledgers' format, for the check and the ingest (``trace``: the executor's
            ledger; ``auto``: detected per file).
        options: How to read the ledgers' columns (`tailkit.ingest.ScanOptions`).
        tolerance: The check's relative difference too small to drift (``None``: its 0.15).
        min_runs: The check's fewest runs for a verdict (``None``: its 30).
        level: The check's family level (0.95).
        runs: Simulated runs per candidate in the recalibration's search.
        check_runs: Fresh simulated runs behind the new plan's predictions.
        seed: The recalibration's seed.
        replicates: Bootstrap replicates behind the new predictions' intervals (``None``:
            calibrate's 100).
        min_calls: Fewest recent calls a step's route needs in its bucket (``None``:
            calibrate's 200).
        latency: ``empirical`` or ``lognormal``, as for calibrate.
        buckets: Token bucket edges (``None``: the defaults).
        memory_limit: DuckDB's memory limit for the store, e.g. ``"2GB"`` (``None``: its
            default).
        progress: Called with (candidates tried, candidates per pass) while recalibrating.

    Returns:
        What happened: its ``outcome`` (kept, unchanged, written, would write, not
        recalibrated) and ``exit_code`` (0 the plan stays, 1 a new plan, 3 drifted but not
        recalibrated), the check, and the old plan's figures beside the new one's.

    Raises:
        ConfigError: The plan or the workflow cannot be read, the plan has no predictions,
            they are not the same workflow, ``since`` is not a duration above zero, or
            ``backup`` is the plan itself.
        IngestError: A ledger cannot be read, or holds no run of the plan's steps.
        StoreError: The store cannot be opened (locked, not a store).
    """
    from tailkit.calibration import REPLICATES
    from tailkit.check import check_plan
    from tailkit.check.lowlevel import MIN_RUNS, TOLERANCE
    from tailkit.simulation import DEFAULT_MIN_CALLS

    path = Path(plan)
    running = load_plan(path)
    written = _workflow(workflow, running)
    _check_since(since)
    kept = _backup_path(path, backup)
    report = check_plan(
        path,
        ledgers,
        format=format,
        options=options,
        tolerance=TOLERANCE if tolerance is None else tolerance,
        min_runs=MIN_RUNS if min_runs is None else min_runs,
        level=level,
    )
    done = Refresh(path, KEPT, report, running, forced=force, dry_run=dry_run)
    if report.exit_code == 0 and not force:
        return done
    live = any(step.live is not None for step in running.steps.values())
    with _store(db, dry_run=dry_run, memory_limit=memory_limit) as store:
        ingested = _ingest(store, ledgers, format, options)
        try:
            found = _recalibrate(
                store, written, running, since=since, live=live, runs=runs,
                check_runs=check_runs, seed=seed, buckets=buckets, latency=latency,
                min_calls=DEFAULT_MIN_CALLS if min_calls is None else min_calls,
                replicates=REPLICATES if replicates is None else replicates, progress=progress,
            )  # fmt: skip
        except _CannotRecalibrate as exc:
            return _replace(done, NOT_RECALIBRATED, ingested=ingested, problem=exc.error)
    new = found.plan
    outcome = UNCHANGED if dump_plan(new) == dump_plan(running) else WRITTEN
    if outcome == WRITTEN and dry_run:
        outcome = WOULD_WRITE
    if outcome == WRITTEN:
        _keep(path, kept)
        write_plan(new, path)
    return _replace(
        done,
        outcome,
        new=new,
        backup=kept if outcome == WRITTEN else None,
        since=found.since,
        ingested=ingested,
        calibration=found,
    )


def _replace(done: Refresh, outcome: str, **changes: object) -> Refresh:
    import dataclasses

    return dataclasses.replace(done, outcome=outcome, **changes)  # type: ignore[arg-type]


class _CannotRecalibrate(Exception):  # noqa: N818 - an outcome carried out, not an error shown
    """
    The recalibration could not run (too few recent calls): the old plan stays.
    """

    def __init__(self, error: TailkitError) -> None:
        super().__init__(str(error))
        self.error = error


def _workflow(workflow: str | os.PathLike[str], running: Plan) -> Plan:
    """
    The workflow file, checked to be the running plan's workflow (its name and its steps).
    """
    written = load_plan(workflow)
    if written.workflow != running.workflow:
        msg = (
            f"{os.fspath(workflow)} is workflow {written.workflow!r}, but the plan runs "
            f"workflow {running.workflow!r}: pass the {{field}} the plan was calibrated from."
        )
        raise ConfigError(msg, field="workflow", value=os.fspath(workflow))
    if list(written.steps) != list(running.steps):
        msg = (
            f"{os.fspath(workflow)} has steps {', '.join(written.steps)}, but the plan has "
            f"{', '.join(running.steps)}: pass the {{field}} the plan was calibrated from "
            "(a workflow whose steps changed needs a plan calibrated anew, and a restart)."
        )
        raise ConfigError(msg, field="workflow", value=os.fspath(workflow))
    return written


def _check_since(since: datetime | timedelta | None) -> None:
    if isinstance(since, timedelta) and since <= timedelta(0):
        msg = f"{{field}} must be a duration above zero, got {since}."
        raise ConfigError(
            msg, field="since", value=since, fix="Pass e.g. timedelta(hours=6), or None."
        )


def _backup_path(path: Path, backup: str | os.PathLike[str] | None) -> Path:
    kept = path.with_name(path.name + BACKUP_SUFFIX) if backup is None else Path(backup)
    if kept.resolve() == path.resolve():
        msg = f"{{field}} is the plan file itself ({kept}): the old plan would be lost."
        raise ConfigError(
            msg, field="backup", value=str(kept), fix="Pass another path, or None for PLAN.prev."
        )
    return kept


def _keep(path: Path, kept: Path) -> None:
    """
    Copy the running plan's file to ``kept`` as it is, in one step (a temporary file renamed).

    Raises:
        ConfigError: The copy cannot be written (``field`` is ``backup``).
    """
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(kept)
        try:
            with os.fdopen(fd, "wb") as out, path.open("rb") as source:
                shutil.copyfileobj(source, out)
                out.flush()
                os.fsync(out.fileno())
            shutil.copymode(path, tmp)
            os.replace(tmp, kept)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        why = exc.strerror or exc
        msg = f"{kept}: cannot keep the old plan there: {why}: choose another {{field}}"
        raise ConfigError(msg, field="backup", value=str(kept)) from None


class _store:  # noqa: N801 - a context manager used like a function
    """
    The store to ingest into: the file, or (a dry run) a copy of its tables in memory.
    """

    def __init__(
        self, db: str | os.PathLike[str], *, dry_run: bool, memory_limit: str | None
    ) -> None:
        self.db, self.dry_run, self.memory_limit = Path(db), dry_run, memory_limit
        self.store: Store | None = None

    def __enter__(self) -> Store:
        from tailkit.store import Store

        if not self.dry_run:
            self.store = Store.open(self.db, memory_limit=self.memory_limit)
            return self.store
        self.store = Store.open(":memory:", memory_limit=self.memory_limit)
        if self.db.exists():
            try:
                _copy_tables(self.store, self.db)
            except BaseException:
                self.store.close()
                raise
        return self.store

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()


_COPIED = ("calls", "rejects", "ingests")
"""The tables a dry run copies: the calls, and what ingest reads to store each call once."""


def _copy_tables(store: Store, db: Path) -> None:
    """
    Copy a store file's tables into an empty store in memory (a dry run's store).
    """
    from tailkit.store import Store

    Store.open(db, read_only=True).close()  # a tailkit store of this schema, or a StoreError
    quoted = str(db).replace("'", "''")
    store.execute(f"ATTACH '{quoted}' AS source (READ_ONLY)")
    try:
        for table in _COPIED:
            store.execute(f"INSERT INTO {table} SELECT * FROM source.main.{table}")
        row = store.fetchone("SELECT coalesce(max(ingest_id), 0) + 1 FROM ingests")
        first = int(row[0]) if row else 1
        store.execute("DROP SEQUENCE ingest_id_seq")
        store.execute(f"CREATE SEQUENCE ingest_id_seq START {first}")
    finally:
        store.execute("DETACH source")


def _ingest(
    store: Store, ledgers: Ledgers, format: str, options: ScanOptions | None
) -> IngestReport:
    """
    Ingest the ledgers (each call once: a ledger ingested before adds only its new lines).

    Raises:
        IngestError: A ledger could not be read (the first such error).
    """
    from tailkit.ingest import ingest_paths

    given = [ledgers] if isinstance(ledgers, str | os.PathLike) else list(ledgers)
    paths = [os.fspath(p) for p in given]
    report = ingest_paths(store, paths, format=format, options=options)
    if report.errors:
        raise report.errors[0]
    return report


def _recalibrate(
    store: Store,
    workflow: Plan,
    running: Plan,
    *,
    since: datetime | timedelta | None,
    live: bool,
    runs: int,
    check_runs: int,
    seed: int,
    buckets: Buckets | None,
    latency: str,
    min_calls: int,
    replicates: int,
    progress: Callable[[int, int], None] | None,
) -> Calibration:
    """
    The workflow calibrated on recent calls, with the running plan's deadline, budget and mode.

    Raises:
        _CannotRecalibrate: Too few recent calls of a route (or none at all since ``since``).
    """
    from tailkit.calibration import calibrate
    from tailkit.simulation import ThinSampleError

    try:
        return calibrate(
            store, workflow, budget=running.hedge_budget, deadline_s=running.deadline_s,
            runs=runs, check_runs=check_runs, seed=seed, buckets=buckets, min_calls=min_calls,
            latency=latency, replicates=replicates, progress=progress, live=live, since=since,
        )  # fmt: skip
    except ThinSampleError as exc:
        window = "" if since is None else f" ({_window(store, since)})"
        raise _CannotRecalibrate(_prefixed(exc, f"too few recent calls{window}: ")) from None
    except ConfigError as exc:
        if exc.field != "since":
            raise
        raise _CannotRecalibrate(_prefixed(exc, "no recent calls to recalibrate on: ")) from None


def _window(store: Store, since: datetime | timedelta) -> str:
    """
    ``calls since 2026-12-06T01:40:00Z, 6:00:00 before the newest call``: what recent meant.
    """
    if isinstance(since, datetime):
        start = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
        return f"calls since {_iso(start)}"
    row = store.fetchone("SELECT max(started_at) FROM calls")
    newest: datetime | None = None if row is None else row[0]
    if newest is None:
        return f"calls within {_duration(since)} of the newest call"
    return f"calls since {_iso(newest - since)}, {_duration(since)} before the newest call"


def _duration(span: timedelta) -> str:
    """
    ``6h``, ``90m``, ``2d``, ``45s``: a duration as ``since`` is written on a command line.
    """
    seconds = span.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _prefixed(error: TailkitError, prefix: str) -> TailkitError:
    """
    The same error (its class, parameter and fix) with ``prefix`` before its message.
    """
    template = getattr(error, "template", None) or str(error)
    return type(error)(prefix + template, field=error.field, value=error.value, fix=error.fix)
