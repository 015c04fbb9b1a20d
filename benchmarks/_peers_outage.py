"""
The outage of `benchmarks/peers.py`: one provider answers 5xx to everything for a window.

`tailkit serve` draws a fault per request with a fixed share; it has no clock on which faults
come and go. So the window is built from two servers and a switch in front of them: the case's
server (every model healthy) and a *down* server (provider a's models answer 5xx to every
request, after a short, lognormal wait, as a provider whose backends are failing does), and
this switch, a TCP relay that provider a's base URL points at. Before and after the window it
relays each new connection to the case's server; inside the window, to the down server. At
each edge of the window every relayed connection is closed, as when a provider's front end
goes down and comes back: a request in flight at the start is cut (the client sees the
connection drop), and no client keeps talking to the down server through a pooled keep-alive
connection once the provider has recovered. Provider b is not behind the switch.

The switch is its own process (``python _peers_outage.py UP_PORT DOWN_PORT FROM UNTIL``, the
window's edges as wall-clock instants, ``time.time()``): it prints ``{"port": N}`` once it
listens and relays until it is terminated. It relays bytes, it reads none: what each server
answered is in that server's access log.
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


class Switch:
    """
    Relay connections to the up port, or to the down port inside the window.
    """

    def __init__(self, up: int, down: int, down_from: float, down_until: float) -> None:
        self.up, self.down = up, down
        self.down_from, self.down_until = down_from, down_until
        self.open: dict[asyncio.StreamWriter, int] = {}  # both ends of a relay -> its port

    def target(self) -> int:
        """
        The port a connection made now goes to.
        """
        return self.down if self.down_from <= time.time() < self.down_until else self.up

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(CHUNK):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """
        One client connection, relayed to the server it was opened for until either side closes.
        """
        port = self.target()
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, port)
        except OSError:
            writer.close()
            return
        if port != self.target():  # an edge passed while connecting
            writer.transport.abort()
            up_writer.transport.abort()
            return
        pair = (writer, up_writer)
        for w in pair:
            self.open[w] = port
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in pair:
                self.open.pop(w, None)
                w.close()

    def cut(self) -> None:
        """
        Reset every connection relayed to the other server (an edge of the window).
        """
        port = self.target()
        for w, to in list(self.open.items()):
            if to != port:
                w.transport.abort()  # a reset, as a front end going down or coming back
                self.open.pop(w, None)


class SwitchProcess:
    """
    The switch in a process of its own, as a context manager: ``url`` is provider a's base URL.

    Args:
        up: The case's server's port (every model healthy).
        down: The down server's port.
        window: The outage's edges, wall-clock instants (``time.time()``).
    """

    def __init__(self, up: int, down: int, window: tuple[float, float]) -> None:
        self.args = [str(up), str(down), repr(window[0]), repr(window[1])]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> SwitchProcess:
        cmd = [sys.executable, str(Path(__file__).resolve()), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"the outage switch did not start (exit {self.proc.wait()})")
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


async def main(up: int, down: int, down_from: float, down_until: float) -> None:
    """
    Listen, print the port, cut the connections at the window's edges, relay until killed.
    """
    switch = Switch(up, down, down_from, down_until)
    server = await asyncio.start_server(switch.relay, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    loop = asyncio.get_running_loop()
    for edge in (down_from, down_until):  # a moment after the edge: target() has flipped
        loop.call_later(max(edge - time.time(), 0.0) + 0.001, switch.cut)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    up_port, down_port = int(sys.argv[1]), int(sys.argv[2])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(up_port, down_port, float(sys.argv[3]), float(sys.argv[4])))
