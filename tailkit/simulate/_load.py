"""
Route samples from the store: each step's routes, in the bucket of the step's expected tokens.
"""

from __future__ import annotations

import zlib

from collections.abc import Iterable, Mapping

import numpy as np

from tailkit.config import Plan, Route, Step
from tailkit.errors import ConfigError
from tailkit.record import Buckets
from tailkit.simulate._build import SampleKey, step_routes
from tailkit.simulate._sample import RouteSample
from tailkit.store import Store, calls_with_buckets_sql


DEFAULT_MIN_CALLS = 200
LATENCY_SOURCES = ("empirical", "lognormal")
_FAILED = ("error", "rate_limited")


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
) -> RouteSample | None:
    """
    The latency of ``route`` for calls like ``step``'s (``None`` when it has no finished call).

    Finished calls come from the step's input and output bucket. Cut calls and failures have
    no output tokens, so they are taken from the input bucket: the cut calls in the same
    proportion to finished calls as there, and the error and invalid rates from there.

    Args:
        store: An open store.
        route: Provider and model.
        step: The step (its expected tokens pick the bucket).
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        seed: Seed for the cut calls' drawn latencies.
    """
    buckets = buckets or Buckets()
    where, out_label, label = _bucket_filter(buckets, step)
    sql = (
        "SELECT total_s, ttft_s, censored_at_s, status, output_bucket FROM "
        f"({calls_with_buckets_sql(buckets)}) WHERE provider = {_lit(route.provider)} "
        f"AND model = {_lit(route.model)} AND {where}"
    )
    table = store.arrow(sql)
    total = table.column("total_s").to_numpy(zero_copy_only=False).astype(np.float64)
    ttft = table.column("ttft_s").to_numpy(zero_copy_only=False).astype(np.float64)
    cut = table.column("censored_at_s").to_numpy(zero_copy_only=False).astype(np.float64)
    status = np.asarray(table.column("status").to_pylist(), dtype=object)
    is_cut = np.isfinite(cut) & (cut > 0)
    ok = (status == "ok") & np.isfinite(total) & (total > 0) & ~is_cut
    in_bucket = ok
    if out_label is not None:
        outs = np.asarray(table.column("output_bucket").to_pylist(), dtype=object)
        in_bucket = ok & (outs == out_label)
    n_ok, n_cut, n_bucket = int(ok.sum()), int(is_cut.sum()), int(in_bucket.sum())
    if n_bucket < 2:
        return None
    # as many cut calls per finished call as in the whole input bucket, evenly over their ages
    keep_cut = round(n_cut * n_bucket / n_ok) if n_ok else 0
    cut_ages = np.sort(cut[is_cut])
    if 0 < keep_cut < cut_ages.size:
        cut_ages = cut_ages[np.linspace(0, cut_ages.size - 1, keep_cut).round().astype(int)]
    failed = np.isin(status, _FAILED)
    invalid = status == "invalid"
    attempts = max(status.size, 1)
    latency = np.concatenate([total[in_bucket], np.full(cut_ages.size, np.nan)])
    return RouteSample.from_latencies(
        latency,
        ttft_s=np.concatenate([ttft[in_bucket], np.full(cut_ages.size, np.nan)]),
        censored_at_s=np.concatenate([np.full(n_bucket, np.nan), cut_ages]),
        error_rate=float(failed.sum()) / attempts,
        error_s=total[failed],
        invalid_rate=float(invalid.sum()) / max(int(invalid.sum()) + n_ok, 1),
        bucket=label,
        seed=seed,
    )


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def load_samples(
    store: Store,
    plan: Plan,
    *,
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    candidates: Mapping[str, Iterable[str]] | None = None,
    seed: int = 0,
    latency: str = "empirical",
) -> dict[SampleKey, RouteSample]:
    """
    A sample for every route every step uses (and for candidate routes, where data allow).

    Args:
        store: An open store.
        plan: The workflow.
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls (finished and cut) a step's routes need.
        candidates: Per step, further routes the calibrator may try; thin ones are left out.
        seed: Seed for the cut calls' drawn latencies.
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (each route's
            censoring-aware lognormal fit).

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
            sample = route_sample(store, plan.routes[route], step, buckets=buckets, seed=key_seed)
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
