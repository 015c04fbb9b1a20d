"""
``tailkit serve --json``: one JSON line once listening, one when stopped, for scripts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

from pathlib import Path

import pytest


STATS = {
    "table": [
        {"provider": "openai", "model": "gpt-4.1-mini", "n": 100, "n_ok": 100, "p50_s": 2.0,
         "p90_s": 3.0, "p99_s": 5.0, "sigma": 0.3, "ttft_p50_s": 0.4, "ttft_p99_s": 1.0},
        {"provider": "azure", "model": "gpt-4.1", "n": 50, "n_ok": 50, "p50_s": 6.0,
         "sigma": 0.4},
    ],
    "verdicts": [],
}  # fmt: skip


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl-C is SIGINT on POSIX only")
def test_serve_json_says_where_it_listens_on_an_os_chosen_port(tmp_path: Path) -> None:
    """
    With --port 0 --json the first line is JSON naming the port the OS chose; Ctrl-C ends it.
    """
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps(STATS))
    command = [sys.executable, "-m", "tailkit", "serve", "--from-stats", str(stats),
               "--port", "0", "--time-scale", "0.001", "--seed", "3", "--json"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            started = json.loads(first)
            models_url = f"{started['url']}/models"
            with urllib.request.urlopen(models_url, timeout=10) as reply:  # noqa: S310 - loopback
                models = [m["id"] for m in json.load(reply)["data"]]
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=10)

    assert 0 == proc.returncode, err
    port = started.pop("port")
    assert isinstance(port, int)
    assert 0 < port < 65536
    assert {
        "url": f"http://127.0.0.1:{port}/v1",
        "host": "127.0.0.1",
        "routes": ["openai/gpt-4.1-mini", "azure/gpt-4.1"],
        "time_scale": 0.001,
        "seed": 3,
    } == started
    assert started["routes"] == models
    assert [
        {
            "stopped": True,
            "chat_requests": 0,
            "closed_early": {"refused": 0, "idle": 0, "flooded": 0},
            "accept_errors": 0,
        }
    ] == [json.loads(line) for line in out.splitlines()]
