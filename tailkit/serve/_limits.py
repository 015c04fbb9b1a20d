"""
What bounds the server's memory and connections whatever its clients send.

A long load test (or a hostile client) must not grow the server: it keeps the last
``keep_records`` records and streams every record to the access log and the callback, counts
statuses as they come, remembers at most ``keep_keys`` idempotency keys (the least recently seen
go first), clips what a client names (a model it does not serve, a key) to `MAX_NAME_CHARS`,
caps concurrent connections, and clamps a deadline further than `MAX_REMAINING_S` away.

What a connection buffers is at most one request (``max_body_bytes``, a head, one 64 KiB read),
and the bodies of all connections together at most ``body_budget_bytes`` (`BodyBudget`; a
body over what is left answers 503 before it is read), so the server's input buffers stay
near that budget plus ``max_connections`` heads; an idle or unread connection is closed
after ``idle_timeout_s``.
"""

from __future__ import annotations

import collections
import hashlib

from dataclasses import dataclass

from tailkit.errors import ConfigError
from tailkit.serve._http import MAX_BODY_BYTES


__all__ = ["MAX_NAME_CHARS", "MAX_REMAINING_S", "BodyBudget", "Limits", "clip", "remember"]

MAX_NAME_CHARS = 256  # a client's model name or key, as logged and remembered
MAX_REMAINING_S = 1e6  # about 11.6 days: any deadline further away is clamped to it
_HASH_CHARS = 32


@dataclass(frozen=True, slots=True)
class Limits:
    """
    The server's bounds (checked when built).

    Args:
        idle_timeout_s: Real seconds a connection may wait for a whole next request (from its
            previous answer, or from connecting) and a write may wait for the client to read;
            ``math.inf``: no limit.
        max_connections: Connections served at once; one more is answered 503 and closed.
            The default carries load tests of a thousand concurrent calls (1,000 executor runs
            with hedges hold about 1,150 connections at their peak).
        max_body_bytes: The largest request body (a larger one answers 413).
        body_budget_bytes: The bytes of request bodies held at once by all connections
            together, from the moment a body's length is known until its request is
            answered; a body that does not fit what is left answers 503 with
            ``Retry-After`` before it is read (one larger than the whole budget: 413).
        keep_records: Records kept in `Server.records` (the most recent ones).
        keep_keys: Idempotency keys remembered to number retries (the most recently seen).
    """

    idle_timeout_s: float = 30.0
    max_connections: int = 2048
    max_body_bytes: int = MAX_BODY_BYTES
    body_budget_bytes: int = 256 * 1024 * 1024
    keep_records: int = 10_000
    keep_keys: int = 100_000

    def __post_init__(self) -> None:
        idle = self.idle_timeout_s
        if isinstance(idle, bool) or not isinstance(idle, int | float) or not idle > 0:
            msg = f"{{field}} must be a number of seconds > 0 (inf: none), got {idle!r}."
            raise ConfigError(
                msg,
                field="idle_timeout_s",
                value=idle,
                fix="Pass seconds above 0, or math.inf for no idle timeout.",
            )
        for name, low in (
            ("max_connections", 1),
            ("max_body_bytes", 1),
            ("body_budget_bytes", 1),
            ("keep_records", 0),
            ("keep_keys", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                msg = f"{{field}} must be a whole number >= {low}, got {value!r}."
                raise ConfigError(msg, field=name, value=value, fix=f"Pass {low} or more.")


class BodyBudget:
    """
    The bytes of request bodies all connections may hold at once, and how many they hold.

    Args:
        total_bytes: The budget.

    Attributes:
        held_bytes: What requests hold now.
    """

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.held_bytes = 0

    def take(self, size: int) -> bool:
        """
        Hold ``size`` more bytes if they fit; whether they did.
        """
        if self.held_bytes + size > self.total_bytes:
            return False
        self.held_bytes += size
        return True

    def give(self, size: int) -> None:
        """
        Give back ``size`` bytes taken before.
        """
        self.held_bytes -= size


def clip(text: str) -> str:
    """
    ``text`` if it is at most `MAX_NAME_CHARS` long, else its start and a hash of the whole.

    Two long names that differ anywhere stay different; what is kept of each is bounded.
    """
    if len(text) <= MAX_NAME_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{text[: MAX_NAME_CHARS - _HASH_CHARS - 2]}…#{digest}"


def remember(seen: collections.Counter[str], key: str, *, keep: int) -> int:
    """
    Count one more arrival of ``key`` in ``seen``; how many came before (0: the first).

    ``seen`` keeps its keys in the order they were last seen and at most ``keep`` of them: a
    key forgotten and seen again counts as new.
    """
    before = seen.pop(key, 0)
    if keep > 0:
        seen[key] = before + 1
        while len(seen) > keep:
            del seen[next(iter(seen))]
    return before
