"""
Write the report's files whole or not at all, the page last: a failed run keeps the last report.

Every file goes first to a temporary file beside it (``.NAME.RANDOM.tmp``), flushed to disk
(``fsync``); only when every one is written are they renamed into place (``os.replace``, atomic
on one file system), the page last. A full disk, a kill or an error while writing leaves the
previous ``index.html`` and figures as they were; a kill during the renames leaves the previous
page, or the new one, never half of one. The old figures the new page does not have are
removed only after the page is in place; temporary files a killed run left are removed by the
next run.
"""

from __future__ import annotations

import contextlib
import os

from collections.abc import Iterable, Mapping
from pathlib import Path

from tailkit._atomic import TMP_SUFFIX, temp_beside
from tailkit.errors import ConfigError


def _write_temp(path: Path, data: bytes) -> Path:
    """
    ``data`` in a new temporary file beside ``path``, on disk (fsync); its path.
    """
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(handle.fileno(), view) :]
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _sync_folder(folder: Path) -> None:
    """
    Make the renames in ``folder`` durable (where the platform can open a folder).
    """
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_files(
    out: Path, files: Mapping[str, bytes], *, last: str, stale: Iterable[Path] = ()
) -> list[Path]:
    """
    Write ``files`` (name -> bytes) into ``out`` atomically, ``last`` renamed into place last.

    Args:
        out: The folder (created).
        files: Every file of the report by name, ``last`` among them.
        last: The file that makes the report (``index.html``): renamed after all others.
        stale: Files to remove once ``last`` is in place (old figures the new page lacks).

    Returns:
        The paths written, ``last`` last.

    Raises:
        ConfigError: A file cannot be written (full disk, no permission): nothing of the
            previous report was replaced, and no temporary file is left.
    """
    stale = list(stale)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(out, [*files, *(p.name for p in stale)])
        order = [name for name in files if name != last] + [last]
        temps: dict[str, Path] = {}
        try:
            for name in order:
                temps[name] = _write_temp(out / name, files[name])
            for name in order:
                os.replace(temps.pop(name), out / name)
        finally:
            for tmp in temps.values():
                tmp.unlink(missing_ok=True)
        _sync_folder(out)
    except OSError as exc:
        msg = (
            f"cannot write the report in {out}: {exc.strerror or exc}; the previous report "
            "there is left as it was. Free some space, or write it to another folder"
        )
        raise ConfigError(msg, field="out_dir", value=str(out)) from None
    for old in stale:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return [out / name for name in order]


def _remove_leftovers(out: Path, names: Iterable[str]) -> None:
    """
    Remove the temporary files a killed run left for these names (``.NAME.*.tmp``).
    """
    for name in names:
        for left in out.glob(f".{name}.*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                left.unlink()
