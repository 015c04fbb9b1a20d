"""
The report is written whole or not at all: a run that fails midway keeps the previous report.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

from pathlib import Path

import numpy as np
import pytest

from tailkit.errors import ConfigError
from tailkit.ingest import ingest_paths
from tailkit.report import _write, write_report
from tailkit.store import Store


def _store(tmp_path: Path) -> Path:
    """
    400 streamed calls of one model: enough for the latency figures.
    """
    rng = np.random.default_rng(3)
    rows = [
        {
            "call_id": f"c{i}",
            "provider": "openai",
            "model": "gpt-4.1-mini",
            "total_s": float(rng.lognormal(0.0, 0.5)),
            "ttft_s": 0.2,
            "input_tokens": 3000,
            "output_tokens": 300,
            "started_at": f"2026-11-29T12:{i // 60:02d}:{i % 60:02d}Z",
        }
        for i in range(400)
    ]
    log = tmp_path / "calls.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    db = tmp_path / "calls.duckdb"
    with Store.open(db) as store:
        assert ingest_paths(store, [log]).ok
    return db


def _folder(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """
    A store and a report written from it (plus a stale figure), made once for this file.
    """
    tmp = tmp_path_factory.mktemp("atomic")
    db = _store(tmp)
    out = tmp / "report"
    with Store.open(db, read_only=True) as store:
        write_report(store, out, title="the previous report")
    (out / "fig_old_only.png").write_bytes(b"\x89PNG old")
    return db, out


@pytest.fixture
def previous(made: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """
    A copy of the previous report for one test, and that folder's bytes.
    """
    db, made_out = made
    out = tmp_path / "report"
    shutil.copytree(made_out, out)
    before = _folder(out)
    assert b"the previous report" in before["index.html"]
    assert any(name.startswith("fig_") and name != "fig_old_only.png" for name in before)
    return db, out, before


@pytest.mark.parametrize("fail_at", ["index.html", "fig_"])
def test_a_write_that_fails_midway_keeps_the_previous_report(
    previous: tuple[Path, Path, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    fail_at: str,
) -> None:
    """A full disk halfway through the page (or a figure) leaves every old file as it was."""
    db, out, before = previous
    real_write = os.write
    real_open = os.open
    names: dict[int, str] = {}

    def tracking_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        names[fd] = os.path.basename(os.fspath(path))
        return fd

    def full_disk(fd: int, data: bytes | memoryview) -> int:
        if names.get(fd, "").startswith(f".{fail_at}"):
            real_write(fd, bytes(data[: len(data) // 2]))  # half of it, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(_write.os, "open", tracking_open)
    monkeypatch.setattr(_write.os, "write", full_disk)
    with Store.open(db, read_only=True) as store, pytest.raises(ConfigError) as caught:
        write_report(store, out, title="the new report")
    assert "No space left on device" in str(caught.value)
    assert "previous report" in str(caught.value)
    assert caught.value.field == "out_dir"
    assert _folder(out) == before  # the old page and figures, and no temporary file


def test_a_kill_before_the_renames_leaves_temporary_files_the_next_run_removes(
    previous: tuple[Path, Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed after writing its temporary files keeps the old page; the next cleans up."""
    db, out, before = previous

    def killed(src: object, dst: object) -> None:
        raise KeyboardInterrupt  # stands for SIGKILL between the writes and the renames

    monkeypatch.setattr(_write.os, "replace", killed)
    monkeypatch.setattr(_write.Path, "unlink", lambda self, missing_ok=False: None)  # no cleanup
    with Store.open(db, read_only=True) as store, pytest.raises(KeyboardInterrupt):
        write_report(store, out, title="the new report")
    monkeypatch.undo()
    left = [name for name in _folder(out) if name.endswith(".tmp")]
    assert left  # what a real kill leaves
    assert {k: v for k, v in _folder(out).items() if k in before} == before
    with Store.open(db, read_only=True) as store:
        write_report(store, out, title="the new report")
    after = _folder(out)
    assert not [name for name in after if name.endswith(".tmp")]
    assert b"the new report" in after["index.html"]
    assert "fig_old_only.png" not in after  # the new page does not have it


def test_a_successful_run_replaces_the_page_and_its_figures(
    previous: tuple[Path, Path, dict[str, bytes]],
) -> None:
    """The new page and figures replace the old; nothing else is left in the folder."""
    db, out, before = previous
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with Store.open(db, read_only=True) as store:
        index = write_report(store, out, title="the new report")
    after = _folder(out)
    assert index == out / "index.html"
    assert b"the new report" in after["index.html"]
    assert set(after) == (set(before) - {"fig_old_only.png"}) | {"notes.txt"}
