"""
Ingest throughput: `tailkit ingest` against a bare DuckDB CREATE TABLE AS of the same file.

Generates a seeded N-row log once as JSON lines and as Parquet, then for each format and each
repeat runs, in fresh interpreters and interleaved so that drift hits both sides:

- baseline: ``connect`` + ``CREATE TABLE t AS SELECT * FROM read_json(...)`` (or
  ``read_parquet``) + ``close``, timed inside the child (imports excluded) and as wall time;
- tailkit library: ``Store.open`` + ``ingest_paths`` + ``close``, timed inside the child;
- tailkit CLI: the whole ``tailkit ingest FILE --db NEW --json`` command, as wall time;
  and (level ``cli-quiet``) the same with ``--quiet``, which leaves out the summary of the
  whole store (calls and p50/p99 per route) that ``--json`` and the default output print.

The ratio is baseline time / tailkit time (tailkit's share of the bare engine's throughput);
the target is at least 0.8. Exits 0 whatever the ratio, nonzero only on errors.

``--files N`` measures many small files instead (issue 31): the same rows split into N JSON-lines
files, one folder per model, against the same rows in one file, both through the CLI; the ratio
is the many files' time over the one file's (target at most 2). ``--before DIR`` also runs the
tailkit of another source tree (a ``git worktree`` of an earlier commit) on the same inputs,
interleaved, so that one run shows before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from pathlib import Path
from typing import Any

import duckdb


TARGET = 0.8
ROOT = Path(__file__).resolve().parents[1]
READERS = {"jsonl": ("calls.jsonl", "read_json"), "parquet": ("calls.parquet", "read_parquet")}

BASELINE = """
import sys, time
import duckdb
db, reader, path = sys.argv[1:4]  # path: an SQL string literal
t0 = time.perf_counter()
con = duckdb.connect(db)
con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}({path})")
con.close()
print("RESULT", time.perf_counter() - t0)
"""

LIBRARY = """
import sys, time
from tailkit.ingest import ingest_paths
from tailkit.store import Store
db, path = sys.argv[1:3]
t0 = time.perf_counter()
store = Store.open(db)
report = ingest_paths(store, [path])
store.close()
elapsed = time.perf_counter() - t0
if report.errors:
    sys.exit("; ".join(str(e) for e in report.errors))
print("RESULT", elapsed, report.totals()["stored"])
"""


def run(cmd: list[str]) -> tuple[float, str]:
    """
    Run a command; return its wall time in seconds and its stdout, or exit on failure.
    """
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def result(stdout: str) -> list[str]:
    """
    The fields a child printed after ``RESULT`` (DuckDB may draw a progress bar before it).
    """
    return stdout.rsplit("RESULT ", 1)[-1].split()


def count_rows(db: Path, table: str) -> int:
    """
    Rows in ``table`` of a closed DuckDB file.
    """
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else -1


def check(what: str, got: int, want: int) -> None:
    """
    Stop the benchmark when a run did not store every row.
    """
    if got != want:
        sys.exit(f"{what}: expected {want:,} rows, got {got:,}")


def drop(db: Path) -> Path:
    """
    Delete a DuckDB file and its WAL (before a run, so that it starts empty, and after it).
    """
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    return db


def one_repeat(  # noqa: PLR0917 - one repeat's inputs
    workdir: Path, fmt: str, rows: int, i: int, tailkit: str, before: Path | None = None
) -> dict[str, float]:
    """
    One baseline, one library and one CLI run of a format (and ``before``'s CLI); seconds.
    """
    name, reader = READERS[fmt]
    data = str(workdir / name)
    out: dict[str, float] = {}

    def baseline() -> None:
        db = drop(workdir / f"base-{fmt}-{i}.duckdb")
        quoted = "'" + data.replace("'", "''") + "'"
        wall, stdout = run([sys.executable, "-c", BASELINE, str(db), reader, quoted])
        check(f"baseline {fmt}", count_rows(db, "t"), rows)
        out["base_lib"], out["base_cli"] = float(result(stdout)[0]), wall
        drop(db)

    def library() -> None:
        db = drop(workdir / f"lib-{fmt}-{i}.duckdb")
        _, stdout = run([sys.executable, "-c", LIBRARY, str(db), data])
        seconds, stored = result(stdout)[:2]
        check(f"tailkit library {fmt} (report)", int(stored), rows)
        check(f"tailkit library {fmt} (calls)", count_rows(db, "calls"), rows)
        out["tk_lib"] = float(seconds)
        drop(db)

    def cli() -> None:
        db = drop(workdir / f"cli-{fmt}-{i}.duckdb")
        wall, stdout = run([tailkit, "ingest", data, "--db", str(db), "--json"])
        check(f"tailkit CLI {fmt} (report)", int(json.loads(stdout)["totals"]["stored"]), rows)
        check(f"tailkit CLI {fmt} (calls)", count_rows(db, "calls"), rows)
        out["tk_cli"] = wall
        drop(db)

    def cli_quiet() -> None:
        # The same ingest printing only its totals: without the store summary (per-route
        # quantiles over the whole store) that --json and the default output add after it.
        db = drop(workdir / f"quiet-{fmt}-{i}.duckdb")
        wall, _ = run([tailkit, "ingest", data, "--db", str(db), "--quiet"])
        check(f"tailkit CLI --quiet {fmt} (calls)", count_rows(db, "calls"), rows)
        out["tk_cli_quiet"] = wall
        drop(db)

    def cli_before() -> None:
        db = drop(workdir / f"before-{fmt}-{i}.duckdb")
        t0 = time.perf_counter()
        # `python -m` puts the working directory first on the path: run it in that tree.
        proc = subprocess.run(
            [sys.executable, "-m", "tailkit", "ingest", data, "--db", str(db), "--json"],
            capture_output=True, text=True, cwd=str(before), check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"before CLI {fmt} failed: {proc.stderr[-2000:]}")
        check(f"before CLI {fmt} (calls)", count_rows(db, "calls"), rows)
        out["tk_cli_before"] = wall
        drop(db)

    # Alternate who goes first so that a warm-up or drift does not always favour one side.
    steps = [baseline, library, cli, cli_quiet]
    if i % 2:
        steps.reverse()
    if before is not None:
        steps.insert(1 if i % 2 == 0 else 0, cli_before)
    for step in steps:
        step()
    return out


def split_files(workdir: Path, n_files: int) -> Path:
    """
    Split ``calls.jsonl`` into about ``n_files`` files, one folder per model, in row order.
    """
    tree = workdir / f"files-{n_files}"
    if tree.exists():
        return tree
    rows = (workdir / "calls.jsonl").read_text().splitlines()
    by_model: dict[str, list[str]] = {}
    for line in rows:
        by_model.setdefault(json.loads(line)["model"], []).append(line)
    per_file = max(1, round(len(rows) / n_files))
    for model, lines in sorted(by_model.items()):
        folder = tree / model
        folder.mkdir(parents=True)
        for i in range(0, len(lines), per_file):
            chunk = lines[i : i + per_file]
            (folder / f"part-{i // per_file:04d}.jsonl").write_text("\n".join(chunk) + "\n")
    return tree


def many_files(
    workdir: Path, n_files: int, *, rows: int, repeat: int, before: Path | None
) -> dict[str, Any]:
    """
    CLI wall times: the folder of many files against the one file (and ``before`` on both).
    """
    tree = split_files(workdir, n_files)
    one = workdir / "calls.jsonl"
    # `python -m` puts the working directory first on the path: each side runs in its tree.
    py = [sys.executable, "-m", "tailkit", "ingest"]
    here = str(ROOT)
    sides: dict[str, tuple[list[str], str]] = {
        "one_file": ([*py, str(one)], here),
        "many_files": ([*py, str(tree)], here),
    }
    if before is not None:
        sides["before_one_file"] = ([*py, str(one)], str(before))
        sides["before_many_files"] = ([*py, str(tree)], str(before))
    times: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(repeat):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            cmd, cwd = sides[name]
            db = drop(workdir / f"{name}.duckdb")
            t0 = time.perf_counter()
            proc = subprocess.run(
                [*cmd, "--db", str(db), "--quiet"], capture_output=True, text=True, cwd=cwd,
                check=False,
            )  # fmt: skip
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"{name} failed: {proc.stderr[-2000:]}")
            check(name, count_rows(db, "calls"), rows)
            drop(db)
            times[name].append(wall)
            print(f"files #{i + 1} {name}: {wall:.2f}s", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    n = sum(1 for _ in tree.rglob("*.jsonl"))
    out: dict[str, Any] = {"files": n, "rows": rows, "repeat": repeat, "median_s": med,
                           "runs": times, "ratio": med["many_files"] / med["one_file"]}  # fmt: skip
    if before is not None:
        out["ratio_before"] = med["before_many_files"] / med["before_one_file"]
        out["speedup_many_files"] = med["before_many_files"] / med["many_files"]
    return out


def machine() -> dict[str, Any]:
    """
    What the numbers were measured on.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"nproc": cpus, "python": platform.python_version(), "duckdb": duckdb.__version__,
            "platform": platform.platform()}  # fmt: skip


def summarize(runs: dict[str, list[dict[str, float]]], rows: int) -> list[dict[str, Any]]:
    """
    Median times, rows/s and ratio per (level, format).
    """
    table = []
    levels = (
        ("library", "base_lib", "tk_lib"),
        ("cli", "base_cli", "tk_cli"),
        ("cli-quiet", "base_cli", "tk_cli_quiet"),
        ("cli-before", "base_cli", "tk_cli_before"),
    )
    for level, base_key, tk_key in levels:
        for fmt, reps in runs.items():
            if not all(tk_key in r for r in reps):
                continue
            base = statistics.median(r[base_key] for r in reps)
            tk = statistics.median(r[tk_key] for r in reps)
            ratio = base / tk
            table.append(
                {"level": level, "format": fmt, "baseline_s": base, "tailkit_s": tk,
                 "baseline_rows_s": rows / base, "tailkit_rows_s": rows / tk, "ratio": ratio,
                 "pass": ratio >= TARGET}
            )  # fmt: skip
    return table


def render(table: list[dict[str, Any]], info: dict[str, Any], rows: int, repeat: int) -> str:
    """
    The results as a Markdown table with the machine above it.
    """
    lines = [
        f"machine: nproc={info['nproc']} python={info['python']} duckdb={info['duckdb']} "
        f"({info['platform']})",
        f"rows={rows:,} repeat={repeat} (medians); ratio = baseline s / tailkit s, "
        f"target >= {TARGET}",
        "",
        "| level | format | baseline s | tailkit s | baseline rows/s | tailkit rows/s | ratio | |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['level']} | {r['format']} | {r['baseline_s']:.2f} | {r['tailkit_s']:.2f} | "
            f"{r['baseline_rows_s']:,.0f} | {r['tailkit_rows_s']:,.0f} | {r['ratio']:.2f} | "
            f"{'PASS' if r['pass'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """
    Parse arguments, generate the data, run the repeats and print the table.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="report the median (default 3)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, help="default: a temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--format", default="jsonl,parquet", help="formats to measure (default jsonl,parquet)"
    )
    parser.add_argument(
        "--files", type=int, help="measure this many small files against one file instead"
    )
    parser.add_argument(
        "--before", type=Path, help="a source tree whose tailkit also runs (PYTHONPATH)"
    )
    args = parser.parse_args(argv)
    here = str(Path(sys.executable).parent)
    tailkit = shutil.which("tailkit", path=here) or shutil.which("tailkit")
    if tailkit is None:
        sys.exit("no `tailkit` executable next to this Python or on PATH")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tailkit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        log = sys.stderr
        print(f"generating {args.rows:,} rows in {workdir}", file=log, flush=True)
        gen = str(ROOT / "data_samples" / "generate.py")
        formats = [f for f in args.format.split(",") if f in READERS]
        wanted = ["jsonl"] if args.files else formats
        if not all((workdir / READERS[f][0]).exists() for f in wanted):
            run([sys.executable, gen, "--rows", str(args.rows), "--seed", str(args.seed),
                 "--out", str(workdir), "--no-gzip", "--formats", ",".join(wanted)])  # fmt: skip
        if args.files:
            doc = many_files(
                workdir, args.files, rows=args.rows, repeat=args.repeat,
                before=args.before,
            )  # fmt: skip
            doc["machine"] = machine()
            print(json.dumps(doc, indent=2))
            return 0
        runs: dict[str, list[dict[str, float]]] = {fmt: [] for fmt in formats}
        for fmt, reps in runs.items():
            for i in range(args.repeat):
                reps.append(one_repeat(workdir, fmt, args.rows, i, tailkit, args.before))
                times = " ".join(f"{k}={v:.2f}" for k, v in reps[-1].items())
                print(f"{fmt} #{i + 1}: {times}", file=log, flush=True)
        info = machine()
        table = summarize(runs, args.rows)
        if args.json:
            doc = {"machine": info, "rows": args.rows, "repeat": args.repeat, "target": TARGET,
                   "results": table, "runs": runs}  # fmt: skip
            print(json.dumps(doc, indent=2))
        else:
            print(render(table, info, args.rows, args.repeat))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not args.keep:  # a directory the user chose: remove only what this script wrote
            for name, _ in READERS.values():
                (workdir / name).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
