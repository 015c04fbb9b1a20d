"""
Route samples from the store: each step's routes, in the bucket of the step's expected tokens.
"""

from __future__ import annotations

import dataclasses
import zlib

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.config import Plan, Route, Step
from tailkit.errors import ConfigError
from tailkit.record import Buckets
from tailkit.simulate._build import SampleKey, step_routes
from tailkit.simulate._sample import RouteSample
from tailkit.store import Store, calls_with_buckets_sql, group_sample_sql


DEFAULT_MIN_CALLS = 200
LATENCY_SOURCES = ("empirical", "lognormal")
# Calls a route sample holds at most. The simulator draws from a 65,536-entry quantile table;
# 100,000 calls put about 1,000 beyond a step's p99, so a 7-step workflow's p99 (each step's
# p99.9 and beyond) moves less than its own bootstrap interval from the full bucket's.
SAMPLE_CALLS = 100_000
_CUT = "coalesce(isfinite(censored_at_s) AND censored_at_s > 0, FALSE)"
_OK = f"coalesce(status = 'ok' AND isfinite(total_s) AND total_s > 0, FALSE) AND NOT {_CUT}"
_FAILED_SQL = "coalesce(status IN ('error', 'rate_limited'), FALSE)"
_Array = npt.NDArray[np.float64]


class ThinSampleError(ConfigError):
    """
    A step's route has too few calls in its bucket to calibrate on.
    """


def _bucket_filter(buckets: Buckets, step: Step) -> tuple[str, str | None, str]:
    """
    SQL filter on the input bucket, the output bucket label (or None: any) and the label.
    """
    tokens = step.expected_tokens
    where = "TRUE"
    in_label = out_label = None
    if tokens.input is not None:
        in_label = buckets.input_label(tokens.input)
        where = f"input_bucket = '{in_label}'"
    if tokens.output is not None:
        out_label = buckets.output_label(tokens.output)
    label = f"in {in_label or 'any'} / out {out_label or 'any'}"
    return where, out_label, label


def widen_fixes(steps: Iterable[Step]) -> str:
    """
    How to widen the buckets of ``steps``, only what applies to their expected tokens.

    Returns:
        ``"widen the bucket (…), "``, naming ``drop expected_tokens.output`` and the edge
        options of the token counts the steps set; ``""`` when none sets any (one bucket).
    """
    steps = list(steps)
    has_input = any(step.expected_tokens.input is not None for step in steps)
    has_output = any(step.expected_tokens.output is not None for step in steps)
    edges = "/".join(
        option
        for option, used in (("--input-edges", has_input), ("--output-edges", has_output))
        if used
    )
    if not edges:
        return ""
    fixes = f"drop expected_tokens.output, or set {edges}" if has_output else f"set {edges}"
    return f"widen the bucket{'s' if len(steps) > 1 else ''} ({fixes}), "


def route_sample(
    store: Store,
    route: Route,
    step: Step,
    *,
    buckets: Buckets | None = None,
    seed: int = 0,
    sample_size: int = SAMPLE_CALLS,
) -> RouteSample | None:
    """
    The latency of ``route`` for calls like ``step``'s (``None`` when it has no finished call).

    Finished calls come from the step's input and output bucket. Cut calls and failures have
    no output tokens, so they are taken from the input bucket: the cut calls in the same
    proportion to finished calls as there, and the error and invalid rates from there.

    Memory is bounded by ``sample_size``, not by the store: the counts and rates (calls, cut
    share, error and invalid rates) are exact, counted in SQL; the latencies the simulator
    draws are a seeded sample drawn inside DuckDB, all of the bucket's calls when it has no
    more than ``sample_size`` (finished plus their share of cut calls).

    Args:
        store: An open store.
        route: Provider and model.
        step: The step (its expected tokens pick the bucket).
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        seed: Seed of the sample and of the cut calls' drawn latencies.
        sample_size: Most calls (finished and cut) the sample holds.

    Raises:
        ConfigError: ``sample_size`` is below 2.
    """
    if sample_size < 2:
        msg = f"sample_size must be at least 2, got {sample_size}"
        raise ConfigError(msg)
    buckets = buckets or Buckets()
    where, out_label, label = _bucket_filter(buckets, step)
    source = (
        f"SELECT * FROM ({calls_with_buckets_sql(buckets)}) WHERE provider = "
        f"{_lit(route.provider)} AND model = {_lit(route.model)} AND {where}"
    )
    in_bucket = _OK if out_label is None else f"{_OK} AND output_bucket = {_lit(out_label)}"
    counts = _Counts.of(store, source, in_bucket)
    if counts.bucket < 2:
        return None
    size = counts.finished_size(sample_size)
    total, ttft = _sample(
        store, source, ("total_s", "ttft_s"), where=in_bucket, rows=counts.bucket, size=size,
        seed=seed,
    )  # fmt: skip
    cut_ages = _cut_ages(store, source, n_cut=counts.cut, keep=counts.keep_cut(total.size))
    (errors,) = _sample(
        store, source, ("total_s",), where=_FAILED_SQL, rows=counts.failed, size=sample_size,
        seed=seed,
    )  # fmt: skip
    sample = RouteSample.from_latencies(
        np.concatenate([total, np.full(cut_ages.size, np.nan)]),
        ttft_s=np.concatenate([ttft, np.full(cut_ages.size, np.nan)]),
        censored_at_s=np.concatenate([np.full(total.size, np.nan), cut_ages]),
        error_rate=counts.failed / max(counts.attempts, 1),
        error_s=errors,
        invalid_rate=counts.invalid / max(counts.invalid + counts.ok, 1),
        bucket=label,
        seed=seed,
    )
    calls = counts.bucket + counts.keep_cut(counts.bucket)
    if calls == sample.calls:
        return sample
    return dataclasses.replace(sample, calls=calls, censored=counts.keep_cut(counts.bucket) / calls)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class _Counts:
    """
    Exact counts of a route's calls in a step's input bucket.
    """

    attempts: int
    ok: int
    cut: int
    bucket: int  # finished calls in the output bucket too
    failed: int
    invalid: int

    @classmethod
    def of(cls, store: Store, source: str, in_bucket: str) -> _Counts:
        row = store.fetchone(
            f"SELECT count(*), count(*) FILTER ({_OK}), count(*) FILTER ({_CUT}), "
            f"count(*) FILTER ({in_bucket}), count(*) FILTER ({_FAILED_SQL}), "
            f"count(*) FILTER (status = 'invalid') FROM ({source})"
        )
        assert row is not None  # noqa: S101 - an aggregate has one row
        return cls(*(int(v) for v in row))

    def keep_cut(self, finished: int) -> int:
        """
        Cut calls to keep with ``finished`` finished ones: the input bucket's proportion.
        """
        return round(self.cut * finished / self.ok) if self.ok else 0

    def finished_size(self, sample_size: int) -> int:
        """
        Finished calls to sample so that they and their share of cut calls fit the size.
        """
        calls = self.bucket + self.keep_cut(self.bucket)
        if calls <= sample_size:
            return self.bucket
        return max(2, round(sample_size * self.bucket / calls))


def _sample(
    store: Store,
    source: str,
    columns: Sequence[str],
    *,
    where: str,
    rows: int,
    size: int,
    seed: int,
) -> list[_Array]:
    """
    ``columns`` of ``source``'s ``rows`` rows passing ``where``: a seeded sample of ``size``.

    All of them, in the store's order, when there are no more than ``size`` (as before the
    sample existed, so that small stores give the same plans); else the sample, sorted.
    """
    names = ", ".join(columns)
    if rows <= size:
        table = store.arrow(f"SELECT {names} FROM ({source}) WHERE {where}")
    else:
        sampled = group_sample_sql(
            f"({source}) AS c", ("provider", "model"), size=size, seed=seed, where=where
        )
        table = store.arrow(f"SELECT {names} FROM ({sampled}) ORDER BY {names}")
    return [
        np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
        for c in columns
    ]


def _cut_ages(store: Store, source: str, *, n_cut: int, keep: int) -> _Array:
    """
    ``keep`` of the ``n_cut`` cut ages, evenly over their ranks (sorted).
    """
    if keep <= 0:
        return np.zeros(0)
    ranked = f"SELECT censored_at_s AS age FROM ({source}) WHERE {_CUT}"
    if keep >= n_cut:
        rows = store.fetchall(f"{ranked} ORDER BY age")
    else:
        ranks = np.linspace(0, n_cut - 1, keep).round().astype(np.int64)
        rows = store.fetchall(
            "SELECT age FROM (SELECT age, row_number() OVER (ORDER BY age) - 1 AS rank "
            f"FROM ({ranked})) WHERE rank IN (SELECT unnest(?)) ORDER BY age",
            [ranks.tolist()],
        )
    return np.asarray([r[0] for r in rows], dtype=np.float64)


def load_samples(
    store: Store,
    plan: Plan,
    *,
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    candidates: Mapping[str, Iterable[str]] | None = None,
    seed: int = 0,
    latency: str = "empirical",
    sample_size: int = SAMPLE_CALLS,
) -> dict[SampleKey, RouteSample]:
    """
    A sample for every route every step uses (and for candidate routes, where data allow).

    Args:
        store: An open store.
        plan: The workflow.
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls (finished and cut) a step's routes need.
        candidates: Per step, further routes the calibrator may try; thin ones are left out.
        seed: Seed of the samples and of the cut calls' drawn latencies.
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (each route's
            censoring-aware lognormal fit).
        sample_size: Most calls each route's sample holds (see `route_sample`).

    Raises:
        ThinSampleError: A route a step uses has fewer than ``min_calls`` calls in its bucket.
    """
    if latency not in LATENCY_SOURCES:
        msg = f"--latency must be one of {', '.join(LATENCY_SOURCES)}, got {latency!r}"
        raise ConfigError(msg)
    out: dict[SampleKey, RouteSample] = {}
    for name, step in plan.steps.items():
        extra = tuple((candidates or {}).get(name, ()))
        for route in (*step_routes(step), *extra):
            if (name, route) in out:
                continue
            key_seed = seed + zlib.crc32(f"{name}/{route}".encode())
            sample = route_sample(
                store, plan.routes[route], step, buckets=buckets, seed=key_seed,
                sample_size=sample_size,
            )  # fmt: skip
            calls = 0 if sample is None else sample.calls
            if calls >= min_calls and sample is not None:
                out[(name, route)] = sample.as_lognormal() if latency == "lognormal" else sample
            elif route not in extra:
                where = _bucket_filter(buckets or Buckets(), step)[2]
                msg = (
                    f"step {name!r}: route {route} has {calls} calls in bucket {where} "
                    f"(needs {min_calls}). Ingest more logs for this route, "
                    f"{widen_fixes([step])}or lower --min-calls"
                )
                raise ThinSampleError(msg)
    return out
