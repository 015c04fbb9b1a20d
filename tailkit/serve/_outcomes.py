"""
Measured outcomes to replay, one drawn per request: the empirical twin of a `ModelProfile`.

A parametric profile draws a lognormal TTFT and decode speed. A replay must serve exactly what
the simulator draws from instead: the route's measured calls in a step's token bucket, with
their time to first token, their total, their failures and their invalid outputs. `Outcomes`
holds that table; each request picks one entry uniformly (one draw from the server's
generator) and is answered on its schedule: the first content token at its TTFT, the rest
spread evenly until its total (a call that stalled mid-stream, silent for its gap where it
stalled: ``pause_s``), an error at its failure time, or a whole answer whose text carries
`INVALID_MARK` when the measured call's output failed validation.

Repeat attempts do the same job, so the tables of one step's routes can be *aligned*: they
share a ``group`` and a number of rows, row ``j`` being job ``j`` (its measured call on each
route, or a call of the same size). A request's ``Idempotency-Key`` is shared by a call's first
attempt and all its hedges, retries, downgrades and upgrades: the first request with a key
draws a row, and every later request with that key on a model of the group gets that row's
entry (a repeat on the same model gets the entry's ``repeats`` instead: another call of the
same job, size and moment). See `tailkit.serve._jobs`.

A replay writes the tables as JSON (`dump_outcomes`) and serves them from a server process of
its own, which reads them back (`load_outcomes`, through `tailkit.serve.serve_outcomes`).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import random

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailkit.errors import ConfigError


__all__ = [
    "INVALID_MARK",
    "KINDS",
    "OUTCOMES_VERSION",
    "Outcomes",
    "check_groups",
    "dump_outcomes",
    "load_outcomes",
]

INVALID_MARK = "[tailkit-replay: invalid output]"
"""The text an answer starts with when its measured call's output failed validation."""

KINDS = {"o": "ok", "e": "error", "i": "invalid"}
"""One letter per outcome: a good answer, a failure (HTTP 5xx at its time), invalid output."""

OUTCOMES_VERSION = 1


@dataclass(frozen=True, slots=True, eq=False)
class Outcomes:
    """
    A table of measured outcomes; a request is answered as one entry, drawn by weight.

    Args:
        ttft_s: Profile seconds from receipt to the first content token, per entry (for a
            failure: when it fails).
        total_s: Profile seconds from receipt to the last token (``>= ttft_s``), per entry.
        kinds: One letter per entry, from `KINDS`.
        output_tokens: Tokens in each answer (at least 1; a request's ``max_tokens`` caps it).
        counts: How many table slots each entry fills (its weight; ``None``: one each). A
            simulator's 65,536-slot table repeats each measured call over neighbouring
            slots, so it is stored once with its count.
        lead_s: Real seconds to send everything early, to make up for the time the answer
            then takes to reach the client's code (measured by the replay; 0: none). The
            access log's intended times are without it.
        group: The aligned tables this one belongs to (one step's routes; ``None``: none,
            every request draws an entry by ``counts``). A key seen on any model of the
            group keeps the row it drew.
        rows: With ``group``: the entry of each row (row ``j`` is job ``j``); a request
            that brings no key seen before draws a row uniformly.
        repeats: With ``group``: per entry, the entry a repeat on this same model gets (a
            retry: another call of the same job, size and moment); ``None``: the same entry.
        pause_s: Per entry, the profile seconds its stream stalls mid-way (0: it does not);
            ``None``: no entry stalls. A streamed answer is then sent at an even pace over
            its generation less the pause, silent for the pause after its chunk due at
            ``pause_at_s`` (the measured call's stall, so that a stall cutoff fires on it
            as on the provider's stream); ``total_s`` includes the pause.
        pause_at_s: With ``pause_s``: per entry, profile seconds from receipt to the last
            chunk before the pause (between ``ttft_s`` and ``total_s - pause_s``).

    Raises:
        ConfigError: The columns differ in length, are empty, hold a negative, NaN or
            infinite time, a total before its TTFT, an unknown kind, or a count below 1;
            ``group`` and ``rows`` do not come together, or a row or repeat is no entry;
            ``pause_s`` and ``pause_at_s`` do not come together, or a pause does not fit its
            entry's generation.
    """

    ttft_s: tuple[float, ...]
    total_s: tuple[float, ...]
    kinds: str
    output_tokens: int = 200
    counts: tuple[int, ...] | None = None
    lead_s: float = 0.0
    group: str | None = None
    rows: tuple[int, ...] | None = None
    repeats: tuple[int, ...] | None = None
    pause_s: tuple[float, ...] | None = None
    pause_at_s: tuple[float, ...] | None = None
    _ends: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.total_s)
        weights = self.counts if self.counts is not None else (1,) * n
        if n == 0 or len(self.ttft_s) != n or len(self.kinds) != n or len(weights) != n:
            msg = (
                f"outcomes need ttft_s, total_s, kinds (and counts) of one equal, non-zero "
                f"length, got {len(self.ttft_s)}, {n}, {len(self.kinds)} and {len(weights)}"
            )
            raise ConfigError(msg)
        if not (isinstance(self.lead_s, int | float) and 0.0 <= self.lead_s < math.inf):
            msg = f"{{field}} must be 0 or more real seconds, got {self.lead_s!r}"
            raise ConfigError(msg, field="lead_s", value=self.lead_s)
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in weights):
            msg = "outcome counts must be whole numbers >= 1 (slots per entry)"
            raise ConfigError(msg)
        object.__setattr__(self, "_ends", tuple(itertools.accumulate(weights)))
        bad = set(self.kinds) - set(KINDS)
        if bad:
            msg = f"outcome kinds are o (ok), e (error) or i (invalid), got {sorted(bad)}"
            raise ConfigError(msg)
        for i, (first, total) in enumerate(zip(self.ttft_s, self.total_s, strict=True)):
            if not (0.0 <= first <= total < math.inf):
                msg = (
                    f"outcome {i}: need 0 <= ttft_s <= total_s < inf (profile seconds), got "
                    f"ttft_s={first!r}, total_s={total!r}"
                )
                raise ConfigError(msg)
        if isinstance(self.output_tokens, bool) or not isinstance(self.output_tokens, int):
            msg = f"{{field}} must be a whole number >= 1, got {self.output_tokens!r}"
            raise ConfigError(msg, field="output_tokens", value=self.output_tokens)
        if self.output_tokens < 1:
            msg = f"{{field}} must be a whole number >= 1, got {self.output_tokens!r}"
            raise ConfigError(msg, field="output_tokens", value=self.output_tokens)
        self._check_alignment(n)
        self._check_pauses(n)

    def _check_pauses(self, n: int) -> None:
        if (self.pause_s is None) != (self.pause_at_s is None):
            msg = (
                "paused outcomes need both pause_s and pause_at_s (one each per entry), or neither"
            )
            raise ConfigError(msg)
        if self.pause_s is None or self.pause_at_s is None:
            return
        if len(self.pause_s) != n or len(self.pause_at_s) != n:
            msg = f"pause_s and pause_at_s must hold one value per outcome ({n})"
            raise ConfigError(msg)
        for i, (gap, at) in enumerate(zip(self.pause_s, self.pause_at_s, strict=True)):
            if gap == 0.0:
                continue
            first, total = self.ttft_s[i], self.total_s[i]
            # a pause fits its entry: after the first token, its generation resumed before
            # the end (to a microsecond: the file keeps six decimals)
            if not (0.0 < gap < math.inf and first - 1e-6 <= at <= total - gap + 1e-6):
                msg = (
                    f"outcome {i}: a pause needs 0 < pause_s and ttft_s <= pause_at_s <= "
                    f"total_s - pause_s, got pause_s={gap!r}, pause_at_s={at!r} "
                    f"(ttft_s={first!r}, total_s={total!r})"
                )
                raise ConfigError(msg)

    def _check_alignment(self, n: int) -> None:
        if (self.group is None) != (self.rows is None):
            msg = "aligned outcomes need both a group and rows (one entry per job), or neither"
            raise ConfigError(msg)
        if self.group is not None and (not isinstance(self.group, str) or not self.group):
            msg = f"an outcome table's group must be a non-empty string, got {self.group!r}"
            raise ConfigError(msg)
        if self.repeats is not None and self.rows is None:
            msg = "repeats need aligned rows (a group and its rows)"
            raise ConfigError(msg)
        for name, values, size in (("rows", self.rows, None), ("repeats", self.repeats, n)):
            if values is None:
                continue
            if size is not None and len(values) != size:
                msg = f"{name} must hold one entry per outcome ({size}), got {len(values)}"
                raise ConfigError(msg)
            if not values or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in values
            ):
                msg = f"{name} must be a non-empty list of entry numbers in 0 … {n - 1}"
                raise ConfigError(msg)

    @property
    def slots(self) -> int:
        """
        Table slots: the sum of the counts.
        """
        return self._ends[-1]

    def pick(self, rng: random.Random) -> int:
        """
        The entry a request gets: one uniform slot from one draw of ``rng``.
        """
        slot = min(int(rng.random() * self.slots), self.slots - 1)
        return bisect.bisect_right(self._ends, slot)

    def row_of(self, u: float) -> int:
        """
        The row a uniform ``u`` in [0, 1) picks among the aligned rows (each row equally).
        """
        n = len(self.rows or ())
        return min(int(u * n), n - 1)


def check_groups(tables: Mapping[str, Outcomes]) -> None:
    """
    Check that the aligned tables of each group have one number of rows.

    Raises:
        ConfigError: Two models of one group have different numbers of rows.
    """
    sizes: dict[str, tuple[str, int]] = {}
    for name, table in tables.items():
        if table.group is None or table.rows is None:
            continue
        first = sizes.setdefault(table.group, (name, len(table.rows)))
        if first[1] != len(table.rows):
            msg = (
                f"models {first[0]!r} and {name!r} of group {table.group!r} have "
                f"{first[1]} and {len(table.rows)} rows: aligned tables need one row per job each"
            )
            raise ConfigError(msg)


def dump_outcomes(
    models: Mapping[str, tuple[Outcomes, int]],
    *,
    time_scale: float,
    seed: int,
    lead_s: float = 0.0,
) -> str:
    """
    The JSON document `load_outcomes` reads.

    Args:
        models: Model id -> (its outcomes, tokens per streamed chunk).
        time_scale: Real seconds per profile second.
        seed: The server's seed.
        lead_s: Real seconds every answer is sent early (see `Outcomes.lead_s`).
    """
    document = {
        "tailkit_outcomes": OUTCOMES_VERSION,
        "time_scale": time_scale,
        "seed": seed,
        "lead_s": lead_s,
        "models": {
            name: {
                "output_tokens": table.output_tokens,
                "chunk_tokens": chunk_tokens,
                "kinds": table.kinds,
                "ttft_s": [round(v, 6) for v in table.ttft_s],
                "total_s": [round(v, 6) for v in table.total_s],
                "counts": list(table.counts or (1,) * len(table.kinds)),
                **_aligned(table),
                **_paused(table),
            }
            for name, (table, chunk_tokens) in models.items()
        },
    }
    return json.dumps(document, separators=(",", ":"))


def _aligned(table: Outcomes) -> dict[str, Any]:
    """
    An aligned table's group, rows and repeats as the file keeps them (nothing for others).
    """
    if table.group is None:
        return {}
    out: dict[str, Any] = {"group": table.group, "rows": list(table.rows or ())}
    if table.repeats is not None:
        out["repeats"] = list(table.repeats)
    return out


def _paused(table: Outcomes) -> dict[str, Any]:
    """
    A table's pauses as the file keeps them (nothing for a table whose streams never stall).
    """
    if table.pause_s is None or table.pause_at_s is None:
        return {}
    return {
        "pause_s": [round(v, 6) for v in table.pause_s],
        "pause_at_s": [round(v, 6) for v in table.pause_at_s],
    }


def _floats(where: str, value: object) -> tuple[float, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        msg = f"{where} must be a list of seconds, got {type(value).__name__}"
        raise ConfigError(msg)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int | float):
            msg = f"{where}[{i}] must be a number of seconds, got {item!r}"
            raise ConfigError(msg)
        out.append(float(item))
    return tuple(out)


def _optional_floats(where: str, value: object) -> tuple[float, ...] | None:
    return None if value is None else _floats(where, value)


def read_json(source: str, what: str, fix: str) -> Any:
    """
    A JSON file's document, or a `ConfigError` naming the file, what it should be, and the fix.
    """
    try:
        with open(source, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        msg = f"{source}: no such {what} file; {fix}"
        raise ConfigError(msg) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{source}: cannot read it as JSON ({exc}); {fix}"
        raise ConfigError(msg) from None


def _counts(where: str, value: object, what: str = "slots per entry") -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in value
    ):
        msg = f"{where} must be a list of whole numbers ({what})"
        raise ConfigError(msg)
    return tuple(value)


def load_outcomes(
    path: str | os.PathLike[str],
) -> tuple[dict[str, tuple[Outcomes, int]], float, int]:
    """
    Read an outcomes file written by `dump_outcomes`.

    Returns:
        Model id -> (outcomes, tokens per streamed chunk); the time scale; the seed.

    Raises:
        ConfigError: The file cannot be read, is not an outcomes document, or a model's
            table is malformed; the message names the file and the model.
    """
    source = os.fspath(path)
    document = read_json(source, "outcomes", "a replay with an output folder writes one there")
    if not isinstance(document, dict) or document.get("tailkit_outcomes") != OUTCOMES_VERSION:
        msg = f"{source}: not a tailkit outcomes file (no 'tailkit_outcomes: 1' key)"
        raise ConfigError(msg)
    raw_models = document.get("models")
    if not isinstance(raw_models, dict) or not raw_models:
        msg = f"{source}: 'models' must map model ids to outcome tables, at least one"
        raise ConfigError(msg)
    models: dict[str, tuple[Outcomes, int]] = {}
    for name, raw in raw_models.items():
        where = f"{source}: models.{name}"
        if not isinstance(raw, dict):
            msg = f"{where} must be a mapping with ttft_s, total_s and kinds"
            raise ConfigError(msg)
        try:
            table = Outcomes(
                ttft_s=_floats(f"{where}.ttft_s", raw.get("ttft_s")),
                total_s=_floats(f"{where}.total_s", raw.get("total_s")),
                kinds=str(raw.get("kinds", "")),
                output_tokens=raw.get("output_tokens", 200),
                counts=_counts(f"{where}.counts", raw.get("counts")),
                lead_s=document.get("lead_s", 0.0),
                group=raw.get("group"),
                rows=_counts(f"{where}.rows", raw.get("rows"), "an entry per job"),
                repeats=_counts(f"{where}.repeats", raw.get("repeats"), "an entry per entry"),
                pause_s=_optional_floats(f"{where}.pause_s", raw.get("pause_s")),
                pause_at_s=_optional_floats(f"{where}.pause_at_s", raw.get("pause_at_s")),
            )
        except ConfigError as exc:
            msg = f"{where}: {exc}"
            raise ConfigError(msg) from None
        chunk_tokens = raw.get("chunk_tokens", 1)
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            msg = f"{where}.chunk_tokens must be a whole number >= 1, got {chunk_tokens!r}"
            raise ConfigError(msg)
        models[str(name)] = (table, chunk_tokens)
    try:
        check_groups({name: table for name, (table, _) in models.items()})
    except ConfigError as exc:
        msg = f"{source}: {exc}"
        raise ConfigError(msg) from None
    scale, seed = document.get("time_scale", 1.0), document.get("seed", 0)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0:
        msg = f"{source}: time_scale must be a positive number, got {scale!r}"
        raise ConfigError(msg)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        msg = f"{source}: seed must be a whole number >= 0, got {seed!r}"
        raise ConfigError(msg)
    return models, float(scale), seed
