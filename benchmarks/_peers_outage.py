"""
The outage and the drift of `benchmarks/peers.py`: provider a changes for a window of the schedule.

`tailkit serve` draws a fault per request with a fixed share and a latency from a fixed profile;
it has no clock on which faults come and go or on which a provider slows down. So the window is
built from two servers and a switch in front of them: the case's server (every model as the
case's profile says), a second server whose provider-a models are changed (the outage's *down*
server answers 5xx to every request, after a short lognormal wait, as a provider whose backends
are failing does; the drift's *slow* server serves provider a's models 2x slower), and this
switch, an HTTP/1.1 relay that provider a's base URL points at. It routes each *request* (not
each connection: clients keep connections alive across the window's edges) by when it arrives:
to the second server inside the window, else to the case's server. A request already in flight
at an edge finishes where it started, so the change is exactly "every request received inside
the window is answered by the changed provider", and no request is lost between the servers:
each is in the access log of the server that answered it. Provider b is not behind the switch.
The window may have no end (``until`` infinite: the drift stays).

How: a client connection's requests are read one at a time (the head to its blank line, then
``Content-Length`` bytes of body; a chunked request body is refused, which no client here
sends), each written to that connection's own upstream connection to the server it goes to
(opened on first use), and everything the servers send is relayed back as it comes. A client
sends its next request only once it has read the whole answer, so answers never interleave.
When the client closes, its upstream connections close (the server sees the client go, as a
cancelled hedge's does); when the server that answered last closes, the client's connection
closes.

The switch is its own process (``python _peers_outage.py BASE_PORT OTHER_PORT FROM UNTIL``, the
window's edges as wall-clock instants, ``time.time()``; ``UNTIL`` may be ``inf``): it prints
``{"port": N}`` once it listens and relays until it is terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

from pathlib import Path


HOST = "127.0.0.1"
CHUNK = 65536


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """
    One whole HTTP/1.1 request from a client, or ``None`` when the client has closed.

    Raises:
        ValueError: The request's body is chunked.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            msg = "a chunked request body: the switch reads Content-Length only"
            raise ValueError(msg)
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        return None
    return head + body


class Switch:
    """
    Route each request to the base port, or to the other port inside the window.
    """

    def __init__(self, base: int, other: int, since: float, until: float) -> None:
        self.base, self.other = base, other
        self.since, self.until = since, until

    def target(self) -> int:
        """
        The port a request received now goes to.
        """
        return self.other if self.since <= time.time() < self.until else self.base

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """
        One client connection: each request to the server of its moment, answers back.
        """
        upstreams: dict[int, tuple[asyncio.StreamWriter, asyncio.Task[None]]] = {}
        last = {"port": 0}  # the server the last request went to

        async def answers(port: int, up: asyncio.StreamReader) -> None:
            with contextlib.suppress(OSError):
                while data := await up.read(CHUNK):
                    writer.write(data)
                    await writer.drain()
            upstreams.pop(port, None)
            if last["port"] == port:  # the server answering closed: so does the connection
                writer.close()

        try:
            while (request := await read_request(reader)) is not None:
                port = self.target()
                if port not in upstreams:
                    up_reader, up_writer = await asyncio.open_connection(HOST, port)
                    task = asyncio.create_task(answers(port, up_reader))
                    upstreams[port] = (up_writer, task)
                last["port"] = port
                up_writer = upstreams[port][0]
                up_writer.write(request)
                await up_writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            for up_writer, task in list(upstreams.values()):
                up_writer.close()
                task.cancel()
            writer.close()


class SwitchProcess:
    """
    The switch in a process of its own, as a context manager: ``url`` is provider a's base URL.

    Args:
        base: The case's server's port (every model as the case's profile says).
        other: The port of the server that answers inside the window (down, or slowed).
        window: The window's edges, wall-clock instants (``time.time()``; the end may be
            ``math.inf``).
    """

    def __init__(self, base: int, other: int, window: tuple[float, float]) -> None:
        self.args = [str(base), str(other), repr(window[0]), repr(window[1])]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> SwitchProcess:
        cmd = [sys.executable, str(Path(__file__).resolve()), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"the switch did not start (exit {self.proc.wait()})")
        self.url = f"http://{HOST}:{json.loads(line)['port']}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def main(base: int, other: int, since: float, until: float) -> None:
    """
    Listen, print the port, relay until killed.
    """
    switch = Switch(base, other, since, until)
    server = await asyncio.start_server(switch.relay, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    base_port, other_port = int(sys.argv[1]), int(sys.argv[2])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(base_port, other_port, float(sys.argv[3]), float(sys.argv[4])))
