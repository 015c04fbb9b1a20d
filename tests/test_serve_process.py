"""
`tailkit serve` as a process: the signals that stop it, and the open-file limit it lives under.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time

from pathlib import Path
from typing import IO

import pytest

from .conftest import ROOT


pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and rlimits")

PROFILE = """\
time_scale: 1.0
models:
  slow: {ttft_median_s: 1000, ttft_sigma: 0}
"""
BODY = json.dumps(
    {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": True}
).encode()
STREAM = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
# The child lowers its own open-file limit, then runs the command.
LIMITED = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
    from tailkit.cli import app
    sys.argv = ["tailkit", *sys.argv[2:]]
    app()
    """
)


def _get(port: int) -> bytes:
    """
    The status line's start of ``GET /v1/models`` on a new connection.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
        return sock.recv(12)


def _port(first_line: str) -> int:
    return int(first_line.split(" at http://127.0.0.1:", 1)[1].split("/", 1)[0])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_like_ctrl_c(tmp_path: Path, signum: signal.Signals) -> None:
    """
    A signal while a stream is answered: it is logged as cancelled, then the stop line, exit 0.
    """
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    log = tmp_path / "access.jsonl"
    command = [sys.executable, "-m", "tailkit", "serve", "--profile", str(profile), "--port", "0",
               "--log", str(log), "--allow-host", "tool.test"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as proc:
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            with socket.create_connection(("127.0.0.1", _port(first)), timeout=30) as sock:
                sock.sendall(STREAM % (b"tool.test", len(BODY), BODY))
                head = sock.recv(4096)  # a stream's head goes out at once: it is in flight
                proc.send_signal(signum)
                out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()

    assert head.startswith(b"HTTP/1.1 200 "), head
    assert 0 == proc.returncode, err
    assert out.endswith("stopped after 1 chat request(s)\n"), out
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert ("cancelled", "server_stopped", "slow") == (
        line["status"], line["error_type"], line["model"]
    )  # fmt: skip


def test_sigterm_with_json_prints_the_last_json_line(tmp_path: Path) -> None:
    """
    With --json, SIGTERM ends with the stopped line as Ctrl-C does.
    """
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    command = [sys.executable, "-m", "tailkit", "serve", "--profile", str(profile), "--port", "0",
               "--json"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as proc:
        try:
            first = json.loads(proc.stdout.readline() if proc.stdout else "")
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()

    assert 0 == proc.returncode, err
    assert first["port"] > 0
    assert [{"stopped": True, "chat_requests": 0,
             "closed_early": {"refused": 0, "idle": 0, "flooded": 0},
             "accept_errors": 0}] == [json.loads(text) for text in out.splitlines()]  # fmt: skip


def _line(stream: IO[str] | None, wait_s: float = 120.0) -> str:
    """
    The next line of a child's pipe; fails the test if none comes within ``wait_s``.

    A generous bound for a line that should come at start, so that a server that never says it
    fails the test instead of hanging the suite.
    """
    assert stream is not None
    ready, _, _ = select.select([stream], [], [], wait_s)
    if not ready:
        pytest.fail(f"no line from the server within {wait_s:.0f} s")
    return stream.readline()


def test_the_connection_cap_fits_the_open_file_limit(tmp_path: Path) -> None:
    """
    Open-file limit 128, --max-connections 2048: the cap is lowered (said at start), 503 past it.

    More connections than the limit allows are answered 503 at once, not left to time out, and
    nothing is logged per connection (no traceback).
    """
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    command = [sys.executable, "-c", LIMITED, "128", "serve", "--profile", str(profile),
               "--port", "0", "--idle-timeout", "120"]  # fmt: skip
    held: list[socket.socket] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as proc:
        try:
            first = _line(proc.stdout)
            said = _line(proc.stderr)  # the warning, or a failure (not a hang) where none comes
            cap = int(said.split("allows ", 1)[1].split(" ", 1)[0])
            port = _port(first)
            held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(cap)]
            statuses = []
            for _ in range(3 * 128):  # far past the limit: each is answered and closed
                statuses.append(_get(port))
            for sock in held:
                sock.close()
            deadline = time.monotonic() + 30  # until the server has seen them close
            while (served := _get(port)) == b"HTTP/1.1 503" and time.monotonic() < deadline:
                statuses.append(served)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            for sock in held:
                sock.close()
            proc.kill()

    assert 0 < cap < 128
    assert "the open-file limit allows" in said
    assert "not 2048" in said
    assert {b"HTTP/1.1 503"} == set(statuses)
    assert b"HTTP/1.1 200" == served
    assert "Traceback" not in err
    assert out.endswith(f"{len(statuses)} over --max-connections {cap}\n"), out


SERVER = textwrap.dedent(
    """
    import asyncio, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from tailkit.serve import ModelProfile, ServeConfig, Server

    async def main():
        server = Server(ServeConfig(models={"m": ModelProfile()}))
        async with server:
            junk = []  # files opened by something else: no descriptor left to accept with
            try:
                while True:
                    junk.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            print(server.port, flush=True)
            while server.accept_errors == 0:
                await asyncio.sleep(0.01)
            for fd in junk:
                os.close(fd)
            print(server.accept_errors, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            print(server.accept_errors, server.open_connections, flush=True)

    asyncio.run(main())
    """
)


def test_running_out_of_descriptors_to_accept_is_counted_not_traced() -> None:
    """
    accept() failing with EMFILE: one warning, a count, no traceback; accepting resumes.
    """
    with subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as proc:
        clients: list[socket.socket] = []
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            port = int(proc.stdout.readline())
            clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
            errors = int(proc.stdout.readline())  # printed once accept() has failed
            clients[0].sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
            served = clients[0].recv(12)  # accepted once the descriptors are back
            proc.stdin.write("\n")
            proc.stdin.flush()
            _, err = proc.communicate(timeout=30)
        finally:
            for sock in clients:
                sock.close()
            proc.kill()

    assert 0 == proc.returncode, err
    assert errors >= 1
    assert b"HTTP/1.1 200" == served
    assert "Traceback" not in err
    assert 1 == err.count("cannot accept a connection"), err
