"""
A scheduler address where something answers TCP but is not Dask: one clear error, no hang.

Dask's client bounds its TCP connect but not the handshake after it: a silent peer hung
``tailkit stats --engine dask`` for ever, and garbage gave a ``struct.error`` traceback. The
servers here run on 127.0.0.1 in a thread, for the test alone; the timeout is a parameter
set short, and nothing is timed.
"""

from __future__ import annotations

import socket
import struct
import threading

from collections.abc import Iterator
from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.engines import Reading
from tailkit.engines.lowlevel import summarize_dask
from tailkit.errors import ConfigError
from tailkit.tails import TableQuery


pytest.importorskip("distributed")

# what the peer sends on accept (None: nothing, ever)
SILENT = None
HTTP = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
SHORT_FRAMES = struct.pack("<Q", 1) + struct.pack("<Q", 3) + b"abc"  # Dask's framing, not msgpack
HUGE_FRAME = struct.pack("<Q", 1) + struct.pack("<Q", 2**61)  # a frame no one can allocate
TRUNCATED = b"\x07\x00"  # then closes: shorter than a frame count


class _Peer:
    """
    A TCP server on 127.0.0.1 that accepts, sends ``reply`` (if any) and never reads.
    """

    def __init__(self, reply: bytes | None, *, close: bool = False) -> None:
        self.reply, self.close = reply, close
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.server.settimeout(0.05)  # close() does not wake accept(): poll a flag instead
        self.accepted: list[socket.socket] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)
            try:
                if self.reply is not None:
                    conn.sendall(self.reply)
                if self.close:
                    conn.close()
            except OSError:
                pass

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.server.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[_Peer]:
    reply, close = request.param
    server = _Peer(reply, close=close)
    yield server
    server.stop()


@pytest.mark.parametrize(
    ("peer", "why"),
    [
        ((SILENT, False), "connected, but no answer within 1 s"),
        ((HTTP, False), "not in Dask's protocol"),
        ((SHORT_FRAMES, False), "not in Dask's protocol"),
        ((HUGE_FRAME, False), "not in Dask's protocol"),
        ((TRUNCATED, True), "closed the connection"),
    ],
    indirect=["peer"],
    ids=["silent", "http", "short-frames", "huge-frame", "truncated"],
)
def test_a_peer_that_is_not_dask_is_one_clear_error(peer: _Peer, why: str) -> None:
    """Silence or garbage at the address: a ConfigError naming it, after the timeout at most."""
    with pytest.raises(ConfigError) as caught:
        summarize_dask(
            ["calls.parquet"], TableQuery(), Reading(), scheduler=peer.address,
            connect_timeout_s=1.0,
        )  # fmt: skip
    message = str(caught.value)
    assert f"cannot reach the Dask scheduler at '{peer.address}'" in message
    assert why in message
    assert caught.value.field == "scheduler"
    assert peer.accepted  # it did get the connection


@pytest.mark.parametrize("peer", [(SILENT, False), (HUGE_FRAME, False)], indirect=True)
def test_stats_says_one_error_line(
    peer: _Peer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``tailkit stats --engine dask --scheduler ADDR``: one Error line, no traceback."""
    from tailkit.engines import _dask

    monkeypatch.setattr(_dask, "CONNECT_TIMEOUT_S", 1)
    source = tmp_path / "calls.parquet"
    source.write_bytes(b"")  # never read: the scheduler is refused first
    result = CliRunner().invoke(
        app, ["stats", "--source", str(source), "--engine", "dask", "--scheduler", peer.address]
    )
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith("Error:")
    assert "Traceback" not in result.output
    assert peer.address in " ".join(result.output.split())


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:notaport", "foo://127.0.0.1:1", "tcp://", "tcp://127.0.0.1"]
)
def test_an_address_dask_cannot_connect_to_says_so(address: str) -> None:
    """A malformed address is named as one, not taken for a peer that answered."""
    with pytest.raises(ConfigError) as caught:
        summarize_dask(["calls.parquet"], TableQuery(), Reading(), scheduler=address)
    assert "not an address Dask can connect to" in str(caught.value)
