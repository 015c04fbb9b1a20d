"""
Listening sockets and the loop that accepts on them, backing off when descriptors run out.

asyncio's own accept loop (3.11) meets ``EMFILE`` badly: for one readable event it tries
``accept()`` up to the backlog (4,096) times, reports each failure with a traceback, and
schedules as many retries, which fail again with tracebacks once the socket is closed. Under
an open-file limit that is megabytes of log a second while good requests wait. Here one task
per socket accepts one connection at a time; when descriptors run out it counts the failure,
warns once, and waits (50 ms, doubling to 1 s) before it tries again, so the connections
waiting in the backlog are accepted as soon as descriptors free up.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys

from collections.abc import Awaitable, Callable


__all__ = ["Acceptor", "bind"]

logger = logging.getLogger("tailkit.serve")

_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_FIRST_WAIT_S = 0.05
_LONGEST_WAIT_S = 1.0

Connected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def bind(host: str, port: int, *, backlog: int) -> list[socket.socket]:
    """
    Listening sockets for ``host`` and ``port``, one per address ``host`` resolves to.

    A name is resolved here, at start, blocking: once, and mostly from the hosts file.

    Args:
        host: A name or address; ``""``: every interface.
        port: The TCP port; 0 picks a free one.
        backlog: Connections the kernel queues before they are accepted.

    Raises:
        OSError: An address cannot be bound (every socket opened so far is closed).
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in dict.fromkeys(infos):  # once per address
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            if os.name == "posix" and sys.platform != "cygwin":  # as asyncio does
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Acceptor:
    """
    Accept connections on ``sockets`` and hand each to ``connected`` in a task of its own.

    The owner runs `accept` on each socket in a task and lists the tasks in ``tasks``, so
    that they are its own (a test that looks for tasks left behind knows them by their name).

    Args:
        sockets: Listening, non-blocking sockets (`bind`); `close` closes them.
        connected: Called with each connection's reader and writer, as by
            `asyncio.start_server`.

    Attributes:
        errors: Times ``accept()`` failed (for want of descriptors, mostly).
    """

    def __init__(self, sockets: list[socket.socket], connected: Connected) -> None:
        self.sockets = sockets
        self.errors = 0
        self._warned: set[int | None] = set()
        self._connected = connected
        self.tasks: list[asyncio.Task[None]] = []

    async def accept(self, sock: socket.socket) -> None:
        """
        Accept on ``sock`` until cancelled.
        """
        loop = asyncio.get_running_loop()
        wait_s = _FIRST_WAIT_S
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except ConnectionAbortedError:  # the client left while queued
                continue
            except OSError as exc:
                self._failed(exc)
                await asyncio.sleep(wait_s)
                wait_s = min(2 * wait_s, _LONGEST_WAIT_S)
                continue
            wait_s = _FIRST_WAIT_S
            try:
                await loop.connect_accepted_socket(self._protocol, conn)
            except OSError:  # gone before its transport was made
                conn.close()

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        """
        What `asyncio.start_server` makes of a connection: a reader, and ``connected`` called.
        """
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._connected)

    def _failed(self, exc: OSError) -> None:
        """
        Count a failed ``accept()``; warn of its cause the first time only.
        """
        self.errors += 1
        if exc.errno in self._warned:
            return
        self._warned.add(exc.errno)
        if exc.errno in _OUT_OF_DESCRIPTORS:
            logger.warning(
                "tailkit serve: cannot accept a connection: %s; waiting connections are "
                "accepted once descriptors free up (counted, not logged again)",
                exc.strerror or exc,
            )
        else:  # unexpected, but no reason to stop listening
            logger.warning("tailkit serve: accepting a connection failed: %s", exc)

    async def close(self) -> None:
        """
        Stop accepting and close the sockets.
        """
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
