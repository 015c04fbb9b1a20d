"""
How many connections the open-file limit (``ulimit -n``) leaves room for.

Each connection holds a file descriptor. A server that accepts past the limit fails in
``accept()`` instead of answering, so its connection cap must stay below the limit, with
room for what else the process opens (its log, the event loop's own descriptors, the
connections over the cap that it accepts to answer 503, a file a user's callback opens).
"""

from __future__ import annotations

import os


__all__ = ["HEADROOM", "connection_cap", "open_file_limit"]

HEADROOM = 48
"""Descriptors kept free beyond those open at start, for what the process opens later."""


def open_file_limit() -> int | None:
    """
    The process's soft limit on open files, ``None`` when unlimited or unknown (Windows).
    """
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def _open_now() -> int:
    """
    Descriptors the process holds now (a guess of 16 where the system does not say).
    """
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 16


def connection_cap(wanted: int) -> int:
    """
    ``wanted``, or fewer connections if the open-file limit leaves room for fewer (at least 1).

    Room is the limit less the descriptors open now, less `HEADROOM` and a sixteenth of the
    limit (for the connections answered 503 over the cap, and files opened later).
    """
    limit = open_file_limit()
    if limit is None:
        return wanted
    room = limit - _open_now() - HEADROOM - limit // 16
    return max(1, min(wanted, room))
