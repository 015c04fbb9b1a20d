"""
Route samples from the store: each step's routes, in the bucket of the step's expected tokens.
"""

from __future__ import annotations

import dataclasses
import zlib

from collections.abc import Iterable, Mapping
from datetime import datetime

import numpy as np

from tailkit.config import Plan, Route, Step
from tailkit.errors import ConfigError
from tailkit.record import Buckets
from tailkit.simulation._build import SampleKey, step_routes
from tailkit.simulation._fetch import CUT, Need, RouteData, _counts, fetch, since_sql, within
from tailkit.simulation._sample import RouteSample
from tailkit.store import Store
from tailkit.store.lowlevel import calls_with_buckets_sql


DEFAULT_MIN_CALLS = 200
LATENCY_SOURCES = ("empirical", "lognormal")
# Finished calls a route sample holds at most (plus cut calls in their measured proportion).
# The simulator draws from a 65,536-entry quantile table; 100,000 calls put 1,000 beyond a
# step's p99. Measured on a 20 M-call store (buckets of 0.4 to 1.4 M calls), the sample
# workflow's plan predicted from 100,000- and even 10,000-call samples stays inside the
# 95 % intervals of the prediction from the full buckets (miss rate, p50, p99).
SAMPLE_CALLS = 100_000


class ThinSampleError(ConfigError):
    """
    A step's route has too few calls in its bucket to calibrate on.

    Its fixes name several parameters (``min_calls``, the bucket edges), each as a
    ``{parameter}`` token that `render` spells as its caller does.
    """


def _bucket_filter(buckets: Buckets, step: Step) -> tuple[str | None, str | None, str]:
    """
    The input and output bucket labels of ``step`` (``None``: any) and the sample's label.
    """
    tokens = step.expected_tokens
    in_label = out_label = None
    if tokens.input is not None:
        in_label = buckets.input_label(tokens.input)
    if tokens.output is not None:
        out_label = buckets.output_label(tokens.output)
    label = f"in {in_label or 'any'} / out {out_label or 'any'}"
    return in_label, out_label, label


def _need(route: Route, step: Step, buckets: Buckets) -> Need:
    in_label, out_label, _ = _bucket_filter(buckets, step)
    return Need(route.provider, route.model, in_label, out_label)


def widen_fixes(steps: Iterable[Step]) -> str:
    """
    How to widen the buckets of ``steps``, only what applies to their expected tokens.

    Returns:
        ``"widen the bucket (…), "``, naming ``drop expected_tokens.output`` and the bucket
        edges of the token counts the steps set, as ``{input_edges}`` / ``{output_edges}``
        tokens (`tailkit.text.Advice`); ``""`` when none sets any (one bucket).
    """
    steps = list(steps)
    has_input = any(step.expected_tokens.input is not None for step in steps)
    has_output = any(step.expected_tokens.output is not None for step in steps)
    edges = "/".join(
        option
        for option, used in (("{input_edges}", has_input), ("{output_edges}", has_output))
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
    since: datetime | None = None,
) -> RouteSample | None:
    """
    The latency of ``route`` for calls like ``step``'s (``None`` when it has no finished call).

    Finished calls come from the step's input and output bucket. Cut calls and failures have
    no output tokens, so they are taken from the input bucket: the cut calls in the same
    proportion to finished calls as there, and the error and invalid rates from there.

    Memory is bounded by ``sample_size``, not by the store: the counts and rates (calls, cut
    share, error and invalid rates) are exact, counted in SQL; the latencies the simulator
    draws are a seeded sample drawn inside DuckDB (`tailkit.store.group_sample_sql`) of at
    most ``sample_size`` finished calls and as many failures, with the cut calls in their
    measured proportion; all of the bucket's calls when it has no more.

    Args:
        store: An open store.
        route: Provider and model.
        step: The step (its expected tokens pick the bucket).
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        seed: Seed of the sample and of the cut calls' drawn latencies.
        sample_size: Most finished calls (and failures) the sample holds.
        since: Only calls started at or after this instant (a time-zone-aware datetime;
            calls without a start time are left out); ``None``: every call.

    Raises:
        ConfigError: ``sample_size`` is below 2, or ``since`` has no time zone.
    """
    buckets = buckets or Buckets()
    need = _need(route, step, buckets)
    data = fetch(
        store, [need], buckets=buckets, size=_checked(sample_size), seed=seed,
        scope=since_sql(since),
    )  # fmt: skip
    found = data.get(need)
    return None if found is None else _built(found, _bucket_filter(buckets, step)[2], seed)


def _checked(sample_size: int) -> int:
    if sample_size < 2:
        msg = f"sample_size must be at least 2, got {sample_size}"
        raise ConfigError(msg)
    return sample_size


def _built(data: RouteData, label: str, seed: int) -> RouteSample:
    """
    The route sample of one need's data; its calls and cut share are the exact counts.
    """
    counts, total, cut_ages = data.counts, data.total_s, data.cut_s
    sample = RouteSample.from_latencies(
        np.concatenate([total, np.full(cut_ages.size, np.nan)]),
        ttft_s=np.concatenate([data.ttft_s, np.full(cut_ages.size, np.nan)]),
        censored_at_s=np.concatenate([np.full(total.size, np.nan), cut_ages]),
        error_rate=counts.failed / max(counts.attempts, 1),
        error_s=data.error_s,
        invalid_rate=counts.invalid / max(counts.invalid + counts.ok, 1),
        bucket=label,
        seed=seed,
        output_tokens=None
        if data.output_tokens is None
        else np.concatenate([data.output_tokens, np.full(cut_ages.size, np.nan)]),
    )
    cut = counts.keep_cut(counts.bucket)
    calls = counts.bucket + cut
    if calls == sample.calls:
        return sample
    return dataclasses.replace(sample, calls=calls, censored=cut / calls)


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
    since: datetime | None = None,
) -> dict[SampleKey, RouteSample]:
    """
    A sample for every route every step uses (and for candidate routes, where data allow).

    A step's candidate routes (``candidates`` in the plan, `tailkit.config.Step.first_routes`)
    are loaded too: a step that routes live (``live``) may send its first attempt to any of
    them, so each needs its sample like the step's route; for a step that does not, they are
    the routes calibrate chooses among, and a thin one is left out (as ``candidates`` here).

    Steps that use one route in one token bucket share one `RouteSample` (the same object):
    memory follows the routes and buckets, not the steps. Its cut calls' latencies are drawn
    with the seed of the first step (in file order) that uses it, the routes steps use before
    the candidates only calibrate may choose.

    Args:
        store: An open store.
        plan: The workflow.
        buckets: Bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls (finished and cut) a step's routes need.
        candidates: Per step, further routes the calibrator may try; thin ones are left out.
        seed: Seed of the samples and of the cut calls' drawn latencies.
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (each route's
            censoring-aware lognormal fit).
        sample_size: Most finished calls each route's sample holds (see `route_sample`).
        since: Only calls started at or after this instant (a time-zone-aware datetime, such
            as ``datetime.now(timezone.utc) - timedelta(days=7)``: recalibrating on recent
            calls); calls without a start time are left out. ``None``: every call.

    Raises:
        ThinSampleError: A route a step uses has fewer than ``min_calls`` calls in its bucket.
        ConfigError: ``latency`` is not a latency source, or ``since`` has no time zone.
    """
    if latency not in LATENCY_SOURCES:
        msg = f"{{field}} must be one of {', '.join(LATENCY_SOURCES)}, got {latency!r}."
        raise ConfigError(
            msg,
            field="latency",
            value=latency,
            fix=f"Pass {' or '.join(repr(s) for s in LATENCY_SOURCES)}.",
        )
    buckets = buckets or Buckets()
    scope = since_sql(since)
    optional = {  # left out when thin: calibrate's candidates, a fixed step's other routes
        name: {
            *(candidates or {}).get(name, ()),
            *(set(step.first_routes()) - {*step_routes(step)}),
        }
        for name, step in plan.steps.items()
    }
    # the routes the steps use first (they seed the samples they share), then the others
    pairs = {(name, r): step for name, step in plan.steps.items() for r in step_routes(step)}
    for name, step in plan.steps.items():
        for route in (*step.first_routes(), *tuple((candidates or {}).get(name, ()))):
            pairs.setdefault((name, route), step)
    data = fetch(
        store, [_need(plan.routes[r], step, buckets) for (_, r), step in pairs.items()],
        buckets=buckets, size=_checked(sample_size), seed=seed, scope=scope,
    )  # fmt: skip
    out: dict[SampleKey, RouteSample] = {}
    # one sample per route and bucket, however many steps use it: its tables are most of the
    # simulator's memory (`RouteSample`), and the steps draw from the same measured calls
    built: dict[tuple[str, str], RouteSample | None] = {}
    for (name, route), step in pairs.items():
        extra = optional[name]
        label = _bucket_filter(buckets, step)[2]
        shared = (route, label)
        if shared not in built:
            found = data.get(_need(plan.routes[route], step, buckets))
            # seeded by the first step that uses it: a plan whose steps each have a route
            # and bucket of their own draws what it always drew
            key_seed = seed + zlib.crc32(f"{name}/{route}".encode())
            made = None if found is None else _built(found, label, key_seed)
            if made is not None and made.calls >= min_calls and latency == "lognormal":
                made = made.as_lognormal()
            built[shared] = made
        sample = built[shared]
        calls = 0 if sample is None else sample.calls
        if calls >= min_calls and sample is not None:
            out[(name, route)] = sample
        elif route not in extra:
            need = _need(plan.routes[route], step, buckets)
            thin = f"step {name!r}: route {route}"
            message, fix = _refusal(
                store, buckets, need, step, thin=thin, label=label, min_calls=min_calls,
                scope=scope,
            )  # fmt: skip
            raise ThinSampleError(message, field="min_calls", value=min_calls, fix=fix)
    return out


def _refusal(
    store: Store,
    buckets: Buckets,
    need: Need,
    step: Step,
    *,
    thin: str,
    label: str,
    min_calls: int,
    scope: str | None = None,
) -> tuple[str, str]:
    """
    Why a step's route cannot be calibrated on, and the fixes that can help (its last part).

    Counted again here, on the refusal's path only: with fewer than two finished calls the
    route has no sample, and "0 calls" would hide 300 cut or failed ones, for which lowering
    ``min_calls`` cannot help. The message names its parameters as ``{parameter}`` tokens.
    """
    base = calls_with_buckets_sql(buckets, where=within(need.route_sql(), scope))
    counts = _counts(store, base, [need])[need]
    widen = widen_fixes([step])
    if counts.bucket >= 2:
        calls = counts.bucket + counts.keep_cut(counts.bucket)
        failed = (
            f"; {counts.failed} more failed, which give no latency"
            if counts.failed >= calls
            else ""
        )
        fix = f"Ingest more logs for this route, {widen}or lower {{min_calls}}"
        return f"{thin} has {calls} calls in bucket {label} (needs {min_calls}){failed}. {fix}", fix
    if counts.attempts == 0:
        fix = f"Ingest logs for this route, {widen}".rstrip(", ")
        return f"{thin} has no calls in bucket {label}. {fix}", fix
    low, high = store.fetchall(
        f"SELECT min(censored_at_s), max(censored_at_s) FROM ({base}) "
        f"WHERE {CUT} AND {need.sql(output=False)}"
    )[0]
    at = "" if low is None else f"at {low:g} s" if low == high else f"at {low:g}-{high:g} s"
    elsewhere = counts.ok - counts.bucket
    other = counts.attempts - counts.ok - counts.cut - counts.failed - counts.invalid
    parts = [
        (counts.cut, f"{counts.cut} were cut ({at}: their latency is only known to be longer)"),
        (counts.failed, f"{counts.failed} failed (error or rate_limited)"),
        (counts.invalid, f"{counts.invalid} returned invalid output"),
        (elsewhere, f"{elsewhere} finished in other output buckets"),
        (counts.bucket, f"{counts.bucket} finished"),
        (other, f"{other} ended otherwise (timeout or cancelled, without a cut age)"),
    ]
    told = [text for n, text in parts if n > 0]
    if len(told) == 1 and counts.bucket == 0:
        what = f"all {counts.attempts} calls {told[0].split(' ', 1)[1]}"
    else:
        what = f"of its {counts.attempts} call(s), " + ", ".join(told)
    fixes = []
    if counts.cut:
        fixes.append("calls that ran to completion (from a run with a longer timeout, or none)")
    if counts.failed or counts.invalid or other:
        fixes.append("calls that succeeded")
    fix = " or ".join(fixes) or "more calls"
    widen = f", or {widen.rstrip(', ')}" if widen else ""
    fix = f"ingest {fix} for this route{widen}"
    return (
        f"{thin} has fewer than 2 finished calls in bucket {label}, so no latency to "
        f"calibrate on: {what}. Lowering {{min_calls}} cannot help: {fix}"
    ), fix
