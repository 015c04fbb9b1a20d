"""
Every progress display of the CLI: the bars on stderr, and the ``> phase  (3 s)`` lines.

The library reports progress through callbacks (`tailkit.ingest.Progress` for files read,
``on_file(done, total)`` for file tasks, ``progress(done, per_pass)`` for the calibration's
search, ``progress(phase, done, total)`` for a replay, ``progress(message)`` for phases); this
module is the one place that draws them. A bar is drawn on stderr, and only when stderr is a
terminal, so that piped output and ``--json`` stay clean. A label that holds a name from the
data (a file's, a phase's) is drawn as text, never read as rich markup.
"""

from __future__ import annotations

import threading
import time

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from tailkit.cli._common import new_console, shown
from tailkit.text import printable


if TYPE_CHECKING:
    from tailkit.errors import IngestError
    from tailkit.ingest import FileResult
    from tailkit.store import Store


_BIG_BYTES = 32 * 1024 * 1024  # below this an ingest is over before a bar helps


class _Bar:
    """
    A rich progress display as a context manager: started on entry, stopped on exit.
    """

    _bar: Progress

    def __enter__(self) -> Self:
        self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.stop()


_SPOOL_SAID_BYTES = 64 * 2**20
"""A pipe copied to a temporary file is reported from this size on."""


class IngestProgress:
    """
    Draws one bar over all bytes to read; inside a big file it follows DuckDB's progress.

    A `tailkit.ingest.Progress`: the library tells it the store and the bytes to read
    (``begin``), then each file's start and finish. Inside a file the bar follows DuckDB's
    progress of the statement that is running (the read, then the steps that settle its rows),
    never moving back.
    """

    def __init__(
        self,
        store: Store | None = None,
        total_bytes: int = 0,
        *,
        enabled: bool,
        verb: str = "ingest",
    ) -> None:
        self._store = store
        self._verb = verb
        self._enabled = enabled
        self._done_bytes = 0
        self._file_bytes = 0
        self._shown = 0
        self._stop = threading.Event()
        self._console = new_console(stderr=True)
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,
            disable=self._hidden(total_bytes),
        )
        self._task = self._bar.add_task(verb, total=total_bytes)
        self._poller = threading.Thread(target=self._poll, daemon=True)

    def _hidden(self, total_bytes: int) -> bool:
        return not self._enabled or not self._console.is_terminal or total_bytes < _BIG_BYTES

    def __enter__(self) -> IngestProgress:
        if self._store is not None:
            self._bar.start()
            self._poller.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._poller.is_alive():
            self._poller.join()
        self._bar.stop()

    def begin(self, store: Store, total_bytes: int) -> None:
        """
        The library is about to read ``total_bytes`` into ``store``: draw the bar.
        """
        if self._poller.is_alive():
            return
        self._store = store
        self._bar.disable = self._hidden(total_bytes)
        self._bar.update(self._task, total=total_bytes)
        self._bar.start()
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            if self._store is None:
                continue
            try:
                pct = self._store.query_progress()
            except Exception:  # noqa: S112 - progress is best effort, never fatal
                continue
            if pct >= 0:
                done = self._done_bytes + int(self._file_bytes * min(pct, 100.0) / 100.0)
                # Each statement starts again from 0%: the bar only moves forward.
                self._shown = max(self._shown, done)
                self._bar.update(self._task, completed=self._shown)

    def spooling(self, path: Path, copied_bytes: int) -> None:
        """
        A pipe or standard input is being copied to a temporary file (it can be read only once).

        Told every 64 MiB and at the end: a line on standard error once the copy is that big, so
        a long ``<(zcat …)`` does not look like a hang (a small pipe says nothing).
        """
        if self._enabled and copied_bytes >= _SPOOL_SAID_BYTES:
            self._console.print(
                f"> copying {printable(path)} to a temporary file ({copied_bytes / 1e6:,.0f} MB)",
                markup=False,
                highlight=False,
            )

    def start(self, path: Path, size_bytes: int) -> None:
        """
        A file is about to be read.
        """
        self._file_bytes = size_bytes
        self._bar.update(self._task, description=f"{self._verb} {printable(path.name)}")

    def finish(self, result: FileResult | None, error: IngestError | None) -> None:
        """
        A file is done.
        """
        del result, error
        self._done_bytes += self._file_bytes
        self._file_bytes = 0
        self._shown = self._done_bytes
        self._bar.update(self._task, completed=self._done_bytes)


class FileTasksProgress(_Bar):
    """
    A bar over file tasks (``stats --sketch`` and ``--engine dask``: two passes per file).

    Drawn from the first task reported on: the exact table, which has none, draws nothing.
    """

    def __init__(self, *, enabled: bool) -> None:
        console = new_console(stderr=True)
        self._bar = Progress(
            TextColumn("summarizing files (2 passes)"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> Self:
        return self

    def __call__(self, done: int, total: int) -> None:
        """
        ``done`` of ``total`` file tasks finished.
        """
        if self._task is None:
            self._task = self._bar.add_task("files", total=total)
            self._bar.start()
        self._bar.update(self._task, completed=done, total=total)


class SearchProgress(_Bar):
    """
    A bar over the calibration search's candidates (one pass at a time).
    """

    def __init__(self, *, enabled: bool) -> None:
        console = new_console(stderr=True)
        self._bar = Progress(
            TextColumn("calibrate pass {task.fields[pass_no]}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self._task = self._bar.add_task("search", total=None, pass_no=1)

    def update(self, done: int, per_pass: int) -> None:
        """
        ``done`` candidates tried so far, ``per_pass`` in each pass.
        """
        self._bar.update(
            self._task,
            total=per_pass,
            completed=(done - 1) % per_pass + 1,
            pass_no=(done - 1) // per_pass + 1,
        )


class ReplayProgress(_Bar):
    """
    One bar per phase of a replay (probe, without plan, with plan).
    """

    def __init__(self, *, enabled: bool) -> None:
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=new_console(stderr=True),
            refresh_per_second=4,  # the replay's client loop shares this process: stay light
            disable=not enabled,
        )
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        """
        ``done`` of ``total`` runs of ``phase``; a phase seen again gets a bar of its own.
        """
        if phase not in self._tasks or self._bar.tasks[self._tasks[phase]].finished:
            label = f"replay {printable(phase)}"
            if phase in self._tasks:  # a second pass (slower time scale) gets its own bar
                label += " (again, slower)"
            self._tasks[phase] = self._bar.add_task(label, total=total)
        self._bar.update(self._tasks[phase], completed=done)


def phase_lines(console: Console, *, enabled: bool = True) -> Callable[[str], None]:
    """
    A ``progress(message)`` that prints ``> message  (3 s)``, the seconds since it was made.
    """
    started = time.perf_counter()

    def say(message: str) -> None:
        if enabled:
            elapsed = time.perf_counter() - started
            console.print(
                f"[bold]>[/bold] {shown(message)}  [dim]({elapsed:.0f} s)[/dim]", highlight=False
            )

    return say
