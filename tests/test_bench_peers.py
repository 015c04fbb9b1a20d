"""
benchmarks/peers.py end to end on a tiny run, without LiteLLM (not in the test extra).

The run is time-scaled hard, so its numbers say nothing about tails: the checks are on what
must hold whatever the machine does -- the JSON's shape, counts that reconcile with serve's
access log, a plan calibrated from the before run, and the verdict logic.
"""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import math
import subprocess
import sys
import threading
import time

from pathlib import Path
from typing import Any

import pytest
import yaml


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "peers.py"
KEYS = {"name", "tool", "p50_s", "p97_s", "p99_s", "miss_rate", "extra_requests",
        "cpu_ms_per_call"}  # fmt: skip


def _module(name: str) -> Any:
    """
    A module of benchmarks/ by file name, leaving ``sys.path`` as it was.
    """
    saved = list(sys.path)
    try:
        sys.path.append(str(SCRIPT.parent))
        spec = importlib.util.spec_from_file_location(f"bench_{name[:-3]}", SCRIPT.parent / name)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while made
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def _peers() -> Any:
    """
    benchmarks/peers.py as a module, leaving ``sys.path`` as it was.

    benchmarks/ holds ``distributed.py``: left on the path, it would shadow the ``distributed``
    package in the processes Dask spawns for other tests.
    """
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("peers_under_test", SCRIPT)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


@pytest.mark.slow
def test_a_tiny_run_reconciles_with_the_access_log(tmp_path: Path) -> None:
    """Every case, the tailkit variants (SDK, live): every call counted, every request seen."""
    cases = ["one-step", "workflow", "429-storm", "outage", "drift"]
    variants = ["none", "tailkit", "tailkit-sdk", "tailkit-live", "tailkit-race"]
    cmd = [sys.executable, str(SCRIPT), "--variants", ",".join(variants),
           "--cases", ",".join(cases), "--calls", "60", "--runs", "8",
           "--probe-calls", "120", "--rate", "30", "--workflow-rate", "4",
           "--time-scale", "0.02", "--workdir", str(tmp_path), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [c["case"] for c in result["cases"]] == cases
    _check_rows(result, variants, tmp_path)
    # the ledger the access log is checked against: one line per request the executor made
    access = [json.loads(x) for x in (tmp_path / "one-step.access.jsonl").read_text().splitlines()]
    for variant in ("tailkit", "tailkit-sdk", "tailkit-live"):
        seen = sum(r["model"].startswith(f"{variant}.") for r in access)
        _reconciles(tmp_path / f"one-step.{variant}.ledger.jsonl", seen)
    _check_outage(result["cases"][3], tmp_path)
    plan = result["plans"]["one-step"]["steps"]["answer"]
    assert plan["peer_timeout_s"] > 0
    assert result["plans"]["one-step"]["hedge_budget"] > 0
    _check_drift(result["cases"][4], tmp_path)
    # the live variant's plan: candidates a and b, a live block from the before run
    live = result["plans"]["drift"]["live"]["steps"]["answer"]
    assert live["candidates"] == ["a/m", "b/m"]
    assert set(live["live"]["prior_s"]) == {"a/m", "b/m"}
    low, high = live["live"]["cutoff_bounds_s"]
    assert 0 < low <= high < 40.0
    # the workflow's: a step's candidates are its route and its fallback, when it has one
    flow = result["plans"]["workflow"]["live"]["steps"]
    assert flow["plan"]["candidates"] == ["anthropic/claude-sonnet-4", "bedrock/claude-sonnet-4"]
    assert flow["tag"]["candidates"] == []


def _reconciles(ledger: Path, requests: int) -> None:
    """
    The servers saw one request per ledger line, less those cancelled before they were sent.

    A hedge cancelled within a millisecond of its start (the first attempt answered at its
    cutoff) may never have reached the server: its ledger line says ``cancelled``.
    """
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    cancelled = sum(r["status"] == "cancelled" for r in lines)
    assert len(lines) - cancelled <= requests <= len(lines)


def _check_rows(result: dict[str, Any], variants: list[str], tmp_path: Path) -> None:
    """
    Every case's rows: their keys and counts, the bare variant's load, the live decisions.
    """
    raced = 0
    for case in result["cases"]:
        rows = {r["name"]: r for r in case["variants"]}
        assert set(rows) == set(variants)
        for row in rows.values():
            assert KEYS <= set(row)
            assert row["calls"] == (8 if case["case"] == "workflow" else 60)
            assert row["tool"] == ("none" if row["name"] == "none" else "tailkit")
            assert 0.0 <= row["miss_rate"] <= 1.0
            lo, hi = row["miss_interval"]
            assert lo <= row["miss_rate"] <= hi
            assert row["cpu_ms_per_call"] > 0
            assert row["requests"] >= 1
            for q in ("p50", "p97", "p99"):
                value = row[f"{q}_s"]
                low, high = row[f"{q}_interval_s"]
                if value is not None:
                    assert low <= value <= (math.inf if high is None else high)
        # the bare variant sends one request per call, whatever happens to it
        if case["case"] != "workflow":
            assert rows["none"]["requests"] == 60
            assert rows["none"]["extra_requests"] == 0.0
        raced += _raced(tmp_path / f"{case['case']}.tailkit-race.ledger.jsonl")
        assert case["verdicts"] == []  # no LiteLLM variant ran
        assert case["live_verdicts"] == []
        # the live variant routed live: its ledger's first attempts say what it decided
        decided = rows["tailkit-live"]["ledger"]
        assert sum(v for k, v in decided.items() if k.startswith("live:")) > 0
        assert not any(k.startswith("live:") for k in rows["tailkit"]["ledger"])
    # the race's plan hedges at once (a 1 ms cutoff, 20 us at this time scale). How many calls
    # it hedges is the benchmark's figure, not this test's: on a busy machine a first answer
    # can be read before the cutoff's turn of the loop, and a late call has no time left to
    # hedge (both said on its ledger line); but the race does race
    assert raced > 0


def _raced(ledger: Path) -> int:
    """
    The hedges on a ledger: attempts the race started at its cutoff.
    """
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    return sum(r["role"] == "hedge" for r in lines)


def _check_outage(outage: dict[str, Any], tmp_path: Path) -> None:
    """
    The outage: every provider-a request inside the window reached the down server.

    It served provider a only and answered every one 5xx; the bare variant met it.
    """
    assert 0 < outage["outage"]["calls"] < 60
    assert outage["outage"]["from_s"] < outage["outage"]["until_s"]
    down = [json.loads(x) for x in (tmp_path / "outage.down.access.jsonl").read_text().splitlines()]
    assert down
    assert {r["model"].split(".", 1)[1] for r in down} == {"a"}
    assert {r["http_status"] for r in down} <= {500, 502, 503}
    rows = {r["name"]: r for r in outage["variants"]}
    assert rows["none"]["failed_provider_requests"] > 0
    assert rows["none"]["outage_misses"] > 0
    assert sum(r["failed_provider_requests"] for r in rows.values()) == len(down)
    for variant in ("tailkit", "tailkit-sdk", "tailkit-live"):  # both servers' logs
        _reconciles(tmp_path / f"outage.{variant}.ledger.jsonl", rows[variant]["requests"])
    for variant in ("tailkit", "tailkit-sdk"):  # the ledger's account: a's 5xx failed over
        assert rows[variant]["ledger"].get("failover", 0) > 0
    assert [v["peer"] for v in outage["sdk_verdicts"]] == []  # no LiteLLM variant ran


def _check_drift(drift: dict[str, Any], tmp_path: Path) -> None:
    """
    The drift: from the schedule's middle on, provider a's requests reached the slow server.

    It serves provider a only, every latency doubled; the case's server served the rest.
    """
    assert drift["drift"]["factor"] == 2.0
    assert 0 < drift["drift"]["calls"] < 60
    slow = [json.loads(x) for x in (tmp_path / "drift.slow.access.jsonl").read_text().splitlines()]
    assert slow
    assert {r["model"].split(".", 1)[1] for r in slow} == {"a"}
    profile = yaml.safe_load((tmp_path / "drift.slow.profile.yaml").read_text())
    base = yaml.safe_load((tmp_path / "drift.profile.yaml").read_text())
    for model, served in profile["models"].items():
        assert served["ttft_median_s"] == 2 * base["models"][model]["ttft_median_s"]
        assert served["tokens_per_s"] == base["models"][model]["tokens_per_s"] / 2
    rows = {r["name"]: r for r in drift["variants"]}
    assert rows["none"]["slow_provider_requests"] > 0
    assert sum(r["slow_provider_requests"] for r in rows.values()) == len(slow)
    for variant in ("tailkit", "tailkit-live"):  # both servers' logs, one line per request
        _reconciles(tmp_path / f"drift.{variant}.ledger.jsonl", rows[variant]["requests"])
    for row in rows.values():
        assert 0 <= row["drift_misses"] <= drift["drift"]["calls"]


class _Named(http.server.BaseHTTPRequestHandler):
    """
    Answers every POST with the server's name, keeping the connection alive.
    """

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        name = self.server.name  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(name)))
        self.end_headers()
        self.wfile.write(name)

    def log_message(self, *args: Any) -> None:
        pass


def _named(name: bytes) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Named)
    server.name = name  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _port(url: str) -> int:
    return int(url.rsplit(":", maxsplit=1)[-1].split("/", maxsplit=1)[0])


def test_the_outage_switch_routes_each_request_by_when_it_arrives() -> None:
    """Before the window: the up server; inside: the down one, on the same kept-alive connection."""
    outage = _module("_peers_outage.py")
    up, down = _named(b"up"), _named(b"down")

    def ask(conn: http.client.HTTPConnection) -> bytes:
        conn.request("POST", "/v1/chat/completions", body=b'{"model": "x"}')
        return conn.getresponse().read()

    start = time.time() + 3.0
    window = (start, math.inf)  # the drift's: it never ends
    try:
        with outage.SwitchProcess(up.server_port, down.server_port, window) as switch:
            conn = http.client.HTTPConnection("127.0.0.1", _port(switch.url), timeout=60)
            try:
                first = ask(conn)
                if time.time() >= start:  # the machine too busy to ask before the edge
                    pytest.skip("the window began before the first answer")
                assert first == b"up"
                sock = conn.sock
                time.sleep(max(start - time.time(), 0.0) + 0.05)  # past the edge
                assert ask(conn) == b"down"
                assert conn.sock is sock  # the same connection: routed per request
            finally:
                conn.close()
    finally:
        for server in (up, down):
            server.shutdown()
            server.server_close()


def test_outage_window_and_per_provider_urls() -> None:
    """The window is a share of the schedule; LiteLLM's deployments take their own base URLs."""
    plans = _module("_peers_plans.py")
    litellm = _module("_peers_litellm.py")
    start, end = plans.outage_window([0.0, 50.0, 100.0])
    share = plans.OUTAGE_FROM + plans.OUTAGE_SHARE
    assert (start, end) == pytest.approx((100 * plans.OUTAGE_FROM, 100 * share))
    assert plans.DOWN["faults"]["error_5xx"] == 1.0
    assert "outage" in plans.CASES
    assert "tailkit-sdk" in plans.VARIANTS
    # the drift: provider a twice as slow from the middle of the schedule to its end
    drift = plans.switch_for("drift", [0.0, 50.0, 100.0])
    assert drift.window == (50.0, math.inf)
    assert drift.profile["ttft_median_s"] == 2 * plans.ONE_STEP["ttft_median_s"]
    assert drift.profile["tokens_per_s"] == plans.ONE_STEP["tokens_per_s"] / 2
    assert plans.switch_for("outage", [0.0, 100.0]).window == (start, end)
    assert plans.switch_for("one-step", [0.0, 100.0]) is None
    assert {"drift", "outage"} <= set(plans.CASES)
    assert "tailkit-live" in plans.VARIANTS
    group = litellm.Group("answer", "v.a", "v.b", 3.0, primary_url="http://s/v1",
                          fallback_url="http://b/v1")  # fmt: skip
    for variant in litellm.VARIANTS:
        settings = litellm.router_settings(variant, [group], base_url="http://x/v1", time_scale=1)
        urls = {d["litellm_params"]["model"]: d["litellm_params"]["api_base"]
                for d in settings["model_list"]}  # fmt: skip
        assert urls == {"openai/v.a": "http://s/v1", "openai/v.b": "http://b/v1"}


def test_the_verdict_takes_the_best_tailkit_variant_at_equal_or_lower_load() -> None:
    """A peer at 5 % extra is compared with the tailkit variant at or under 6 %."""
    peers = _peers()

    def row(name: str, tool: str, p99: float | None, miss: float, extra: float) -> dict[str, Any]:
        return {"name": name, "tool": tool, "p99_s": p99, "p99_interval_s": [p99, p99],
                "calls": 1000, "miss_rate": miss, "miss_interval": [miss, miss],
                "extra_requests": extra, "step_calls": 1000,
                "requests": round(1000 * (1 + extra))}  # fmt: skip

    rows = [
        row("tailkit", "tailkit", 20.0, 0.0, 0.055),
        row("tailkit-race", "tailkit", 12.0, 0.0, 1.0),
        row("litellm-retry", "litellm", 22.0, 0.001, 0.05),
        row("litellm-race", "litellm", 12.5, 0.0, 1.0),
        row("litellm-stream", "litellm", None, 0.04, 0.0),
    ]
    found = {v["peer"]: v for v in peers.verdicts(rows)}
    assert found["litellm-retry"]["tailkit"] == "tailkit"
    assert (found["litellm-retry"]["p99"], found["litellm-retry"]["misses"]) == ("ahead", "ahead")
    assert found["litellm-race"]["tailkit"] == "tailkit-race"
    assert found["litellm-race"]["pass"]
    assert found["litellm-stream"]["tailkit"] is None  # 55 extras against none: not chance
    assert not found["litellm-stream"]["pass"]
    # 6 extras in 100 calls against 3: more, but not more than chance makes it -- compared
    short = [
        dict(r, step_calls=100, requests=round(100 * (1 + r["extra_requests"])))
        for r in (row("tailkit", "tailkit", 20.0, 0.0, 0.06),
                  row("litellm-x", "litellm", 22.0, 0.0, 0.03))
    ]  # fmt: skip
    assert [v["tailkit"] for v in peers.verdicts(short)] == ["tailkit"]
    # one tailkit variant alone (the SDK's): compared only with itself
    alone = {v["peer"]: v["tailkit"] for v in peers.verdicts(rows, only="tailkit-race")}
    assert alone == {"litellm-retry": None, "litellm-race": "tailkit-race",
                     "litellm-stream": None}  # fmt: skip
    rows[0] = row("tailkit", "tailkit", 30.0, 0.01, 0.05)
    found = {v["peer"]: v for v in peers.verdicts(rows)}
    assert found["litellm-retry"]["p99"] == "behind"
    assert not found["litellm-retry"]["pass"]


def test_quantile_intervals_hold_the_estimate_and_a_failure_counts_as_never() -> None:
    """Order-statistic intervals; a failed call (inf) pushes p99 to 'failed'."""
    import numpy as np

    peers = _peers()
    x = np.arange(1, 1001, dtype=float)
    value, lo, hi = peers.quantile(x, 0.99)
    assert value == 990.0
    assert lo < value < hi
    x[-20:] = math.inf
    assert math.isinf(peers.quantile(x, 0.99)[0])
    lo, hi = peers.wilson(5, 1000)
    assert lo < 0.005 < hi
