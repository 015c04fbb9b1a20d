"""
Scale: ingest, stats and calibrate at 2 M, 20 M and 100 M calls, in time and peak memory.

For each ``--rows`` size, generates a seeded, production-like Parquet log in bounded memory
(8 providers x 6 models, chunk by chunk with pyarrow; JSON lines too up to ``--jsonl-max-rows``)
and then runs, each in a fresh child process whose peak RSS is measured (GNU time's ``%M``, else
``os.wait4``; see `measure`), and interleaved when ``--repeat`` > 1:

- ingest: a bare ``CREATE TABLE t AS SELECT * FROM read_parquet(...)`` (``read_json`` for
  JSONL) against ``tailkit ingest FILE --db NEW -q``; ratio bare s / tailkit s, target >= 0.8;
- stats: a bare ``SELECT provider, model, input bucket, output bucket, quantile_cont(total_s,
  [.5, .9, .95, .99]) ... GROUP BY ALL`` on the ingested store (the bucket SQL tailkit uses)
  against ``tailkit stats --by provider,model --json``; ratio tailkit s / bare s, target <= 3,
  and peak RSS <= 2 GB;
- ``tailkit stats --approx --json`` and ``tailkit stats --source FILE --json`` when the
  installed CLI has those options (skipped with a note otherwise);
- calibrate: ``tailkit calibrate WORKFLOW -o plan.yaml -q --runs 2000 --check-runs 20000
  --replicates 20`` on a workflow over the generated routes; peak RSS <= 2 GB.

Times are wall seconds of the whole child (start-up included, on both sides). Prints one table
per size and how time and memory grow from size to size. Exits 0 whatever the figures,
nonzero only on errors.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


ROOT = Path(__file__).resolve().parents[1]
INGEST_TARGET, STATS_TARGET, RSS_TARGET_MB = 0.8, 3.0, 2048.0
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
CHUNK = 1_000_000  # rows generated and written at a time: bounds the generator's memory
EPOCH_US = 1_790_812_800_000_000  # 2026-10-01T00:00:00Z
DAYS, CAP_S = 30, 90.0

PROVIDERS = ("openai", "azure", "anthropic", "bedrock", "google", "vertex", "together", "groq")
# provider: share of traffic, TTFT factor, decode-speed factor, stall p, 5xx p
PROVIDER_PARAMS = np.array([
    [0.26, 1.00, 1.00, 0.035, 0.008],
    [0.18, 1.15, 0.90, 0.045, 0.012],
    [0.16, 1.05, 0.95, 0.040, 0.009],
    [0.12, 1.25, 0.85, 0.050, 0.010],
    [0.10, 0.95, 1.10, 0.030, 0.011],
    [0.08, 1.10, 1.00, 0.040, 0.010],
    [0.06, 0.80, 1.30, 0.060, 0.015],
    [0.04, 0.50, 2.50, 0.070, 0.020],
])  # fmt: skip
MODELS = ("gpt-4.1", "gpt-4.1-mini", "claude-sonnet-4", "gemini-2.5-flash", "llama-3.3-70b",
          "mistral-large")  # fmt: skip
# model: share of traffic, TTFT at no input (s), prefill (s per 1k input tokens), tokens/s
MODEL_PARAMS = np.array([
    [0.25, 0.45, 0.010, 90.0],
    [0.25, 0.30, 0.005, 120.0],
    [0.20, 0.70, 0.012, 65.0],
    [0.15, 0.35, 0.004, 160.0],
    [0.10, 0.40, 0.008, 110.0],
    [0.05, 0.50, 0.011, 75.0],
])  # fmt: skip
STEPS = ("extract", "plan", "draft", "review", "summarize")
# step: share of calls, input median, input sigma, output median, output sigma
STEP_PARAMS = np.array([
    [0.25, 8000, 0.9, 350, 0.6],
    [0.15, 2500, 0.6, 500, 0.5],
    [0.25, 6000, 0.7, 1300, 0.5],
    [0.15, 12000, 0.8, 180, 0.7],
    [0.20, 20000, 0.9, 120, 0.6],
])  # fmt: skip
STATUSES = ("ok", "error", "timeout", "rate_limited")
OK, ERROR, TIMEOUT, RATE_LIMITED = range(4)
ERROR_TYPES = ("InternalServerError", "RateLimitError", "Timeout")
RETRY_P, HEDGE_RUN_P, HEDGE_AFTER_S, RATE_LIMIT_P = 0.85, 0.3, 30.0, 0.004
SCHEMA = pa.schema([
    ("call_id", pa.string()), ("run_id", pa.string()), ("step", pa.string()),
    ("attempt", pa.int64()), ("role", pa.string()), ("provider", pa.string()),
    ("model", pa.string()), ("started_at", pa.timestamp("us", tz="UTC")),
    ("ttft_s", pa.float64()), ("total_s", pa.float64()), ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("status", pa.string()), ("error_type", pa.string()),
    ("http_status", pa.int64()), ("censored_at_s", pa.float64()), ("abandoned", pa.bool_()),
])  # fmt: skip


def _attempts(
    rng: np.random.Generator, model: np.ndarray, provider: np.ndarray, tin: np.ndarray,
    tout: np.ndarray,
) -> dict[str, np.ndarray]:  # fmt: skip
    """
    One attempt per element: latency (lognormal with a transient stall tail), status, timing.
    """
    n = model.size
    _, ttft0, prefill, rate = MODEL_PARAMS[model].T
    _, ttft_f, rate_f, stall_p, error_p = PROVIDER_PARAMS[provider].T
    ttft = (ttft0 + prefill * tin / 1000.0) * ttft_f * rng.lognormal(0.0, 0.30, n)
    gen = tout / (rate * rate_f) * rng.lognormal(0.0, 0.25, n)
    stall = rng.random(n) < stall_p
    factor = np.clip(rng.lognormal(np.log(4.0), 0.5, n), 2.5, 15.0)
    extra = np.where(stall, (factor - 1.0) * (ttft + gen), 0.0)
    in_gen = (tout >= 600) & (rng.random(n) < 0.85)  # long outputs stall in decoding
    ttft = np.round(np.where(in_gen, ttft, ttft + extra), 3) + 0.001
    total = np.round(ttft + np.where(in_gen, gen + extra, gen), 3) + 0.001
    status = np.where(total > CAP_S, TIMEOUT, OK)
    status[rng.random(n) < error_p] = ERROR
    status[rng.random(n) < RATE_LIMIT_P] = RATE_LIMITED
    fail_s = np.round(np.clip(rng.lognormal(np.log(1.2), 0.9, n), 0.05, 30.0), 3)
    elapsed = np.choose(status, [total, fail_s, np.full(n, CAP_S), np.round(fail_s / 10, 3)])
    return {"ttft": ttft, "total": total, "elapsed": elapsed, "status": status}


def _ids(prefix: str, num: np.ndarray) -> pa.Array:
    """
    Ids such as ``c-0000000042``: the prefix and the number padded to 10 digits.
    """
    digits = pc.utf8_lpad(pc.cast(pa.array(num), pa.string()), 10, "0")
    return pc.binary_join_element_wise(prefix, digits, "")


def chunk_table(rows: int, seed: int, index: int, first_row: int, span_us: int) -> pa.Table:
    """
    The ``index``-th chunk of the log: ``rows`` calls starting in its slice of the time span.

    Primary calls start uniformly in the chunk's time slice; a failed primary is retried
    (same run, step and route) after a backoff with probability 0.85, and a slow primary of a
    hedging run gets a hedge on another provider of the same model after 30 s. The chunk keeps
    its ``rows`` earliest attempts, in start order, so the whole file is in time order.

    Args:
        rows: Rows of this chunk.
        seed: The log's seed; each chunk draws from ``default_rng([seed, index])``.
        index: The chunk's number, from 0.
        first_row: Rows before this chunk (call and run ids continue from it).
        span_us: The chunk's time slice in microseconds.

    Returns:
        The chunk as an Arrow table with `SCHEMA`.
    """
    rng = np.random.default_rng([seed, index])
    n = rows
    start = np.sort(rng.integers(0, span_us, n)) + EPOCH_US + index * span_us
    step = rng.choice(len(STEPS), n, p=STEP_PARAMS[:, 0])
    model = rng.choice(len(MODELS), n, p=MODEL_PARAMS[:, 0])
    provider = rng.choice(len(PROVIDERS), n, p=PROVIDER_PARAMS[:, 0])
    _, in_med, in_sig, out_med, out_sig = STEP_PARAMS[step].T
    tin = np.clip(np.rint(in_med * rng.lognormal(0.0, in_sig)), 20, 190_000).astype(np.int64)
    tout = np.clip(np.rint(out_med * rng.lognormal(0.0, out_sig)), 1, 8192).astype(np.int64)
    first = _attempts(rng, model, provider, tin, tout)
    run = np.arange(n, dtype=np.int64) + first_row
    retry = np.flatnonzero((first["status"] != OK) & (rng.random(n) < RETRY_P))
    hedge = np.flatnonzero((first["elapsed"] > HEDGE_AFTER_S) & (rng.random(n) < HEDGE_RUN_P))
    hedge_provider = (provider[hedge] + rng.integers(1, len(PROVIDERS), hedge.size)) % len(
        PROVIDERS
    )
    backoff_us = np.rint(rng.lognormal(np.log(1.0), 0.5, retry.size) * 1e6).astype(np.int64)
    idx = np.concatenate([np.arange(n), retry, hedge])
    role = np.repeat([0, 1, 2], [n, retry.size, hedge.size])
    prov = np.concatenate([provider, provider[retry], hedge_provider])
    again = _attempts(rng, model[idx[n:]], prov[n:], tin[idx[n:]], tout[idx[n:]])
    at = np.concatenate([
        start,
        start[retry] + np.rint(first["elapsed"][retry] * 1e6).astype(np.int64) + backoff_us,
        start[hedge] + int(HEDGE_AFTER_S * 1e6),
    ])  # fmt: skip
    cols = {k: np.concatenate([first[k], again[k]]) for k in first}
    keep = np.lexsort((role, at))[:n]
    status, role, idx = cols["status"][keep], role[keep], idx[keep]
    ok, streamed = status == OK, rng.random(n) >= 0.1  # 10 % of calls do not stream
    ttft = cols["ttft"][keep]
    seen = ok | ((status == TIMEOUT) & (ttft < CAP_S))  # a cut call may have its first token
    http = np.where(status == ERROR, rng.choice([500, 502, 503], n), 429)
    call = np.arange(n, dtype=np.int64) + first_row
    return pa.table(
        {
            "call_id": _ids("c-", call),
            "run_id": _ids("r-", run[idx]),
            "step": pa.array(STEPS).take(pa.array(step[idx])),
            "attempt": pa.array(np.minimum(role, 1), pa.int64()),
            "role": pa.array(("primary", "retry", "hedge")).take(pa.array(role)),
            "provider": pa.array(PROVIDERS).take(pa.array(prov[keep])),
            "model": pa.array(MODELS).take(pa.array(model[idx])),
            "started_at": pa.array(at[keep], pa.timestamp("us", tz="UTC")),
            "ttft_s": pa.array(ttft, mask=~(seen & streamed)),
            "total_s": pa.array(
                np.where(ok, cols["total"][keep], cols["elapsed"][keep]), mask=status == TIMEOUT
            ),
            "input_tokens": pa.array(tin[idx], pa.int64()),
            "output_tokens": pa.array(tout[idx], pa.int64(), mask=~ok),
            "status": pa.array(STATUSES).take(pa.array(status)),
            "error_type": pa.array(ERROR_TYPES).take(
                pa.array(np.choose(status, [0, 0, 2, 1]), mask=ok)
            ),
            "http_status": pa.array(http, pa.int64(), mask=(status == OK) | (status == TIMEOUT)),
            "censored_at_s": pa.array(np.full(n, CAP_S), mask=status != TIMEOUT),
            "abandoned": pa.array(np.zeros(n, dtype=bool)),
        },
        schema=SCHEMA,
    )


def chunks(rows: int, seed: int, chunk: int = CHUNK) -> Iterator[pa.Table]:
    """
    Yield the log's chunks in order; together they hold ``rows`` calls over `DAYS` days.

    Args:
        rows: Rows of the whole log.
        seed: Seed; the same seed, rows and chunk size give the same rows.
        chunk: Rows per chunk (the last may be shorter).
    """
    count = math.ceil(rows / chunk)
    span_us = DAYS * 86_400_000_000 // count
    for i in range(count):
        yield chunk_table(min(chunk, rows - i * chunk), seed, i, i * chunk, span_us)


def json_lines(table: pa.Table) -> bytes:
    """
    The table as JSON lines (null for missing values, floats with 3 decimals).
    """
    from tailkit.demo._generate import json_values  # the sample log's JSON rendering

    parts: list[Any] = []
    for i, name in enumerate(table.column_names):
        parts += [("{" if i == 0 else ",") + f'"{name}":', json_values(table, name)]
    lines = pc.binary_join_element_wise(*parts, "}\n", "")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    return bytes(lines.buffers()[2].to_pybytes()[offsets[0] : offsets[len(lines)]])


def write_log(
    out: Path, rows: int, seed: int, *, jsonl: bool, chunk: int = CHUNK
) -> dict[str, Path]:
    """
    Write ``calls.parquet`` (zstd, one row group per chunk) and, with ``jsonl``, ``calls.jsonl``.

    Args:
        out: Folder for the files (created if missing).
        rows: Rows of the log.
        seed: Seed of the generator.
        jsonl: Also write the JSON-lines copy.
        chunk: Rows generated and written at a time.

    Returns:
        The paths written, keyed by format (``parquet``, ``jsonl``).
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = {"parquet": out / "calls.parquet"}
    if jsonl:
        paths["jsonl"] = out / "calls.jsonl"
    with pq.ParquetWriter(paths["parquet"], SCHEMA, compression="zstd") as writer:
        text = paths["jsonl"].open("wb") if jsonl else None
        try:
            for table in chunks(rows, seed, chunk):
                writer.write_table(table, row_group_size=chunk)
                if text is not None:
                    for lo in range(0, table.num_rows, 250_000):
                        text.write(json_lines(table.slice(lo, 250_000)))
        finally:
            if text is not None:
                text.close()
    return paths


# ---------------------------------------------------------------------------------------------
# Measuring: every command runs in a fresh child; its peak RSS comes from os.wait4.

BARE_INGEST = """
import sys, duckdb
db, reader, path = sys.argv[1:4]  # path: an SQL string literal
con = duckdb.connect(db)
con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}({path})")
print(con.execute("SELECT count(*) FROM t").fetchone()[0])
con.close()
"""

BARE_STATS = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(len(con.execute(sys.argv[2]).fetchall()))
"""

WORKFLOW = """\
# Over the routes of benchmarks/scale.py's generated log.
tailkit_plan: 1
workflow: scale-bench
deadline_s: 120
hedge_budget: 0.05
routes:
  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}
  azure/gpt-4.1-mini: {provider: azure, model: gpt-4.1-mini}
  anthropic/claude-sonnet-4: {provider: anthropic, model: claude-sonnet-4}
  bedrock/claude-sonnet-4: {provider: bedrock, model: claude-sonnet-4}
  openai/gpt-4.1: {provider: openai, model: gpt-4.1}
  azure/gpt-4.1: {provider: azure, model: gpt-4.1}
  google/gemini-2.5-flash: {provider: google, model: gemini-2.5-flash}
steps:
  extract:
    route: openai/gpt-4.1-mini
    expected_tokens: {input: 8000, output: 350}
  plan:
    depends_on: [extract]
    route: anthropic/claude-sonnet-4
    expected_tokens: {input: 2500, output: 500}
  review:
    depends_on: [extract]
    route: bedrock/claude-sonnet-4
    expected_tokens: {input: 12000, output: 180}
  draft:
    depends_on: [plan]
    route: openai/gpt-4.1
    expected_tokens: {input: 6000, output: 1300}
  summarize:
    depends_on: [draft, review]
    route: google/gemini-2.5-flash
    expected_tokens: {input: 20000, output: 120}
"""


class BenchError(Exception):
    """
    A measured command failed; the message holds its command line and stderr's tail.
    """


def measure(
    cmd: list[str], workdir: Path, *, env: dict[str, str] | None = None
) -> tuple[float, float, str]:
    """
    Run ``cmd`` as a child (in ``env``, else this environment); its wall s, peak RSS MB, stdout.

    The child's CPU seconds (user + system, every thread) are kept in `LAST_CPU_S`: on a
    machine that other work shares, they vary far less than the wall time.

    The peak RSS comes from GNU time's ``%M`` when ``/usr/bin/time`` exists: a child that this
    (large) Python process forks inherits its high-water mark through ``exec`` on Linux, so
    ``os.wait4`` here would report at least this process's RSS (~90 MB with pyarrow loaded).
    Without GNU time, ``os.wait4``'s ``ru_maxrss`` is used, with that floor.

    Raises:
        BenchError: The command exited nonzero.
    """
    out, err, rss_file = workdir / "child.out", workdir / "child.err", workdir / "child.rss"
    wrapped = [GNU_TIME, "-f", "%M", "-o", str(rss_file), *cmd] if GNU_TIME else cmd
    with out.open("wb") as fo, err.open("wb") as fe:
        t0 = time.perf_counter()
        # in ``workdir``: ``python -m`` and ``-c`` put the working folder first on sys.path,
        # before PYTHONPATH, so a run from a checkout would import that checkout's tailkit
        proc = subprocess.Popen(wrapped, stdout=fo, stderr=fe, env=env, cwd=workdir)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    LAST_CPU_S[0] = usage.ru_utime + usage.ru_stime
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    rss_kb = float(usage.ru_maxrss)  # KiB on Linux
    if GNU_TIME and rss_file.exists():
        last = rss_file.read_text().split()
        rss_kb = float(last[-1]) if last and last[-1].isdigit() else rss_kb
    for p in (out, err, rss_file):
        p.unlink(missing_ok=True)
    if proc.returncode != 0:
        msg = f"exit {proc.returncode}: {' '.join(cmd)}\n{stderr[-2000:]}"
        raise BenchError(msg)
    return wall, rss_kb / 1024.0, stdout


LAST_CPU_S = [0.0]  # the CPU seconds of the last child `measure` ran


def drop(db: Path) -> Path:
    """
    Delete a DuckDB file and its WAL; return its path.
    """
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    return db


def sql_literal(path: Path) -> str:
    """
    A path as an SQL string literal.
    """
    return "'" + str(path).replace("'", "''") + "'"


def has_option(tailkit: str, command: str, option: str) -> bool:
    """
    Whether ``tailkit COMMAND --help`` lists ``option``.
    """
    proc = subprocess.run(
        [tailkit, command, "--help"], capture_output=True, text=True, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    return option in proc.stdout


Sample = dict[str, float]
Step = Callable[[], Sample]


def interleave(steps: dict[str, Step], repeat: int, log: Callable[[str], None]) -> dict[str, Any]:
    """
    Run each named step ``repeat`` times, alternating their order; medians and the peak RSS.

    A step that fails is not run again; its entry holds ``error`` (the command and its
    stderr's tail) instead of figures, so that one failure does not lose the other figures.
    """
    runs: dict[str, list[Sample]] = {name: [] for name in steps}
    failed: dict[str, str] = {}
    names = list(steps)
    for i in range(repeat):
        for name in names if i % 2 == 0 else names[::-1]:
            if name in failed:
                continue
            try:
                runs[name].append(steps[name]())
            except BenchError as exc:
                failed[name] = str(exc)
                log(f"  {name} #{i + 1}: FAILED {str(exc).splitlines()[-1]}")
                continue
            figures = " ".join(f"{k}={v:.2f}" for k, v in runs[name][-1].items())
            log(f"  {name} #{i + 1}: {figures}")
    return {
        name: {"error": failed[name]} if name in failed else
              {"s": statistics.median(r["s"] for r in rs), "rss_mb": max(r["rss_mb"] for r in rs),
               "runs": rs} | ({"cpu_s": statistics.median(r["cpu_s"] for r in rs)}
                              if rs and all("cpu_s" in r for r in rs) else {})
        for name, rs in runs.items()
    }  # fmt: skip


def ingest_steps(
    fmt: str, path: Path, *, rows: int, d: Path, tailkit: str, extra: list[str]
) -> dict[str, Step]:
    """
    The bare CTAS and the tailkit CLI ingest of one file, each checking the rows stored.

    tailkit's store stays at ``d/store-FMT.duckdb`` after the last run.
    """
    reader = "read_parquet" if fmt == "parquet" else "read_json"

    def bare() -> Sample:
        db = drop(d / f"bare-{fmt}.duckdb")
        wall, rss, out = measure(
            [sys.executable, "-c", BARE_INGEST, str(db), reader, sql_literal(path)], d
        )
        drop(db)
        if int(out.split()[-1]) != rows:
            msg = f"bare {fmt} CTAS stored {out.split()[-1]} rows, expected {rows:,}"
            raise BenchError(msg)
        return {"s": wall, "rss_mb": rss}

    def cli() -> Sample:
        db = drop(d / f"store-{fmt}.duckdb")
        wall, rss, _ = measure([tailkit, "ingest", str(path), "--db", str(db), "-q", *extra], d)
        import duckdb

        with duckdb.connect(str(db), read_only=True) as con:
            row = con.execute("SELECT count(*) FROM calls").fetchone()
        if row is None or row[0] != rows:
            msg = f"tailkit ingest {fmt} stored {row} rows, expected {rows:,}"
            raise BenchError(msg)
        return {"s": wall, "rss_mb": rss}

    return {f"bare CTAS {fmt}": bare, f"tailkit ingest {fmt}": cli}


def timed(
    cmd: list[str],
    d: Path,
    check: Callable[[str], None] | None = None,
    *,
    env: dict[str, str] | None = None,
) -> Step:
    """
    A step that runs ``cmd`` (in ``env``, else this environment) and checks its stdout.
    """

    def step() -> Sample:
        wall, rss, out = measure(cmd, d, env=env)
        if check is not None:
            check(out)
        return {"s": wall, "rss_mb": rss, "cpu_s": LAST_CPU_S[0]}

    return step


def table_rows(out: str) -> None:
    """
    Check that ``stats --json`` printed a table with rows.
    """
    doc = json.loads(out)
    rows = doc.get("table", doc.get("rows")) if isinstance(doc, dict) else doc
    if not rows:
        msg = f"stats --json printed no table rows: {out[:300]}"
        raise BenchError(msg)


def bare_stats_sql() -> str:
    """
    The bare grouped quantile query, with the token-bucket SQL tailkit itself uses.
    """
    from tailkit.record import Buckets
    from tailkit.store.lowlevel import bucket_columns_sql

    return (
        "SELECT provider, model, input_bucket, output_bucket, "
        "quantile_cont(total_s, [0.5, 0.9, 0.95, 0.99]) "
        f"FROM (SELECT *, {bucket_columns_sql(Buckets())} FROM calls) GROUP BY ALL"
    )


def count_groups(store: Path) -> int:
    """
    Groups of the stats table (provider x model x both buckets) in a store; 0 without one.
    """
    import duckdb

    if not store.exists():
        return 0
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute(f"SELECT count(*) FROM ({bare_stats_sql()})").fetchone()
    return int(row[0]) if row else 0


def file_mb(path: Path) -> float:
    """
    Size of a file (and its WAL) in MB, 0 when missing.
    """
    wal = path.with_name(path.name + ".wal")
    return sum(p.stat().st_size for p in (path, wal) if p.exists()) / 1e6


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ingest_all(
    files: dict[str, Path],
    store: Path,
    *,
    rows: int,
    d: Path,
    args: argparse.Namespace,
    tailkit: str,
    notes: list[str],
) -> dict[str, Any]:
    """
    The bare and the tailkit ingest of each format; the Parquet store stays at ``store``.

    With ``--skip ingest`` nothing is measured: the store an earlier ``--keep`` run left is.
    """
    if "ingest" in args.skip:
        if not store.exists():
            msg = f"--skip ingest needs the store an earlier run kept ({store}): run with --keep"
            raise BenchError(msg)
        notes.append(f"ingest: skipped (--skip); the store kept at {store} measured")
        return {}
    extra = ["--memory-limit", args.memory_limit] if args.memory_limit else []
    m: dict[str, Any] = {}
    for fmt in ("jsonl", "parquet"):  # parquet last: its store is the one queried below
        if fmt in files:
            steps = ingest_steps(fmt, files[fmt], rows=rows, d=d, tailkit=tailkit, extra=extra)
            m |= interleave(steps, args.repeat, _log)
    return m


def _checkout_env(checkout: Path) -> dict[str, str]:
    """
    This environment with ``checkout`` first on ``PYTHONPATH``: the tailkit it imports.
    """
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def stats_and_calibrate(
    files: dict[str, Path],
    store: Path,
    *,
    d: Path,
    args: argparse.Namespace,
    tailkit: str,
    notes: list[str],
) -> dict[str, Any]:
    """
    The bare GROUP BY against ``tailkit stats``, then the optional steps, unless skipped.

    ``stats`` runs interleaved with the bare query (and with itself importing the ``--before``
    checkout); then ``stats --approx``, ``stats --source`` and ``calibrate``.
    """
    extra = ["--memory-limit", args.memory_limit] if args.memory_limit else []
    stats = [tailkit, "stats", "--db", str(store), "--by", "provider,model", "--json", *extra]
    bare = [sys.executable, "-c", BARE_STATS, str(store), bare_stats_sql()]
    after = _checkout_env(args.after) if args.after is not None else None
    table = {"bare GROUP BY": timed(bare, d),
             "tailkit stats": timed(stats, d, table_rows, env=after)}  # fmt: skip
    if args.before is not None:  # the same command, importing another checkout of tailkit
        before = _checkout_env(args.before)
        table["tailkit stats (before)"] = timed(stats, d, table_rows, env=before)
    m = interleave(table, args.repeat, _log)
    optional = {
        "tailkit stats --approx": ("stats", "--approx", [*stats, "--approx"]),
        "tailkit stats --source": ("stats", "--source", [tailkit, "stats", "--source",
                                   str(files["parquet"]), "--by", "provider,model", "--json",
                                   *extra]),
    }  # fmt: skip
    for name, (command, option, cmd) in optional.items():
        if option.strip("-") in args.skip:
            notes.append(f"{name}: skipped (--skip)")
        elif has_option(tailkit, command, option):
            m |= interleave({name: timed(cmd, d, table_rows)}, args.repeat, _log)
        else:
            notes.append(f"{name}: skipped, `tailkit {command}` has no {option} option yet")
    if "calibrate" in args.skip:
        notes.append("tailkit calibrate: skipped (--skip)")
        return m
    wf = d / "workflow.yaml"
    wf.write_text(WORKFLOW)
    cal = [tailkit, "calibrate", str(wf), "-o", str(d / "plan.yaml"), "--db", str(store), "-q",
           "--runs", "2000", "--check-runs", "20000", "--replicates", "20", *extra]  # fmt: skip
    return m | interleave({"tailkit calibrate": timed(cal, d)}, args.repeat, _log)


def one_size(rows: int, args: argparse.Namespace, tailkit: str, workdir: Path) -> dict[str, Any]:
    """
    Generate the log of one size, measure every step on it, delete its files unless --keep.
    """

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    d = workdir / f"rows-{rows}"
    d.mkdir(parents=True, exist_ok=True)
    jsonl = rows <= args.jsonl_max_rows
    notes: list[str] = []
    log(f"== {rows:,} rows in {d}")
    gen = [sys.executable, __file__, "--generate", str(d), "--rows", str(rows),
           "--seed", str(args.seed)] + (["--with-jsonl"] if jsonl else [])  # fmt: skip
    files = {"parquet": d / "calls.parquet"} | ({"jsonl": d / "calls.jsonl"} if jsonl else {})
    m: dict[str, Any] = {}
    if args.reuse and all(p.exists() for p in files.values()):
        notes.append(f"log reused from {d} (--reuse): generated by an earlier run, same seed")
        log("  reusing the log already there (--reuse)")
    else:
        g_s, g_rss, _ = measure(gen, d)
        log(f"  generated in {g_s:.1f} s, peak RSS {g_rss:.0f} MB")
        m["generate (child)"] = {"s": g_s, "rss_mb": g_rss}
    sizes = {fmt: file_mb(p) for fmt, p in files.items()}
    if not jsonl:
        notes.append(f"JSONL skipped above {args.jsonl_max_rows:,} rows (--jsonl-max-rows): "
                     f"~340 bytes a row, {rows * 340 / 1e9:.0f} GB")  # fmt: skip
    startup = {
        "start-up: python -c 'import duckdb'": timed([sys.executable, "-c", "import duckdb"], d),
        "start-up: tailkit --help": timed([tailkit, "--help"], d),
    }
    m |= interleave(startup, args.repeat, log)  # the fixed cost inside every wall time below
    store = d / "store-parquet.duckdb"
    m |= ingest_all(files, store, rows=rows, d=d, args=args, tailkit=tailkit, notes=notes)
    sizes["store"] = file_mb(store)
    groups = count_groups(store)
    log(f"  {groups:,} groups (provider x model x input bucket x output bucket)")
    drop(d / "store-jsonl.duckdb")
    m |= stats_and_calibrate(files, store, d=d, args=args, tailkit=tailkit, notes=notes)
    if not args.keep:
        shutil.rmtree(d, ignore_errors=True)
    for name, r in m.items():
        if "error" in r:
            head = r["error"].splitlines()
            notes.append(f"{name}: FAILED ({head[0]} ... {head[-1] if len(head) > 1 else ''})")
    return {
        "rows": rows,
        "groups": groups,
        "files_mb": sizes,
        "measured": m,
        "results": verdicts(m),
        "notes": notes,
    }


def verdicts(m: dict[str, Any]) -> list[dict[str, Any]]:
    """
    One result row per tailkit step: time, ratio to its bare baseline, peak RSS, pass/fail.
    """
    out = []

    def row(name: str, base: str | None, ratio_kind: str, rss_target: bool) -> None:
        if "s" not in m.get(name, {}):
            return
        r: dict[str, Any] = {"step": name, "s": m[name]["s"], "rss_mb": m[name]["rss_mb"]}
        if base is not None and "s" in m.get(base, {}):
            r |= {"bare": base, "bare_s": m[base]["s"], "bare_rss_mb": m[base]["rss_mb"]}
            if ratio_kind == "speed":  # bare s / tailkit s: the share of the bare throughput
                r |= {"ratio": m[base]["s"] / m[name]["s"], "ratio_target": f">= {INGEST_TARGET}"}
                r["ratio_pass"] = r["ratio"] >= INGEST_TARGET
            else:  # tailkit s / bare s
                r |= {"ratio": m[name]["s"] / m[base]["s"], "ratio_target": f"<= {STATS_TARGET:g}"}
                if "cpu_s" in m[name] and "cpu_s" in m[base]:
                    r["cpu_ratio"] = m[name]["cpu_s"] / m[base]["cpu_s"]
                r["ratio_pass"] = r["ratio"] <= STATS_TARGET if ratio_kind == "time" else None
        if rss_target:
            r |= {"rss_target_mb": RSS_TARGET_MB, "rss_pass": r["rss_mb"] <= RSS_TARGET_MB}
        out.append(r)

    row("tailkit ingest parquet", "bare CTAS parquet", "speed", rss_target=False)
    row("tailkit ingest jsonl", "bare CTAS jsonl", "speed", rss_target=False)
    row("tailkit stats", "bare GROUP BY", "time", rss_target=True)
    row("tailkit stats (before)", "bare GROUP BY", "time", rss_target=True)
    row("tailkit stats --approx", "bare GROUP BY", "time", rss_target=True)
    row("tailkit stats --source", "bare GROUP BY", "info", rss_target=True)
    row("tailkit calibrate", None, "", rss_target=True)
    row("generate (child)", None, "", rss_target=False)
    row("start-up: tailkit --help", "start-up: python -c 'import duckdb'", "info", rss_target=False)
    return out


def mark(ok: bool | None) -> str:
    """
    PASS, FAIL, or blank when there is no target.
    """
    return "" if ok is None else ("PASS" if ok else "FAIL")


def render(doc: dict[str, Any]) -> str:
    """
    The results as Markdown: the machine, one table per size, then growth across sizes.
    """
    info = doc["machine"]
    lines = [
        f"machine: nproc={info['nproc']} mem={info['mem_gb']:.0f} GB python={info['python']} "
        f"duckdb={info['duckdb']} ({info['platform']}); commit {info['commit']}",
        f"repeat={doc['repeat']} (median s, max RSS); wall seconds of whole child processes",
    ]
    for size in doc["sizes"]:
        f = size["files_mb"]
        lines += [
            "",
            f"### {size['rows']:,} rows (parquet {f['parquet']:,.0f} MB"
            + (f", jsonl {f['jsonl']:,.0f} MB" if "jsonl" in f else "")
            + f", store {f['store']:,.0f} MB; {size['groups']:,} groups)",
            "",
            "| step | s | peak RSS MB | baseline | baseline s | baseline RSS MB | ratio | "
            "ratio target | | RSS target | |",
            "|---|---:|---:|---|---:|---:|---:|---|---|---|---|",
        ]
        for r in size["results"]:
            ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
            target = r["ratio_target"] if r.get("ratio_pass") is not None else ""
            lines.append(
                f"| {r['step']} | {r['s']:.2f} | {r['rss_mb']:,.0f} | {r.get('bare', '')} | "
                + (f"{r['bare_s']:.2f} | {r['bare_rss_mb']:,.0f}" if "bare" in r else " | ")
                + f" | {ratio} | {target} | {mark(r.get('ratio_pass'))} | "
                + (f"<= {RSS_TARGET_MB:,.0f} MB" if "rss_pass" in r else "")
                + f" | {mark(r.get('rss_pass'))} |"
            )
        lines += [f"- {n}" for n in size["notes"]]
    lines += growth(doc["sizes"])
    return "\n".join(lines)


def growth(sizes: list[dict[str, Any]]) -> list[str]:
    """
    Per step, seconds per million rows and peak RSS at each size.

    From the second size on, each cell also gives the factor in time and RSS from the previous
    size, beside the factor in rows.
    """
    if not sizes:
        return []
    names = list(sizes[0]["measured"])
    head = " | ".join(f"{s['rows'] / 1e6:g} M: s/M rows, RSS MB" for s in sizes)
    lines = ["", "### Growth", "", f"| step | {head} |", "|---|" + "---:|" * len(sizes)]
    for name in names:
        cells = []
        for i, s in enumerate(sizes):
            r = s["measured"].get(name)
            if r is None or "s" not in r:
                cells.append("-")
                continue
            cell = f"{r['s'] / (s['rows'] / 1e6):.3f}, {r['rss_mb']:,.0f}"
            prev = sizes[i - 1]["measured"].get(name) if i else None
            if prev is not None and "s" in prev:
                grow = s["rows"] / sizes[i - 1]["rows"]
                cell += (f" (rows x{grow:g}: time x{r['s'] / prev['s']:.1f}, "
                         f"RSS x{r['rss_mb'] / prev['rss_mb']:.1f})")  # fmt: skip
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def machine() -> dict[str, Any]:
    """
    What the numbers were measured on.
    """
    import duckdb

    git = shutil.which("git") or "/usr/bin/git"
    commit = subprocess.run(
        [git, "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True, check=False,
    ).stdout.strip()  # fmt: skip
    dirty = subprocess.run(
        [git, "-C", str(ROOT), "status", "--porcelain", "--", "tailkit"], capture_output=True,
        text=True, check=False,
    ).stdout.strip()  # fmt: skip
    if commit and dirty:  # the package imported is the working tree's, not the commit's
        commit += " + uncommitted changes in tailkit/"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"nproc": len(os.sched_getaffinity(0)), "mem_gb": mem,
            "python": platform.python_version(), "duckdb": duckdb.__version__,
            "platform": platform.platform(), "commit": commit or "?"}  # fmt: skip


def need_gb(rows: int, jsonl: bool) -> float:
    """
    Disk one size needs at once: Parquet, JSONL, two stores (generous estimates per row).
    """
    return rows * (20 + (340 if jsonl else 0) + 2 * 60) / 1e9


def main(argv: list[str] | None = None) -> int:
    """
    Parse arguments, run every size and print the tables (or JSON).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--rows", type=int, nargs="+", default=[2_000_000],
                        help="one or more sizes, e.g. 2000000 20000000 100000000")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="runs per step (median)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, help="default: a temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep each size's files")
    parser.add_argument("--jsonl-max-rows", type=int, default=20_000_000,
                        help="JSONL only up to this size (default 20 M)")  # fmt: skip
    parser.add_argument("--memory-limit", help="pass --memory-limit to tailkit, e.g. 2GB")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--reuse", action="store_true",
                        help="with --workdir: measure the log already in a size's folder "
                        "(same seed) instead of generating it again")  # fmt: skip
    parser.add_argument(
        "--skip",
        default="",
        type=lambda v: {x.strip() for x in v.split(",")},
        help="steps to leave out: ingest, approx, source, calibrate (e.g. --skip "
        "approx,source); without ingest, --reuse measures the store an earlier run kept",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also time `stats` importing tailkit from this checkout (e.g. a git worktree of "
        "an older commit), interleaved with the others",
    )
    parser.add_argument(
        "--after",
        type=Path,
        help="time `tailkit stats` importing tailkit from this checkout (default: the "
        "installed one)",
    )
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the generator child
    parser.add_argument("--with-jsonl", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate is not None:
        write_log(args.generate, args.rows[0], args.seed, jsonl=args.with_jsonl)
        return 0
    here = str(Path(sys.executable).parent)
    tailkit = shutil.which("tailkit", path=here) or shutil.which("tailkit")
    if tailkit is None:
        sys.exit("no `tailkit` executable next to this Python or on PATH")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tailkit-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(workdir).free / 1e9
    need = max(need_gb(r, r <= args.jsonl_max_rows) for r in args.rows)
    if need > free_gb:
        sys.exit(f"{workdir} has {free_gb:.0f} GB free; the largest size needs ~{need:.0f} GB "
                 "(choose another --workdir or smaller --rows)")  # fmt: skip
    doc: dict[str, Any] = {"machine": machine(), "repeat": args.repeat, "seed": args.seed,
                           "targets": {"ingest": INGEST_TARGET, "stats": STATS_TARGET,
                                       "rss_mb": RSS_TARGET_MB}, "sizes": []}  # fmt: skip
    try:
        for rows in args.rows:
            doc["sizes"].append(one_size(rows, args, tailkit, workdir))
    except BenchError as exc:  # the generator failed
        sys.exit(f"error: {exc}")
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    failed = any("error" in r for s in doc["sizes"] for r in s["measured"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
