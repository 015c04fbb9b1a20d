"""
Turn the PATH arguments of ``tailkit ingest`` (files, folders, globs) into a list of files.
"""

from __future__ import annotations

import glob

from collections.abc import Iterable
from pathlib import Path

from tailkit.errors import InputFileError
from tailkit.formats.lowlevel import SUFFIXES, suffix_of
from tailkit.ingest._streams import STDIN


def _wanted(path: Path) -> bool:
    if path.name.startswith("."):
        return False
    gz = path.name.lower().endswith(".gz")
    return suffix_of(path) in SUFFIXES and not (gz and SUFFIXES[suffix_of(path)] == "parquet")


def expand_paths(args: Iterable[str | Path]) -> tuple[list[Path], list[InputFileError]]:
    """
    Expand files, folders (recursively, known suffixes only) and glob patterns.

    A file named on its own is always taken, whatever its suffix, and so is a pipe or ``-``
    (standard input); inside folders and globs only regular files with a known suffix
    (``.jsonl``, ``.json``, ``.csv``, ``.parquet``, … and ``.gz``) are.

    Returns:
        The files in a stable order without repeats, and one error per argument that matched
        nothing.
    """
    files: list[Path] = []
    errors: list[InputFileError] = []
    for arg in args:
        text = str(arg)
        path = Path(text)
        if text == STDIN:
            files.append(path)  # standard input (`tailkit.ingest._streams`)
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and _wanted(p))
            if not found:
                errors.append(
                    InputFileError(f"{text}: folder has no .jsonl/.json/.csv/.parquet files")
                )
            files.extend(found)
        elif path.exists():
            files.append(path)
        elif glob.has_magic(text):
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                errors.append(InputFileError(f"{text}: pattern matches no files"))
            files.extend(p for p in found if _wanted(p))
        else:
            errors.append(InputFileError(f"{text}: no such file or folder"))
    seen: set[Path] = set()
    unique = []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors
