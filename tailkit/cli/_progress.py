"""
A rich progress bar for long ingests, fed by ingest events and DuckDB's query progress.

Inside a file the bar follows DuckDB's progress of the statement that is running (the read,
then the steps that settle its rows), never moving back; it is drawn on stderr, and only when
stderr is a terminal.
"""

from __future__ import annotations

import threading

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from tailkit.errors import IngestError
from tailkit.ingest import FileResult
from tailkit.store import Store


_BIG_BYTES = 32 * 1024 * 1024  # below this an ingest is over before a bar helps


class IngestProgress:
    """
    Draws one bar over all bytes to read; inside a big file it follows DuckDB's progress.
    """

    def __init__(
        self, store: Store, total_bytes: int, *, enabled: bool, verb: str = "ingest"
    ) -> None:
        self._store = store
        self._verb = verb
        self._done_bytes = 0
        self._file_bytes = 0
        self._shown = 0
        self._stop = threading.Event()
        console = Console(stderr=True)
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal or total_bytes < _BIG_BYTES,
        )
        self._task = self._bar.add_task(verb, total=total_bytes)
        self._poller = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> IngestProgress:
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
        self._poller.join()
        self._bar.stop()

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            try:
                pct = self._store.query_progress()
            except Exception:  # noqa: S112 - progress is best effort, never fatal
                continue
            if pct >= 0:
                done = self._done_bytes + int(self._file_bytes * min(pct, 100.0) / 100.0)
                # Each statement starts again from 0%: the bar only moves forward.
                self._shown = max(self._shown, done)
                self._bar.update(self._task, completed=self._shown)

    def start(self, path: Path, size_bytes: int) -> None:
        """
        A file is about to be read.
        """
        self._file_bytes = size_bytes
        self._bar.update(self._task, description=f"{self._verb} {path.name}")

    def finish(self, result: FileResult | None, error: IngestError | None) -> None:
        """
        A file is done.
        """
        del result, error
        self._done_bytes += self._file_bytes
        self._file_bytes = 0
        self._shown = self._done_bytes
        self._bar.update(self._task, completed=self._done_bytes)
