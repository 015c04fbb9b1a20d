"""
Inputs that are streams, not files: a pipe, ``<(zcat log.jsonl.gz)``, ``/dev/stdin``, ``-``.

A stream has no size and can be read once, but an ingest reads a file several times (detection,
DuckDB's sniff and scan, the content hash, the raw lines of rejected rows). So a stream is first
copied whole into a temporary regular file (a *spool*), and that file is ingested as usual under
the stream's own name: results, errors, ``source_file`` and ``ingests.path`` say ``-`` or
``/dev/fd/63``, never the spool's name.

What may be spooled: a pipe (FIFO), a character device other than a terminal (``/dev/stdin``
redirected from a file is a regular file and needs no spool), and a socket. A block device,
a terminal, and a stream whose first bytes are binary (``/dev/zero``, ``/dev/urandom``: not
gzip, not Parquet, a NUL byte in the first 64 KiB) are refused at once, and a spool stops with
an error once it reaches half the free space of the temporary folder's disk, so that an endless
stream (``yes``) neither hangs nor fills the disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tailkit.errors import InputFileError


STDIN = "-"
"""The name that means standard input."""

_CHUNK_BYTES = 1 << 20
_HEAD_BYTES = 64 * 1024  # what detection reads
_TELL_EVERY_BYTES = 64 << 20
_MAGIC = (b"\x1f\x8b", b"PAR1")  # gzip, Parquet: binary, and read by tailkit

Spooling = Callable[[Path, int], None]
"""Told the stream's name and the bytes copied so far, every 64 MiB and at the end."""


def is_stream(path: Path) -> bool:
    """
    Whether ``path`` names standard input or anything that is not a regular file.

    A missing path is no stream (it fails as a missing file).
    """
    if str(path) == STDIN:
        return True
    try:
        return not stat.S_ISREG(path.stat().st_mode) and not path.is_dir()
    except OSError:
        return False


def is_nameless(path: Path) -> bool:
    """
    Whether the stream's name stands for no place: ``-``, or a name under ``/dev`` or ``/proc``.

    ``/dev/fd/63`` names every process substitution, ``/dev/stdin`` every redirection; a named
    pipe (``bench/gpt-4o/run.jsonl``) names one source.
    """
    return str(path) == STDIN or str(path.absolute()).startswith(("/dev/", "/proc/"))


def spool_limit(folder: Path) -> int:
    """
    The most bytes one ingest may spool into ``folder``: half the free space of its disk.

    The other half is left for the store, which grows by about the stream's size.
    """
    return shutil.disk_usage(folder).free // 2


@dataclass(slots=True)
class Spools:
    """
    The spools of one ingest, in one temporary folder removed when the ingest ends.

    Args:
        folder: The temporary folder.
        tell: Told the progress of each spool (``None``: nobody).
        spooled: A stream's name → its spool.
    """

    folder: Path
    tell: Spooling | None = None
    spooled: dict[Path, Path] = field(default_factory=dict)

    def spool(self, name: Path) -> Path:
        """
        Copy the stream ``name`` into a regular file of the folder and return that file.

        Raises:
            InputFileError: The stream cannot be spooled: a terminal, a block device, empty,
                binary, unreadable, or larger than `spool_limit`.
        """
        limit = spool_limit(self.folder)
        with _opened(name) as source:
            first = source.read(_CHUNK_BYTES)
            if not first:
                msg = f"{name}: empty stream (0 bytes), nothing to ingest"
                raise InputFileError(msg)
            if b"\x00" in first[:_HEAD_BYTES] and not first.startswith(_MAGIC):
                msg = (
                    f"{name}: binary stream, not JSON, CSV, Parquet or gzip; "
                    "give a log file or pipe one in"
                )
                raise InputFileError(msg)
            target = self.folder / f"{len(self.spooled)}-stream{_suffix(name, first)}"
            copied = _copy(name, source, first, target, limit, self.tell)
        if self.tell:
            self.tell(name, copied)
        self.spooled[name] = target
        return target


@contextlib.contextmanager
def spools(tell: Spooling | None = None) -> Iterator[Spools]:
    """
    A `Spools` whose folder (and every spool in it) is removed on exit.
    """
    with tempfile.TemporaryDirectory(prefix="tailkit-stream-") as folder:
        yield Spools(Path(folder), tell)


@contextlib.contextmanager
def _opened(name: Path) -> Iterator[BinaryIO]:
    """
    The stream ``name``, open for reading (standard input is not closed after).

    Raises:
        InputFileError: ``name`` is a terminal, a block device or another kind of file that is
            not a stream of bytes, or cannot be opened.
    """
    if str(name) == STDIN:
        if sys.stdin is None:  # started with standard input closed (<&-)
            msg = f"{name}: standard input is closed; pipe a log into it (zcat log.gz | ...)"
            raise InputFileError(msg)
        stdin = sys.stdin.buffer
        if _is_terminal(stdin):
            msg = f"{name}: standard input is a terminal; pipe a log into it (zcat log.gz | ...)"
            raise InputFileError(msg)
        yield stdin
        return
    try:
        mode = name.stat().st_mode
    except OSError as exc:
        msg = f"{name}: cannot read ({exc.strerror or exc})"
        raise InputFileError(msg) from None
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        msg = f"{name}: not a regular file or a pipe; give a log file"
        raise InputFileError(msg)
    try:
        # A pipe without a writer yet waits for one, as `cat` does.
        with name.open("rb") as fh:
            if _is_terminal(fh):
                msg = f"{name}: a terminal, not a log; pipe a log into it"
                raise InputFileError(msg)
            yield fh
    except OSError as exc:
        msg = f"{name}: cannot read ({exc.strerror or exc})"
        raise InputFileError(msg) from None


def _is_terminal(fh: BinaryIO) -> bool:
    try:
        return os.isatty(fh.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's in-memory stdin)
        return False


def _suffix(name: Path, first: bytes) -> str:
    """
    The spool's suffix: the stream's format suffix, and ``.gz`` when it is gzip.

    DuckDB's readers tell gzip by the name alone.
    """
    suffixes = [s for s in name.suffixes if s.lower() != ".gz" and s.isascii()][-1:]
    gz = [".gz"] if first.startswith(b"\x1f\x8b") else []
    return "".join(suffixes + gz) if str(name) != STDIN else "".join(gz)


def _copy(  # noqa: PLR0917 - one spool's parts
    name: Path, source: BinaryIO, first: bytes, target: Path, limit: int, tell: Spooling | None
) -> int:
    """
    Write ``first`` and the rest of ``source`` to ``target``; return the bytes written.

    Raises:
        InputFileError: More than ``limit`` bytes, or a read or write failed.
    """
    copied, told = 0, 0
    try:
        with target.open("wb") as out:
            chunk = first
            while chunk:
                copied += len(chunk)
                if copied > limit:
                    msg = (
                        f"{name}: stream larger than {limit:,} bytes, half the free space in "
                        f"{target.parent.parent}; save it to a file and ingest that, or point "
                        "TMPDIR at a larger disk"
                    )
                    raise InputFileError(msg)
                out.write(chunk)
                if tell and copied - told >= _TELL_EVERY_BYTES:
                    tell(name, copied)
                    told = copied
                chunk = source.read(_CHUNK_BYTES)
    except OSError as exc:
        msg = f"{name}: cannot read the stream into {target.parent} ({exc.strerror or exc})"
        raise InputFileError(msg) from None
    return copied
