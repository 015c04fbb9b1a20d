"""
Start-up of the short commands: ``tailkit --help``, ``tailkit docs``, ``tailkit check``.

Each command runs as a whole process in a fresh interpreter (``python -m tailkit ...``, this
checkout first on ``PYTHONPATH``), its wall time and its CPU time (user + system, from the
children's resource usage) taken from outside. Next to them, in the same rounds:

- ``python -c pass``: the interpreter's own start-up, the floor every figure is a ratio of;
- ``python -c "import typer"`` and a bare two-command typer app run with an option: the floor
  typer itself sets (typer checks every option value with pydantic, which it imports then);
- with ``--before PATH`` (a checkout of the old code, e.g. ``git worktree add /tmp/before
  HEAD~3``), the same tailkit commands from that checkout.

The rounds are interleaved (every command once per round, round after round) so that drift on
a busy machine hits all of them; each figure is the median over the rounds, and each ratio the
median of the per-round ratios. ``tailkit check`` reads a plan and a ledger of ``--runs`` runs
that this script writes first (seeded). The target of issue 31 is 0.15 s of wall time on a quiet
machine; on a shared one read the CPU column and the ratios. Exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.15

PLAN = """\
tailkit_plan: 1
workflow: brief
deadline_s: 40.0
hedge_budget: 0.1
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  extract:
    depends_on: []
    required: true
    route: a/m
    on_cutoff: hedge
    signal: ttft
    ttft_cutoff_s: 2.0
    hedge_route: b/m
    predicted: {p50_s: 3.0, p99_s: 9.6002, hedge_rate: 0.05}
    basis: {calls: 5000, bucket: 'in 0-1k / out 0-64', quantile: 0.9, censored: 0.0}
  draft:
    depends_on: [extract]
    required: true
    route: a/m
    on_cutoff: hedge
    signal: ttft
    ttft_cutoff_s: 2.0
    hedge_route: b/m
    predicted: {p50_s: 15.0, p99_s: 38.0381, hedge_rate: 0.1}
    basis: {calls: 5000, bucket: 'in 0-1k / out 0-64', quantile: 0.9, censored: 0.0}
predicted: {p50_s: 18.4626, p99_s: 41.8675, miss_rate: 0.01362, extra_attempts: 0.05000}
"""
"""A calibrated plan of two steps (the world of tests/test_check.py without its optional step)."""

STEPS = {"extract": (3.0, 0.5, 0.05), "draft": (15.0, 0.4, 0.10)}
"""Each step's median seconds, lognormal sigma and share of calls hedged."""

BARE_TYPER = """\
import typer

app = typer.Typer(add_completion=False)


@app.command()
def hello(name: str = "x", loud: bool = False) -> None:
    typer.echo(name.upper() if loud else name)


@app.command()
def other() -> None:
    pass


app()
"""


def write_ledger(path: Path, runs: int, seed: int) -> None:
    """
    ``runs`` runs of the plan's workflow as the executor's JSON lines (seeded).
    """
    rng = random.Random(seed)  # noqa: S311 - synthetic latencies, not secrets
    t0 = datetime(2026, 5, 4, 9, 0, 0, tzinfo=UTC)
    lines = []
    for i in range(runs):
        run, start = f"run-{i:05d}", t0 + timedelta(seconds=60.0 * i)
        for step, (median_s, sigma, hedge) in STEPS.items():
            took = median_s * math.exp(sigma * rng.gauss(0.0, 1.0))
            base = {"run_id": run, "step": step, "model": "m", "input_tokens": 500,
                    "status": "ok", "idempotency_key": f"{run}-{step}", "attrs": {}}  # fmt: skip
            at = start.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if rng.random() < hedge:
                lines.append({**base, "call_id": f"{run}-{step}-0", "attempt": 0,
                              "role": "primary", "provider": "a", "started_at": at,
                              "status": "cancelled", "censored_at_s": took,
                              "attrs": {"cutoff": "ttft"}})  # fmt: skip
                later = (start + timedelta(seconds=0.3 * took)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                lines.append({**base, "call_id": f"{run}-{step}-1", "attempt": 1,
                              "role": "hedge", "provider": "b", "started_at": later,
                              "total_s": 0.7 * took, "winner": True})  # fmt: skip
            else:
                lines.append({**base, "call_id": f"{run}-{step}-0", "attempt": 0,
                              "role": "primary", "provider": "a", "started_at": at,
                              "total_s": took, "winner": True})  # fmt: skip
            start += timedelta(seconds=took)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def commands(workdir: Path, before: Path | None) -> list[tuple[str, list[str], dict[str, str]]]:
    """
    Every command of a round: its label, its argv and its environment.
    """
    python = sys.executable
    plan, ledger = str(workdir / "plan.yaml"), str(workdir / "ledger.jsonl")
    tailkit_args = {
        "tailkit --help": ["--help"],
        "tailkit docs": ["docs"],
        "tailkit check": ["check", plan, ledger],
    }
    bare = os.environ.copy()
    bare.pop("PYTHONPATH", None)
    out: list[tuple[str, list[str], dict[str, str]]] = [
        ("python -c pass", [python, "-c", "pass"], bare),
        ("python -c 'import typer'", [python, "-c", "import typer"], bare),
        ("bare typer app", [python, str(workdir / "bare_typer.py"), "hello", "--name", "y"], bare),
    ]
    checkouts = [("", ROOT)] + ([("before: ", before)] if before else [])
    for prefix, checkout in checkouts:
        env = {**bare, "PYTHONPATH": str(checkout)}
        for label, args in tailkit_args.items():
            out.append((prefix + label, [python, "-m", "tailkit", *args], env))
    return out


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """
    One run of a command: its wall seconds and its CPU seconds (user + system).
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=tempfile.gettempdir(), capture_output=True,
                          check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # check exits 1 when a line drifted: a verdict, not a failure
        sys.exit(f"failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return wall, cpu


def measure(rounds: int, workdir: Path, before: Path | None) -> list[dict[str, Any]]:
    """
    Every command once per round, ``rounds`` times, plus one warm-up round not counted.
    """
    cmds = commands(workdir, before)
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in cmds}
    for i in range(rounds + 1):
        for label, argv, env in cmds:
            wall, cpu = timed(argv, env)
            if i:
                runs[label].append((wall, cpu))
    floor = runs["python -c pass"]
    rows = []
    for label, _, _ in cmds:
        walls, cpus = [w for w, _ in runs[label]], [c for _, c in runs[label]]
        row: dict[str, Any] = {
            "command": label,
            "wall_s": statistics.median(walls),
            "wall_min_s": min(walls),
            "wall_max_s": max(walls),
            "cpu_s": statistics.median(cpus),
            "wall_ratio": statistics.median(w / f[0] for w, f in zip(walls, floor, strict=True)),
            "cpu_ratio": statistics.median(c / f[1] for c, f in zip(cpus, floor, strict=True)),
        }
        old = runs.get("before: " + label)
        if old:
            row["wall_vs_before"] = statistics.median(
                w / o[0] for w, o in zip(walls, old, strict=True)
            )
            row["cpu_vs_before"] = statistics.median(
                c / o[1] for c, o in zip(cpus, old, strict=True)
            )
        rows.append(row)
    return rows


def machine() -> dict[str, Any]:
    """
    Where the figures were taken.
    """
    git = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True, check=False)

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit.stdout.strip(),
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
    }


def render(rows: list[dict[str, Any]], info: dict[str, Any], rounds: int) -> str:
    """
    The figures as a Markdown table.
    """
    vs = any("wall_vs_before" in r for r in rows)
    head = "| command | wall s (median, min–max) | CPU s | wall / `python -c pass` | CPU / pass |"
    out = [
        f"{info['date']}, commit {info['commit']}, Python {info['python']}, {info['cores']} "
        f"cores, load {info['load_1min']:.1f}; {rounds} interleaved rounds, medians; target "
        f"{TARGET_S} s",
        "",
        head + (" after / before (wall, CPU) |" if vs else ""),
        "|---|---|---|---|---|" + ("---|" if vs else ""),
    ]
    for r in rows:
        line = (f"| {r['command']} | {r['wall_s']:.3f} ({r['wall_min_s']:.3f}–"
                f"{r['wall_max_s']:.3f}) | {r['cpu_s']:.3f} | {r['wall_ratio']:.2f}× | "
                f"{r['cpu_ratio']:.2f}× |")  # fmt: skip
        if vs:
            before = (f" {r['wall_vs_before']:.2f}×, {r['cpu_vs_before']:.2f}× |"
                      if "wall_vs_before" in r else "  |")  # fmt: skip
            line += before
        out.append(line)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """
    Write the inputs, time the commands, print the table (or ``--json``).
    """
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0].strip())
    parser.add_argument("--rounds", type=int, default=10, help="rounds counted (default 10)")
    parser.add_argument("--runs", type=int, default=200, help="runs in the ledger (default 200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--before", type=Path, help="a checkout of the old code to time too")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.before and not (args.before / "tailkit" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: not a tailkit checkout (no tailkit/__init__.py)")
    with tempfile.TemporaryDirectory(prefix="tailkit-startup-") as tmp:
        workdir = Path(tmp)
        (workdir / "plan.yaml").write_text(PLAN, encoding="utf-8")
        (workdir / "bare_typer.py").write_text(BARE_TYPER, encoding="utf-8")
        write_ledger(workdir / "ledger.jsonl", args.runs, args.seed)
        rows = measure(args.rounds, workdir, args.before)
    info = {**machine(), "rounds": args.rounds, "ledger_runs": args.runs, "target_s": TARGET_S}
    if args.json:
        print(json.dumps({**info, "commands": rows}, indent=2))
    else:
        print(render(rows, info, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
