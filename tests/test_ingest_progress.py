"""
The ingest bar: inside a file it follows DuckDB's progress, forward only, on a terminal only.
"""

from __future__ import annotations

import io
import threading

from pathlib import Path

import pytest

from rich.console import Console

from tailkit.cli import _progress
from tailkit.cli._progress import IngestProgress


class _FakeStore:
    """
    Reports the given query progress percentages, one per poll once armed, then the last one.
    """

    def __init__(self, percents: list[float]) -> None:
        self.percents = percents
        self.polled = threading.Event()
        self.armed = threading.Event()

    def query_progress(self) -> float:
        if not self.armed.is_set():
            return -1.0
        if len(self.percents) == 1:
            self.polled.set()
        return self.percents.pop(0) if len(self.percents) > 1 else self.percents[0]


def _terminal(monkeypatch: pytest.MonkeyPatch, *, tty: bool) -> None:
    def console(*, stderr: bool = False) -> Console:
        del stderr
        return Console(file=io.StringIO(), force_terminal=tty, emoji=False)

    monkeypatch.setattr(_progress, "new_console", console)


def _shown(bar: IngestProgress) -> float:
    return float(bar._bar.tasks[0].completed)


def test_bar_follows_statements_forward_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second statement restarting at 0% does not move the bar back within the file."""
    _terminal(monkeypatch, tty=True)
    store = _FakeStore([60.0, 10.0, 10.0])
    size = 100 * 1024 * 1024
    with IngestProgress(store, size, enabled=True) as bar:  # type: ignore[arg-type]
        bar.start(Path("big.jsonl"), size)
        store.armed.set()
        assert store.polled.wait(5)
        store.polled.clear()
        assert store.polled.wait(5)  # one more poll after the last percentage
        assert _shown(bar) == size * 0.6
        bar.finish(None, None)
        assert _shown(bar) == size


@pytest.mark.parametrize(("tty", "big", "drawn"), [(True, True, True), (False, True, False),
                                                   (True, False, False)])  # fmt: skip
def test_bar_is_drawn_on_a_terminal_for_big_inputs(
    monkeypatch: pytest.MonkeyPatch, *, tty: bool, big: bool, drawn: bool
) -> None:
    """No bar when stderr is not a terminal, nor for inputs read before a bar would help."""
    _terminal(monkeypatch, tty=tty)
    size = (100 if big else 1) * 1024 * 1024
    bar = IngestProgress(_FakeStore([-1.0]), size, enabled=True)  # type: ignore[arg-type]
    assert bar._bar.disable is not drawn
