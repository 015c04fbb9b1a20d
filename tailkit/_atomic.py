"""
A new temporary file beside the file it will replace: the first half of every atomic write.

The plan file (`tailkit.config.write_plan`) and the report's pages and figures are written to a
temporary file in the same folder, then renamed into place (``os.replace`` is atomic within one
file system). Both need the same temporary file, made here. Standard library only: the config
package may use it.
"""

from __future__ import annotations

import errno
import os
import secrets

from pathlib import Path


TMP_SUFFIX = ".tmp"
"""How a temporary file's name ends (``.NAME.RANDOM.tmp``): a later run finds a killed one's."""


def temp_beside(path: Path) -> tuple[int, Path]:
    """
    A new, empty temporary file beside ``path``, opened for writing: its descriptor and path.

    Hidden (``.NAME.RANDOM.tmp``), so no glob of the folder's files matches it; created with
    ``O_EXCL`` and mode 0666, not ``mkstemp``'s 0600, so the umask applies as to any new file.

    Raises:
        OSError: The folder cannot be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))  # pragma: no cover
