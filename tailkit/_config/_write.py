"""
Write a plan file whole or not at all, keeping the mode of the file it replaces.
"""

from __future__ import annotations

import os
import stat

from pathlib import Path
from typing import TYPE_CHECKING

from tailkit._atomic import temp_beside
from tailkit._config._dump import dump_plan
from tailkit.errors import ConfigError


if TYPE_CHECKING:
    from tailkit._config._model import Plan


def write_plan(plan: Plan, path: str | Path) -> Path:
    """
    Write ``plan`` to ``path`` as `dump_plan` spells it, atomically.

    A reader (the executor reloading its plan) sees the old file or the new one, never half
    of one: the text goes to a temporary file beside ``path``, renamed into place. The file
    keeps the mode it had, or gets the mode any new file gets (0666 less the umask), so a
    plan that others read (the executor's service account, a CI job) stays readable.

    Returns:
        The path written.

    Raises:
        ConfigError: The file cannot be written (``field`` is ``path``).
    """
    path = Path(path)
    try:
        write_atomically(path, dump_plan(plan))
    except OSError as exc:
        msg = f"{path}: cannot write the plan: {exc.strerror or exc}: choose another {{field}}"
        raise ConfigError(msg, field="path", value=str(path)) from None
    return path


def write_atomically(path: Path, text: str) -> None:
    """
    Write ``text`` to ``path`` whole or not at all (a temporary file renamed into place).

    The temporary file is `tailkit._atomic.temp_beside`'s (the umask applies, as to any new
    file); a file being replaced lends it its mode first.

    Raises:
        OSError: The folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        keep: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        keep = None
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if keep is not None:
                os.fchmod(handle.fileno(), keep)
            handle.write(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
