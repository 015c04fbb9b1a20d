"""
``since``: calibrate on recent calls only.

A duration counts back from the newest call in the store, not from the clock: a store of
last week's logs calibrated "since 6h" reads the last six hours it holds, and a scheduled
recalibration reads the same window whenever it runs. An instant is taken as given (UTC
when it names no zone). Calls without a start time (``started_at`` is NULL: sources that keep
only durations) cannot be placed in time and are left out.
"""

from __future__ import annotations

import re

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from tailkit.errors import ConfigError


if TYPE_CHECKING:
    from tailkit.store import Store


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*", re.IGNORECASE)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_FIX = "Pass a duration such as 6h, 2d or 90m (back from the newest call), or an ISO-8601 instant"


def parse_since(text: str) -> datetime | timedelta:
    """
    ``6h``, ``2d``, ``90m``, ``45s``, ``1w`` as a duration; else an ISO-8601 instant.

    Args:
        text: What the user wrote.

    Returns:
        A positive `timedelta`, or an aware `datetime` (UTC when ``text`` names no zone).

    Raises:
        ConfigError: Neither a duration nor an instant (field ``since``).
    """
    found = _DURATION.fullmatch(text)
    if found is not None:
        amount = float(found.group(1)) * _UNITS[found.group(2).lower()]
        if amount <= 0:
            msg = f"{{field}} must be a duration above zero, got {text!r}."
            raise ConfigError(msg, field="since", value=text, fix=_FIX + ".")
        return timedelta(seconds=amount)
    try:
        instant = datetime.fromisoformat(text.strip())
    except ValueError:
        msg = f"{{field}} must be a duration or an ISO-8601 instant, got {text!r}."
        raise ConfigError(
            msg, field="since", value=text, fix=_FIX + ", e.g. 2026-12-06T06:00:00Z."
        ) from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def since_instant(store: Store, since: datetime | timedelta) -> datetime:
    """
    The instant from which calls count, checked against the store's newest call.

    Args:
        store: An open store.
        since: An instant (UTC when naive), or a duration back from the newest call.

    Returns:
        An aware instant (UTC).

    Raises:
        ConfigError: The store's calls have no start times, or none started at or after the
            instant (the message names the newest call's time).
    """
    row = store.fetchone("SELECT max(started_at) FROM calls")
    newest: datetime | None = None if row is None else row[0]
    if newest is None:
        msg = (
            "{field} needs calls with a start time (started_at), and the store has none: its "
            "sources keep only durations."
        )
        raise ConfigError(msg, field="since", value=since, fix="Calibrate without {field}.")
    newest = newest.astimezone(UTC)
    if isinstance(since, timedelta):
        if since <= timedelta(0):
            msg = f"{{field}} must be a duration above zero, got {since}."
            raise ConfigError(msg, field="since", value=since, fix=_FIX + ".")
        return newest - since
    instant = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
    instant = instant.astimezone(UTC)
    if instant > newest:
        msg = (
            f"no calls since {_iso(instant)} for {{field}}: the newest call in the store "
            f"started at {_iso(newest)}."
        )
        raise ConfigError(
            msg, field="since", value=since, fix="Pass an earlier instant, or a duration."
        )
    return instant


def _iso(instant: datetime) -> str:
    return instant.isoformat(timespec="seconds").replace("+00:00", "Z")
