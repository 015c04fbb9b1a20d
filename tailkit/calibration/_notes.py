"""
What calibrate set on each step beyond its cutoff, and why: one line per step.
"""

from __future__ import annotations

import math

from tailkit.calibration._search import GENERATION_TAIL, Choice
from tailkit.simulation import RouteSample
from tailkit.text import Advice


def cutoff_note(name: str, sample: RouteSample, choice: Choice, *, idempotent: bool) -> str:
    """
    One line: the total cutoff beside a TTFT cutoff and the stall cutoff, set or not, and why.

    An `Advice`: where it advises a parameter, the CLI renders it as a flag.
    """
    return Advice(f"step {name!r}: {_total(sample, choice)}; {_stall(sample, choice, idempotent)}")


def _total(sample: RouteSample, choice: Choice) -> str:
    if choice.action == "wait" or choice.signal != "ttft":
        return "no TTFT cutoff, so no total cutoff beside one"
    tail = sample.generation_tail()
    said = f"its generation's p99 is {tail:.1f}x its median"
    if math.isfinite(choice.total_cutoff_s):
        q = choice.total_quantile or 0.0
        return (
            f"total cutoff {choice.total_cutoff_s:.3g} s (p{q * 100:g}) beside its TTFT cutoff, "
            f"as {said}"
        )
    if not math.isfinite(tail) or tail < GENERATION_TAIL:
        return f"no total cutoff beside its TTFT cutoff ({said}: no heavy tail)"
    return f"no total cutoff beside its TTFT cutoff ({said}, but none scored better)"


def _stall(sample: RouteSample, choice: Choice, idempotent: bool) -> str:
    stalls = sample.stalls
    if stalls is None:
        return "stall cutoff: the calls cannot tell (no time to first token); none set"
    if not stalls.measured or stalls.cutoff_s is None:
        return f"{stalls.reason}; no stall cutoff"
    if math.isfinite(choice.stall_cutoff_s):
        return (
            f"stall cutoff {choice.stall_cutoff_s:g} s: {stalls.reason}. The prediction counts "
            f"it: where a stall passes the cutoff (taken half-way through the stream's normal "
            f"generation) the step's {choice.action} starts an attempt, counted among its extra "
            "attempts (the record does not say where a stall sits: the intervals span first "
            "token to end; a stream slow throughout looks the same as a stalled one)"
        )
    if sample.gap_s is None:
        why = "a fitted lognormal has no calls to cut (resample the calls: {latency} 'empirical')"
    elif not idempotent:
        why = "the step is not idempotent, so a stall could start nothing"
    else:
        why = "it did not make the plan better within the budget"
    return f"{stalls.reason}; no stall cutoff: {why}"
