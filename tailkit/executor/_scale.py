"""
A time-scaled rehearsal's ledger, written back in the plan's (profile) seconds.

An executor built with ``time_scale=0.01`` runs its plan 100 times faster, against a server
that answers 100 times faster (``ServeConfig(time_scale=0.01)``). What it measures is in
real seconds; its ledger is not. Each duration is divided by the time scale, and each instant
moves to the same distance from the executor's start (the *origin*, which stays put) divided
by the time scale, so a rehearsal's ledger reads like a production one: ingesting it
(``format="trace"``) and checking a plan against it take it as they take any ledger.
"""

from __future__ import annotations

import dataclasses
import math

from datetime import datetime

from tailkit.errors import ConfigError
from tailkit.ledger import AttemptRecord


__all__ = ["MAX_TIME_SCALE", "check_time_scale", "profile_record"]

MAX_TIME_SCALE = 10.0
"""The slowest rehearsal: 10 real seconds per profile second."""


def check_time_scale(time_scale: float) -> float:
    """
    The time scale as a float, once it is in (0, `MAX_TIME_SCALE`].

    Args:
        time_scale: Real seconds per profile second.

    Raises:
        ConfigError: It is not a number in (0, 10], naming the value and what it means.
    """
    number = isinstance(time_scale, int | float) and not isinstance(time_scale, bool)
    if not (number and math.isfinite(time_scale) and 0.0 < time_scale <= MAX_TIME_SCALE):
        msg = (
            f"{{field}} must be in (0, {MAX_TIME_SCALE:g}] real seconds per plan second, got "
            f"{time_scale!r}:"
        )
        fix = (
            "use the time scale of the server you rehearse against (0.01 for a server 100 times "
            "faster), or 1 against a real provider"
        )
        raise ConfigError(msg, field="time_scale", value=time_scale, fix=fix)
    return float(time_scale)


def profile_record(record: AttemptRecord, time_scale: float, origin: datetime) -> AttemptRecord:
    """
    An attempt measured in real seconds, in profile seconds.

    Args:
        record: The attempt as the executor measured it.
        time_scale: Real seconds per profile second.
        origin: The instant that stays put (the executor's start); every other instant moves
            to ``origin + (instant - origin) / time_scale``.

    Returns:
        A new record: ``ttft_s``, ``total_s`` and ``censored_at_s`` divided by the time scale,
        ``started_at`` and ``deadline_at`` moved; every other field as it was.
    """

    def back(value: float | None) -> float | None:
        return None if value is None else value / time_scale

    def moved(value: datetime) -> datetime | None:
        try:
            return origin + (value - origin) / time_scale
        except OverflowError:  # a deadline decades away, in plan seconds: past year 9999
            return None

    return dataclasses.replace(
        record,
        ttft_s=back(record.ttft_s),
        total_s=back(record.total_s),
        censored_at_s=back(record.censored_at_s),
        started_at=moved(record.started_at) or record.started_at,
        deadline_at=None if record.deadline_at is None else moved(record.deadline_at),
        attrs=dict(record.attrs),
    )
