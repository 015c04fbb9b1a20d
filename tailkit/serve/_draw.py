"""
What one request will do, drawn on receipt; and the tokens-per-minute bucket.

Each request for a served model takes the same thirteen draws from the server's one
generator, in arrival order, whatever its model or outcome: seven fault shares, the stall,
three normal deviates (TTFT, decode speed, output length), the 5xx status and the point where
a broken stream stops. So the same seed and the same requests in the same order give the same
behaviour, and changing one model's profile does not reshuffle what the other models' requests
draw.
"""

from __future__ import annotations

import math
import random

from dataclasses import dataclass

from tailkit.serve._outcomes import Outcomes
from tailkit.serve._profile import FAULT_NAMES, ModelProfile


__all__ = ["LONG_OUTPUT_TOKENS", "Draw", "TokenBucket", "draw"]

LONG_OUTPUT_TOKENS = 600  # where "long" calls begin: their stalls are in decode
OUTPUT_SIGMA = 0.3  # log-scale spread of the output length
ERROR_STATUSES = (500, 502, 503)


@dataclass(frozen=True, slots=True)
class Draw:
    """
    One request's behaviour, in real seconds (time scaling applied).

    Args:
        fault: The fault it shows (a `FAULT_NAMES` entry), ``None`` for a good answer.
        stalled: It is one of the stalled requests (``stall_share``).
        ttft_s: Real seconds from receipt to the first content token.
        gen_s: Real seconds from the first token to the last (all ``tokens``).
        tokens: Completion tokens (at least 1, at most the request's ``max_tokens``).
        finish_reason: ``stop``, or ``length`` when ``max_tokens`` cut the answer.
        error_status: The status of an ``error_5xx`` fault: 500, 502 or 503.
        cut_after: Tokens sent before a ``stall_mid`` or ``cut_stream`` stops (1 … tokens).
        invalid: The answer is well-formed but its text fails validation (replayed outcomes).
        intended_ttft_s: Real seconds from receipt to the first token the draw intends, as
            the client should see it (what a replay's timing error is measured against).
        intended_total_s: The same for the end.
        pause_after: Tokens sent before the stream pauses (replayed outcomes that stalled:
            the chunks from this token on are due ``pause_s`` later); 0: no pause.
        pause_s: Real seconds of the pause, part of ``gen_s`` (the rest of the generation is
            sent at an even pace).
    """

    fault: str | None
    stalled: bool
    ttft_s: float
    gen_s: float
    tokens: int
    finish_reason: str
    error_status: int
    cut_after: int
    invalid: bool = False
    intended_ttft_s: float | None = None
    intended_total_s: float | None = None
    pause_after: int = 0
    pause_s: float = 0.0


def draw(
    rng: random.Random,
    profile: ModelProfile,
    *,
    time_scale: float,
    max_tokens: int | None,
    entry: int | None = None,
) -> Draw:
    """
    Draw one request's behaviour from ``profile`` (thirteen draws from ``rng``, always).

    Args:
        rng: The server's generator.
        profile: The requested model's profile.
        time_scale: Real seconds per profile second.
        max_tokens: The request's cap on completion tokens, ``None`` for none.
        entry: Replayed outcomes only: the entry chosen already (an aligned table's row, see
            `tailkit.serve._jobs`; no further draw); ``None``: one drawn by the table's counts.
    """
    if profile.outcomes is not None:
        return _replayed(
            rng, profile.outcomes, time_scale=time_scale, max_tokens=max_tokens, entry=entry
        )
    hits = [rng.random() < share for _, share in profile.faults.shares()]
    fault = next((name for name, hit in zip(FAULT_NAMES, hits, strict=True) if hit), None)
    stalled = rng.random() < profile.stall_share
    ttft = profile.ttft_median_s * math.exp(profile.ttft_sigma * rng.gauss(0.0, 1.0))
    speed = profile.tokens_per_s * math.exp(profile.gen_sigma * rng.gauss(0.0, 1.0))
    tokens = max(1, round(profile.output_tokens * math.exp(OUTPUT_SIGMA * rng.gauss(0.0, 1.0))))
    error_status = ERROR_STATUSES[min(int(rng.random() * len(ERROR_STATUSES)), 2)]
    cut_at = rng.random()
    finish_reason = "stop"
    if max_tokens is not None and tokens > max_tokens:
        tokens, finish_reason = max_tokens, "length"
    # A broken stream stops after 1 … tokens - 1 tokens (after its only token when it has one).
    cut_after = min(1 + int(cut_at * max(tokens - 1, 1)), tokens)
    if stalled and tokens >= LONG_OUTPUT_TOKENS:
        speed /= profile.stall_factor
    elif stalled:
        ttft *= profile.stall_factor
    return Draw(
        fault=fault,
        stalled=stalled,
        ttft_s=ttft * time_scale,
        gen_s=tokens / speed * time_scale,
        tokens=tokens,
        finish_reason=finish_reason,
        error_status=error_status,
        cut_after=cut_after,
    )


def _replayed(
    rng: random.Random,
    table: Outcomes,
    *,
    time_scale: float,
    max_tokens: int | None,
    entry: int | None = None,
) -> Draw:
    """
    One measured outcome, drawn uniformly (one draw from ``rng``), on its own schedule.
    """
    i = table.pick(rng) if entry is None else entry
    kind = table.kinds[i]
    first, end = table.ttft_s[i] * time_scale, table.total_s[i] * time_scale
    # sent early by the lead, so that the client's code sees them at the intended times
    ttft, total = max(first - table.lead_s, 0.0), max(end - table.lead_s, 0.0)
    tokens, finish_reason = table.output_tokens, "stop"
    if max_tokens is not None and tokens > max_tokens:
        tokens, finish_reason = max_tokens, "length"
    failed = kind == "e"
    pause_after, pause = 0, 0.0
    if table.pause_s is not None and table.pause_at_s is not None and not failed:
        gap = table.pause_s[i]
        normal = table.total_s[i] - table.ttft_s[i] - gap  # the generation less the pause
        if gap > 0.0 and tokens > 1 and normal > 0.0:
            # the tokens due by the last chunk before the stall, at the even pace of the rest
            share = (table.pause_at_s[i] - table.ttft_s[i]) / normal
            pause_after = min(max(round(share * tokens), 0), tokens - 2) + 1
            pause = gap * time_scale
    return Draw(
        fault="error_5xx" if failed else None,
        stalled=False,
        ttft_s=ttft,
        gen_s=0.0 if failed else total - ttft,
        tokens=tokens,
        finish_reason=finish_reason,
        error_status=ERROR_STATUSES[0],
        cut_after=tokens,
        invalid=kind == "i",
        intended_ttft_s=first,
        intended_total_s=first if failed else end,
        pause_after=pause_after,
        pause_s=pause,
    )


class TokenBucket:
    """
    A tokens-per-minute limit that refills continuously, in profile time.

    Full at the start; it refills ``tokens_per_minute / 60`` tokens per profile second, that is
    per ``time_scale`` real seconds. A request larger than the whole bucket is admitted when
    the bucket is full (and empties it), so every request can pass eventually.

    Args:
        tokens_per_minute: The limit, in tokens per minute of profile time.
        time_scale: Real seconds per profile second.
        now: The loop clock now (real seconds).
    """

    def __init__(self, tokens_per_minute: int, *, time_scale: float, now: float) -> None:
        self.capacity = float(tokens_per_minute)
        self.level = self.capacity
        self.rate_per_s = tokens_per_minute / 60.0 / time_scale  # tokens per real second
        self._updated = now

    def take(self, tokens: int, now: float) -> float:
        """
        Take ``tokens`` if the bucket holds them.

        Args:
            tokens: The request's tokens (prompt and completion).
            now: The loop clock now (real seconds).

        Returns:
            0.0 when admitted (the tokens are taken); else the real seconds until the bucket
            will hold them (nothing is taken).
        """
        self.level = min(self.capacity, self.level + (now - self._updated) * self.rate_per_s)
        self._updated = now
        need = min(float(tokens), self.capacity)
        if self.level >= need:
            self.level -= need
            return 0.0
        return (need - self.level) / self.rate_per_s
