"""
The production-like sample's generator: a seeded, vectorized simulation of LLM call records.

One row per *attempt* of a *step* of a workflow *run* (extract -> plan -> draft -> review ->
revise -> summarize).  Runs start over 14 days on a diurnal, weekday-heavy curve; steps run
back to back and a run stops at the first step that fails for good.  Per route, TTFT is a
lognormal around ttft0 + prefill * input_tokens/1000 and generation is output_tokens / rate
with lognormal noise; 3-5 % transient stalls add (F - 1) * (TTFT + gen), F ~ 2.5-15x, in TTFT
for outputs < 600 tokens (queueing), mostly in generation otherwise (slow decode).  Totals over
90 s become censored timeouts; on top come clustered 429 bursts, ~1 % 5xx errors, retries and
hedges.  Numerics are vectorized (loops only over steps, retry rounds and burst windows); JSON
lines are built with pyarrow kernels; same seed, same bytes.  The model is described in
data_samples/README.md; data_samples/generate.py is its command line, and ``tailkit demo``
calls `write_sample` when the committed sample is not at hand (an installed wheel).
"""

from __future__ import annotations

import contextlib
import gzip

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


FloatA = npt.NDArray[np.float64]
IntA = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]
Cols = dict[str, npt.NDArray[Any]]
Bursts = tuple[IntA, FloatA, FloatA, FloatA]  # provider, start s, end s, share limited

EPOCH, DAYS, CAP_MS, JSON_CHUNK = np.datetime64("2026-10-01T00:00:00", "us"), 14, 90_000, 250_000

PROVIDERS = ("openai", "azure", "bedrock", "anthropic", "google")
# provider, model, ttft0 (s), prefill (s per 1k input), tokens/s, stall p, 5xx p, fallback route
ROUTES = (
    ("openai", "gpt-4.1", 0.45, 0.010, 90.0, 0.035, 0.008, 1),
    ("azure", "gpt-4.1", 0.55, 0.012, 80.0, 0.045, 0.012, 0),
    ("bedrock", "claude-sonnet-4", 0.80, 0.014, 60.0, 0.050, 0.010, 3),
    ("anthropic", "claude-sonnet-4", 0.70, 0.012, 65.0, 0.040, 0.009, 2),
    ("openai", "gpt-4.1-mini", 0.30, 0.005, 120.0, 0.030, 0.007, 5),
    ("google", "gemini-2.5-flash", 0.35, 0.004, 160.0, 0.030, 0.011, 4),
)
TTFT0, PREFILL, TOK_RATE, STALL_P, ERROR_P = np.array([r[2:7] for r in ROUTES]).T
FALLBACK = np.array([r[7] for r in ROUTES], dtype=np.int64)
ROUTE_PROVIDER = np.array([PROVIDERS.index(r[0]) for r in ROUTES], dtype=np.int64)
TTFT_SIGMA, GEN_SIGMA, LONG_OUTPUT, STALL_IN_GEN_P = 0.30, 0.25, 600, 0.85
STALL_MEDIAN, STALL_SIGMA, STALL_MIN, STALL_MAX = 4.0, 0.5, 2.5, 15.0
BASE_429_P, BURSTS_PER_PROVIDER = 0.002, (3, 6)

# Statuses; per status of the failed attempt: retry probability, probability that the retry
# switches to the fallback route, median backoff (s) before it.
STATUSES = ("ok", "error", "timeout", "rate_limited")
OK, ERROR, TIMEOUT, RATE_LIMITED = range(4)
RETRY_P = np.array([0.0, 0.90, 0.60, 0.85])
SWITCH_P = np.array([0.0, 0.40, 0.70, 0.60])
BACKOFF_MEDIAN = np.array([0.0, 0.8, 0.5, 2.0])
ROLES = ("primary", "retry", "hedge")
PRIMARY, RETRY, HEDGE = range(3)
HTTP_5XX_TYPES = ("InternalServerError", "APIError", "ServiceUnavailableError")
ERROR_TYPES = (*HTTP_5XX_TYPES, "RateLimitError", "Timeout")
HTTP_5XX, HTTP_5XX_P = np.array([500, 502, 503]), np.array([0.5, 0.3, 0.2])
HEDGE_RUN_P, MAX_ATTEMPT = 0.3, 2
SAMPLE_ROWS, SAMPLE_SEED = 200_000, 7  # the committed data_samples/production files
FORMATS = ("jsonl", "parquet")


class Step(NamedTuple):
    """
    Token profile, routing and client behaviour of one workflow step.
    """

    name: str
    present_p: float  # probability the step runs (given `requires` ran)
    requires: int  # index of a step that must be present, or -1
    route: int  # primary route index
    in_median: float
    in_sigma: float
    out_median: float
    out_sigma: float
    nonstream_p: float  # share of calls made without streaming (no TTFT)
    hedge_after: float  # s; hedge a primary still running after this


STEPS = (
    Step("extract", 1.0, -1, 4, 8000, 0.9, 350, 0.6, 0.25, 8.0),
    Step("plan", 0.7, -1, 3, 2500, 0.6, 500, 0.5, 0.05, 14.0),
    Step("draft", 1.0, -1, 0, 6000, 0.7, 1300, 0.5, 0.05, 45.0),
    Step("review", 0.6, -1, 2, 12000, 0.8, 180, 0.7, 0.05, 10.0),
    Step("revise", 0.5, 3, 1, 9000, 0.6, 1600, 0.45, 0.05, 55.0),
    Step("summarize", 1.0, -1, 5, 20000, 0.9, 120, 0.6, 0.05, 5.0),
)
RUN_SIZE_SIGMA, GAP_MEDIAN, GAP_SIGMA = 0.5, 0.25, 1.0


def to_ms(seconds: FloatA) -> IntA:
    """
    Round seconds to integer milliseconds, at least 1 ms.
    """
    return np.maximum(np.rint(seconds * 1000.0), 1).astype(np.int64)


def load_times(rng: np.random.Generator, n: int) -> FloatA:
    """
    Draw n times (s since EPOCH) from the diurnal, weekday-heavy load curve.
    """
    minute = np.arange(DAYS * 1440)
    hour = (minute % 1440) / 60.0
    diurnal = 0.25 + 0.75 * 0.5 * (1.0 - np.cos(2.0 * np.pi * (hour - 3.0) / 24.0))
    weekday = (minute // 1440 + 3) % 7  # 2026-10-01 is a Thursday (3)
    weight = diurnal * np.where(weekday >= 5, 0.55, 1.0)
    picks = rng.choice(minute.size, size=n, p=weight / weight.sum())
    return np.asarray((picks + rng.random(n)) * 60.0, dtype=np.float64)


def make_bursts(rng: np.random.Generator) -> Bursts:
    """
    Place a few 3-25 minute 429 windows per provider, preferring busy hours.
    """
    lo, hi = BURSTS_PER_PROVIDER
    counts = rng.integers(lo, hi + 1, size=len(PROVIDERS))
    provider = np.repeat(np.arange(len(PROVIDERS), dtype=np.int64), counts)
    start = load_times(rng, provider.size)
    end = start + rng.uniform(3.0, 25.0, provider.size) * 60.0
    return provider, start, end, rng.uniform(0.4, 0.9, provider.size)


def latency_ms(rng: np.random.Generator, route: IntA, tin: IntA, tout: IntA) -> tuple[IntA, IntA]:
    """
    Return (ttft_ms, gen_ms) of the would-be successful response.
    """
    n = route.size
    median = TTFT0[route] + PREFILL[route] * tin / 1000.0
    ttft = median * rng.lognormal(0.0, TTFT_SIGMA, n)
    gen = tout / TOK_RATE[route] * rng.lognormal(0.0, GEN_SIGMA, n)
    stall = rng.random(n) < STALL_P[route]
    factor = np.clip(rng.lognormal(np.log(STALL_MEDIAN), STALL_SIGMA, n), STALL_MIN, STALL_MAX)
    extra = np.where(stall, (factor - 1.0) * (ttft + gen), 0.0)
    in_gen = (tout >= LONG_OUTPUT) & (rng.random(n) < STALL_IN_GEN_P)
    ttft = np.where(in_gen, ttft, ttft + extra)
    gen = np.where(in_gen, gen + extra, gen)
    return to_ms(ttft), to_ms(gen)


def simulate_attempts(
    rng: np.random.Generator, route: IntA, tin: IntA, tout: IntA, *, start: FloatA,
    stream: BoolA, bursts: Bursts,
) -> Cols:  # fmt: skip
    """
    Simulate one attempt per element; -1 encodes null in the *_ms columns.
    """
    n = route.size
    ttft, gen = latency_ms(rng, route, tin, tout)
    total = ttft + gen
    status = np.where(total > CAP_MS, TIMEOUT, OK)
    status[rng.random(n) < ERROR_P[route]] = ERROR
    p_429 = np.full(n, BASE_429_P)  # raised to the window's share inside a 429 burst
    for provider, lo, hi, share in zip(*bursts, strict=True):
        p_429[(ROUTE_PROVIDER[route] == provider) & (start >= lo) & (start < hi)] = share
    status[rng.random(n) < p_429] = RATE_LIMITED
    fail_ms = np.clip(to_ms(rng.lognormal(np.log(1.2), 0.9, n)), 50, 30_000)
    rl_ms = to_ms(rng.uniform(0.05, 0.5, n))
    elapsed = np.choose(status, [total, fail_ms, np.full(n, CAP_MS), rl_ms])
    ok, err, rl = status == OK, status == ERROR, status == RATE_LIMITED
    ttft_seen = stream & (ok | ((status == TIMEOUT) & (ttft < CAP_MS)))
    code = rng.choice(len(HTTP_5XX), size=n, p=HTTP_5XX_P)
    return {
        "ttft_ms": np.where(ttft_seen, ttft, -1),
        "total_ms": np.where(ok | rl | (err & (rng.random(n) >= 0.1)), elapsed, -1),
        "elapsed_ms": elapsed,
        "input_tokens": tin,
        "output_tokens": np.where(ok, tout, -1),
        "status": status,
        "http_status": np.where(err, HTTP_5XX[code], np.where(rl, 429, -1)),
        "error_type": np.choose(status, [np.full(n, -1), code, np.full(n, 4), 3]),
        "censored_ms": np.where(status == TIMEOUT, CAP_MS, -1),
    }


def simulate_step(
    rng: np.random.Generator, k: int, runs: IntA, *, t0: FloatA, tin: IntA,
    tout: IntA, hedging: BoolA, bursts: Bursts,
) -> tuple[list[Cols], FloatA]:  # fmt: skip
    """
    Run step k for the given runs: primary, optional hedge, retries.

    Returns the attempt columns and each run's step end time (inf = failed).
    """
    spec, n = STEPS[k], runs.size
    stream = rng.random(n) >= spec.nonstream_p
    route = np.full(n, spec.route, dtype=np.int64)
    ok_end, last_end = np.full(n, np.inf), t0.copy()
    attempt, last_status = np.zeros(n, np.int64), np.zeros(n, np.int64)
    out: list[Cols] = []

    def launch(idx: IntA, rt: IntA, start: FloatA, role: int) -> Cols:
        a = simulate_attempts(
            rng, rt, tin[idx], tout[idx], start=start, stream=stream[idx], bursts=bursts
        )
        end = start + a["elapsed_ms"] / 1000.0
        ok = a["status"] == OK
        ok_end[idx[ok]] = np.minimum(ok_end[idx[ok]], end[ok])
        last_end[idx] = np.maximum(last_end[idx], end)
        last_status[idx], route[idx] = a["status"], rt
        a.update(run=runs[idx], step=np.full(idx.size, k), attempt=attempt[idx].copy())
        a.update(role=np.full(idx.size, role), route=rt, start=start)
        attempt[idx] += 1
        out.append(a)
        return a

    first = launch(np.arange(n), route.copy(), t0, PRIMARY)
    hi = np.flatnonzero(hedging & (first["elapsed_ms"] > spec.hedge_after * 1000))
    launch(hi, FALLBACK[route[hi]], t0[hi] + spec.hedge_after, HEDGE)
    for _ in range(MAX_ATTEMPT):
        retry = np.isinf(ok_end) & (attempt <= MAX_ATTEMPT)
        ri = np.flatnonzero(retry & (rng.random(n) < RETRY_P[last_status]))
        st = last_status[ri]
        switch = rng.random(ri.size) < SWITCH_P[st]
        backoff = BACKOFF_MEDIAN[st] * rng.lognormal(0.0, 0.5, ri.size)
        rt = np.where(switch, FALLBACK[route[ri]], route[ri])
        launch(ri, rt, last_end[ri] + np.round(backoff, 3), RETRY)
    return out, ok_end


def simulate(rng: np.random.Generator, n_runs: int, bursts: Bursts) -> Cols:
    """
    Simulate n_runs workflow runs; return concatenated attempt columns.
    """
    cursor = load_times(rng, n_runs)
    size = rng.lognormal(0.0, RUN_SIZE_SIGMA, n_runs)
    hedging = rng.random(n_runs) < HEDGE_RUN_P
    alive = np.ones(n_runs, dtype=bool)
    present = np.empty((n_runs, len(STEPS)), dtype=bool)
    parts: list[Cols] = []
    for k, spec in enumerate(STEPS):
        present[:, k] = rng.random(n_runs) < spec.present_p
        if spec.requires >= 0:
            present[:, k] &= present[:, spec.requires]
        runs = np.flatnonzero(alive & present[:, k])
        m = runs.size
        tin = spec.in_median * size[runs] * rng.lognormal(0.0, spec.in_sigma, m)
        tout = spec.out_median * rng.lognormal(0.0, spec.out_sigma, m)
        out, end = simulate_step(
            rng, k, runs, t0=cursor[runs],
            tin=np.clip(np.rint(tin), 20, 190_000).astype(np.int64),
            tout=np.clip(np.rint(tout), 1, 8192).astype(np.int64),
            hedging=hedging[runs], bursts=bursts,
        )  # fmt: skip
        parts += out
        ok = np.isfinite(end)
        alive[runs[~ok]] = False
        gap = np.round(rng.lognormal(np.log(GAP_MEDIAN), GAP_SIGMA, ok.sum()), 3)
        cursor[runs[ok]] = end[ok] + gap
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def generate(rows: int, seed: int) -> Cols:
    """
    Simulate enough runs for `rows` attempts, keep the first `rows` (by run).

    Rows come back ordered by start time, then run, step and attempt.
    """
    rng = np.random.default_rng(seed)
    bursts = make_bursts(rng)
    n_runs = rows // 4 + 100  # ~4.8 attempts per run, so this overshoots
    while (cols := simulate(rng, n_runs, bursts))["run"].size < rows:
        n_runs *= 2
    keep = np.lexsort((cols["attempt"], cols["step"], cols["run"]))[:rows]
    cols = {key: v[keep] for key, v in cols.items()}
    start_us = EPOCH.astype(np.int64) + np.rint(cols["start"] * 1e6).astype(np.int64)
    order = np.lexsort((cols["attempt"], cols["step"], cols["run"], start_us))
    cols = {key: v[order] for key, v in cols.items()}
    cols["start_us"] = start_us[order]
    _, first, inverse = np.unique(cols["run"], return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    cols["run_rank"] = rank[inverse]
    return cols


def to_table(c: Cols) -> pa.Table:
    """
    Build the call-record Arrow table (column order is the public schema); -1 means null.
    """

    def ids(prefix: str, num: IntA, width: int) -> pa.Array:
        digits = pc.utf8_lpad(pc.cast(pa.array(num), pa.string()), width, "0")
        return pc.binary_join_element_wise(prefix, digits, "")

    def cat(names: tuple[str, ...], codes: npt.NDArray[Any]) -> pa.Array:
        return pa.array(names).take(pa.array(codes.astype(np.int64), mask=codes < 0))

    def opt(v: IntA, scale: float = 0.0) -> pa.Array:
        return pa.array(v / scale if scale else v, mask=v < 0)

    n = c["run"].size
    return pa.table({
        "call_id": ids("c-", np.arange(n, dtype=np.int64), 9),
        "run_id": ids("r-", c["run_rank"], 7),
        "step": cat(tuple(s.name for s in STEPS), c["step"]),
        "attempt": pa.array(c["attempt"], type=pa.int64()),
        "role": cat(ROLES, c["role"]),
        "provider": cat(tuple(r[0] for r in ROUTES), c["route"]),
        "model": cat(tuple(r[1] for r in ROUTES), c["route"]),
        "started_at": pa.array(c["start_us"], type=pa.timestamp("us", tz="UTC")),
        "ttft_s": opt(c["ttft_ms"], 1000.0),
        "total_s": opt(c["total_ms"], 1000.0),
        "input_tokens": pa.array(c["input_tokens"], type=pa.int64()),
        "output_tokens": opt(c["output_tokens"]),
        "status": cat(STATUSES, c["status"]),
        "error_type": cat(ERROR_TYPES, c["error_type"]),
        "http_status": opt(c["http_status"]),
        "censored_at_s": opt(c["censored_ms"], 1000.0),
        "abandoned": pa.array(np.zeros(n, dtype=bool)),
    })  # fmt: skip


def json_values(t: pa.Table, name: str) -> pa.Array:
    """
    Render one column as JSON value text ("null" for nulls, 3-decimal floats).
    """
    col = t.column(name).combine_chunks()
    if pa.types.is_timestamp(col.type):
        naive = col.cast(pa.int64()).to_numpy().astype("datetime64[us]")
        col = pa.array(np.datetime_as_string(naive, unit="us"))
        return pc.binary_join_element_wise('"', col, 'Z"', "")
    if pa.types.is_string(col.type):
        text = pc.binary_join_element_wise('"', col, '"', "")
    elif pa.types.is_floating(col.type):  # values are >= 0 and whole ms
        ms = pc.cast(pc.round(pc.multiply(col, 1000.0)), pa.int64())
        whole = pc.divide(ms, 1000)  # integer division
        frac = pc.utf8_lpad(pc.cast(pc.subtract(ms, pc.multiply(whole, 1000)), pa.string()), 3, "0")
        text = pc.binary_join_element_wise(pc.cast(whole, pa.string()), frac, ".")
    else:  # integers and booleans ("true"/"false")
        text = pc.cast(col, pa.string())
    return pc.fill_null(text, "null")


def write_jsonl(t: pa.Table, path: Path, *, gzipped: bool) -> None:
    """
    Write JSON lines chunk by chunk; gzip uses mtime=0 so output is reproducible.
    """
    with contextlib.ExitStack() as stack:
        out: Any = stack.enter_context(path.open("wb"))
        if gzipped:
            out = stack.enter_context(gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0))
        for lo in range(0, t.num_rows, JSON_CHUNK):
            chunk = t.slice(lo, JSON_CHUNK)
            parts: list[Any] = []
            for i, name in enumerate(chunk.column_names):
                parts += [("{" if i == 0 else ",") + f'"{name}":', json_values(chunk, name)]
            lines = pc.binary_join_element_wise(*parts, "}\n", "")
            offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)  # contiguous text
            out.write(lines.buffers()[2].to_pybytes()[offsets[0] : offsets[len(lines)]])


def write_sample(
    out_dir: Path,
    *,
    rows: int = SAMPLE_ROWS,
    seed: int = SAMPLE_SEED,
    formats: Sequence[str] = ("parquet",),
    gzipped: bool = True,
) -> list[Path]:
    """
    Generate the call log and write it as ``calls.parquet`` and/or ``calls.jsonl[.gz]``.

    The defaults give the committed data_samples/production files, byte for byte.

    Args:
        out_dir: Folder for the files (created if missing).
        rows: Attempts to keep (at least 1).
        seed: Seed of ``numpy.random.default_rng``.
        formats: A subset of ``("jsonl", "parquet")``.
        gzipped: Write ``calls.jsonl.gz`` rather than ``calls.jsonl``.

    Returns:
        The paths written, in the order of ``formats``.

    Raises:
        ValueError: ``formats`` names another format, or ``rows`` is below 1.
    """
    if not set(formats) <= set(FORMATS) or rows < 1:
        msg = f"formats must be a subset of {','.join(FORMATS)} and rows >= 1"
        raise ValueError(msg)
    table = to_table(generate(rows, seed))
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        if fmt == "jsonl":
            path = out_dir / ("calls.jsonl.gz" if gzipped else "calls.jsonl")
            write_jsonl(table, path, gzipped=gzipped)
        else:
            path = out_dir / "calls.parquet"
            pq.write_table(table, path, compression="zstd", compression_level=9)
        written.append(path)
    return written
