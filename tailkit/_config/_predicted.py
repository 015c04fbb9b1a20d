"""
Read the calibrated records of a plan: each ``predicted`` (with its intervals) and ``basis``.

Every value is checked like the rest of the plan; an interval must hold its own estimate, so a
hand edit that moves one without the other is caught.
"""

from __future__ import annotations

from collections.abc import Callable

from tailkit._config import _fields as conv
from tailkit._config._fields import Fields, Invalid, record
from tailkit._config._model import (
    Basis,
    Bounds,
    PlanInterval,
    PlanPrediction,
    Shared,
    StepInterval,
    StepPrediction,
)
from tailkit._config._report import format_float


def read_step_prediction(f: Fields) -> StepPrediction:
    """
    A step's ``predicted``: p50_s, p99_s, hedge_rate and, optionally, their interval.
    """
    p50_s, p99_s = _p50_p99(f)
    hedge_rate = f.need("hedge_rate", conv.share, 0.0, "add hedge_rate (a share in [0, 1])")
    interval = record(f, "interval", _step_interval, StepInterval)
    if interval is not None:
        _check_inside(f, interval, {"p50_s": p50_s, "p99_s": p99_s, "hedge_rate": hedge_rate})
    return StepPrediction(p50_s=p50_s, p99_s=p99_s, hedge_rate=hedge_rate, interval=interval)


def read_plan_prediction(f: Fields) -> PlanPrediction:
    """
    The plan's ``predicted``: p50_s, p99_s, miss_rate, extra_attempts, optional interval.
    """
    p50_s, p99_s = _p50_p99(f)
    miss_rate = f.need("miss_rate", conv.share, 0.0, "add miss_rate (a share in [0, 1])")
    extra = f.need("extra_attempts", conv.ratio, 0.0, "add extra_attempts (>= 0)")
    interval = record(f, "interval", _plan_interval, PlanInterval)
    if interval is not None:
        estimates = {"p50_s": p50_s, "p99_s": p99_s, "miss_rate": miss_rate,
                     "extra_attempts": extra}  # fmt: skip
        _check_inside(f, interval, estimates)
    return PlanPrediction(
        p50_s=p50_s, p99_s=p99_s, miss_rate=miss_rate, extra_attempts=extra, interval=interval
    )


# What each interval holds: seconds (.inf allowed), shares, or ratios.
_UNITS: dict[str, tuple[Callable[[object], float], str]] = {
    "p50_s": (conv.duration, "seconds"),
    "p99_s": (conv.duration, "seconds"),
    "hedge_rate": (conv.share, "shares"),
    "miss_rate": (conv.share, "shares"),
    "extra_attempts": (conv.ratio, "ratios"),
}
_NO_BOUNDS: Bounds = (0.0, 0.0)


def _bounds(key: str) -> Callable[[object], Bounds]:
    convert, unit = _UNITS[key]

    def read(value: object) -> Bounds:
        if not isinstance(value, list) or len(value) != 2:
            msg = f"must be [low, high], two {unit}"
            raise Invalid(msg)
        try:
            low, high = convert(value[0]), convert(value[1])
        except Invalid as exc:
            msg = f"must be [low, high], each {exc.must.removeprefix('must be ')}"
            raise Invalid(msg) from None
        if low > high:
            msg = "must be [low, high] with low <= high"
            raise Invalid(msg, "swap them")
        return low, high

    return read


def _level(value: object) -> float:
    if isinstance(value, float | int) and not isinstance(value, bool) and 0 < value < 1:
        return float(value)
    msg = "must be the intervals' coverage, between 0 and 1 (e.g. 0.95)"
    raise Invalid(msg)


def _interval_fields(f: Fields, keys: tuple[str, ...]) -> dict[str, Bounds]:
    return {key: f.need(key, _bounds(key), _NO_BOUNDS, f"add {key} ([low, high])") for key in keys}


def _step_interval(f: Fields) -> StepInterval:
    level = f.need("level", _level, 0.95, "add level (the coverage, e.g. 0.95)")
    b = _interval_fields(f, ("p50_s", "p99_s", "hedge_rate"))
    return StepInterval(level=level, p50_s=b["p50_s"], p99_s=b["p99_s"], hedge_rate=b["hedge_rate"])


def _plan_interval(f: Fields) -> PlanInterval:
    level = f.need("level", _level, 0.95, "add level (the coverage, e.g. 0.95)")
    b = _interval_fields(f, ("p50_s", "p99_s", "miss_rate", "extra_attempts"))
    return PlanInterval(
        level=level, p50_s=b["p50_s"], p99_s=b["p99_s"], miss_rate=b["miss_rate"],
        extra_attempts=b["extra_attempts"],
    )  # fmt: skip


def _check_inside(
    f: Fields, interval: PlanInterval | StepInterval, estimates: dict[str, float]
) -> None:
    # An interval that leaves out its own estimate was edited by hand, or belongs elsewhere.
    raw = f.raw.get("interval")
    if "interval" in f.failed or not isinstance(raw, dict):
        return
    for key, value in estimates.items():
        low, high = getattr(interval, key)
        if f.ok(key) and not low <= value <= high:
            shown = format_float(value)
            f.report.add(
                (*f.path, "interval", key),
                f"must contain {key} ({shown}): write [low, high] with low <= {shown} <= high, "
                "or run tailkit calibrate again to write both",
                value=raw.get(key),
            )


def _p50_p99(f: Fields) -> tuple[float, float]:
    p50_s = f.need("p50_s", conv.duration, 0.0, "add p50_s (seconds)")
    p99_s = f.need("p99_s", conv.duration, 0.0, "add p99_s (seconds)")
    if f.ok("p50_s", "p99_s") and p99_s < p50_s:
        f.problem("p99_s", f"must be at least p50_s ({format_float(p50_s)})")
    return p50_s, p99_s


def read_basis(f: Fields) -> Basis:
    """
    A step's ``basis``: the sample it was calibrated on.
    """
    return Basis(
        calls=f.need("calls", conv.count, 0, "add calls (the sample size)"),
        bucket=f.need("bucket", conv.text, "", "add bucket (e.g. 'in 4k-16k / out 600-1200')"),
        quantile=f.need("quantile", conv.optional(conv.share), None, "add quantile (or null)"),
        censored=f.need("censored", conv.share, 0.0, "add censored (a share in [0, 1])"),
        shared=record(f, "shared", _shared, Shared),
        route_choice=f.get("route_choice", conv.optional(conv.text), None),
    )


def _shared(f: Fields) -> Shared:
    fix = "a correlation in [0, 1)"
    other = f.need("other_provider", conv.share, 0.0, f"add other_provider ({fix})")
    same = f.need("same_provider", conv.share, 0.0, f"add same_provider ({fix})")
    for key, value in (("other_provider", other), ("same_provider", same)):
        if f.ok(key) and value >= 1.0:
            f.problem(key, f"must be below 1 ({fix}): 1 would make every repeat the same call")
    return Shared(
        other_provider=other,
        same_provider=same,
        source=f.get("source", conv.text, ""),
        evidence=f.get("evidence", conv.text, ""),
        pairs=f.get("pairs", conv.count, 0),
    )
