"""
The replay's server in a process of its own, so that the client's CPU never delays it.

It is ``tailkit serve --outcomes FILE --port 0 --log ACCESS`` run by this interpreter; the URL
is read from the first line it prints. Stopping sends SIGINT (the server closes its
connections and its access log), then kills it if it does not go.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading

from pathlib import Path
from types import TracebackType
from typing import IO

from tailkit.errors import TailkitError


__all__ = ["ServerProcess"]

_URL = re.compile(r" at (http://127\.0\.0\.1:\d+/v1)")
_START_S = 60.0  # seconds the server may take to load its tables and listen
_STOP_S = 10.0


class ServerProcess:
    """
    ``with ServerProcess(outcomes, access_log) as server:`` serves at ``server.url``.

    Args:
        outcomes: The outcomes file (`tailkit.serve.lowlevel.dump_outcomes`).
        access_log: Where the server appends one call record per request.

    Raises:
        TailkitError: The server did not start (its error output is in the message).
    """

    def __init__(self, outcomes: Path, access_log: Path) -> None:
        self.outcomes = outcomes
        self.access_log = access_log
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._errors: IO[str] | None = None

    def _pump(self) -> None:
        assert self._proc is not None  # noqa: S101 - started before the thread
        assert self._proc.stdout is not None  # noqa: S101 - a pipe
        try:
            for line in self._proc.stdout:
                self._lines.put(line)
        except (OSError, ValueError):
            pass  # closed by _stop
        self._lines.put(None)

    def __enter__(self) -> ServerProcess:
        command = [sys.executable, "-m", "tailkit", "serve", "--outcomes", str(self.outcomes),
                   "--port", "0", "--log", str(self.access_log)]  # fmt: skip
        self._errors = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self._proc = subprocess.Popen(  # noqa: S603 - this interpreter, our own command
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            line = self._lines.get(timeout=_START_S)
        except queue.Empty:
            line = None
        found = _URL.search(line or "")
        if found is None:
            error = self._stop()
            msg = f"the replay server did not start: {error.strip() or line or 'no output'}"
            raise TailkitError(msg)
        self.url = found.group(1)
        return self

    def _stop(self) -> str:
        proc = self._proc
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=_STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        error = ""
        if self._errors is not None:
            self._errors.seek(0)
            error = self._errors.read()
            self._errors.close()
            self._errors = None
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None
        return error

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()
