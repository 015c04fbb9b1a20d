"""
A serve profile from measured latency: replay a stats table on loopback.

The stats table by provider and model without token buckets (``tailkit.stats(store,
bucket=())``, or the stats command's JSON) describes each route with quantiles of its total
latency and of its time to first token. Each route becomes a model whose requests
draw from those quantiles (see `tailkit.serve._grid`):

- the model id is ``provider/model`` (or ``model`` when the table is grouped by model alone);
- the total latency runs through the row's ``p50_s``, ``p90_s``, ``p95_s`` and ``p99_s`` (and
  any other ``pNN_s`` column; an unbounded one, ``inf`` where cut calls hide it, is left out),
  spread below the lowest as the lognormal ``sigma`` says and past the highest as its last
  segment goes on, no steeper than the curve's average;
- the TTFT runs through ``ttft_p50_s`` and ``ttft_p99_s`` (and any other ``ttft_pNN_s``), at
  the same probability as the total and never after it (unknown TTFT, from non-streamed logs:
  10 % of the total);
- the answer's length is ``gen_p50_s * tokens_per_s_p50`` tokens (else 200), spread evenly
  between the TTFT and the total;
- a table split by token bucket gives each route the mixture of its rows, weighted by their
  calls (finished and cut).

Failures are not replayed (the table's ``failed_share`` mixes errors, 429s and cuts), nor are
fault shares: add ``faults`` to a YAML profile for those.
"""

from __future__ import annotations

import math
import os
import re

from collections.abc import Mapping
from typing import Any

from tailkit.errors import ConfigError
from tailkit.serve._grid import QuantileCurve, grid
from tailkit.serve._outcomes import Outcomes, load_outcomes, read_json
from tailkit.serve._profile import ModelProfile, ServeConfig


__all__ = ["profile_from_stats", "serve_outcomes"]

Point = tuple[float, float]  # (probability, seconds)
_DEFAULT_TOKENS = 200
# The stats table by provider and model, without token buckets: what `tailkit.stats` returns
# with ``bucket=()`` (``.to_dicts()``), or what the stats command prints as JSON.
_FIX = (
    "pass the rows of the stats table by provider and model without buckets: "
    "tailkit.stats(store, bucket=()).to_dicts()"
)


def _finite(row: Mapping[str, Any], name: str) -> float | None:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None  # missing, null, "inf" (unbounded) or NaN: unknown
    return float(value)


def _rows(stats_json: object) -> list[Mapping[str, Any]]:
    if isinstance(stats_json, str | os.PathLike):
        stats_json = read_json(os.fspath(stats_json), "stats", _FIX)
    rows = stats_json.get("table") if isinstance(stats_json, Mapping) else stats_json
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        msg = f"stats JSON must hold a 'table' list of rows, got {type(rows).__name__};"
        raise ConfigError(msg, field="stats_json", value=stats_json, fix=_FIX)
    return rows


def _model_id(row: Mapping[str, Any]) -> str:
    model = row.get("model")
    if not isinstance(model, str) or not model:
        msg = f"a stats row has no model (columns: {', '.join(map(str, row))});"
        raise ConfigError(msg, field="stats_json", value=dict(row), fix=_FIX)
    provider = row.get("provider")
    return f"{provider}/{model}" if isinstance(provider, str) and provider else model


# p50_s, p90_s, p95_s, p99_s (and ttft_…): any such column a table carries (p999_s: 0.999)
_TOTAL = re.compile(r"p([0-9]{2,})_s")
_TTFT = re.compile(r"ttft_p([0-9]{2,})_s")


def _known(row: Mapping[str, Any], column: re.Pattern[str]) -> list[Point]:
    """
    The ``(probability, seconds)`` quantiles the row knows in ``column``: finite and positive.
    """
    points = []
    for name in row:
        found = column.fullmatch(str(name))
        value = _finite(row, name) if found else None
        if found and value is not None and value > 0 and int(found[1]) > 0:
            points.append((int(found[1]) / 10 ** len(found[1]), value))
    return points


def _weight(row: Mapping[str, Any]) -> int:
    """
    The calls a row's quantiles describe (finished and cut), at least 1: its mixture weight.
    """
    n, n_ok, cut = _finite(row, "n"), _finite(row, "n_ok"), _finite(row, "censored_share")
    if n_ok is None:
        return max(round(n or 1), 1)
    return max(round(n_ok + (cut or 0.0) * (n or 0.0)), 1)


def _entries(row: Mapping[str, Any]) -> tuple[list[float], list[float]] | None:
    """
    A row's grid: TTFT and total at the same ``GRID_SIZE`` probabilities; ``None`` without p50.
    """
    total = _known(row, _TOTAL)
    if not any(p == 0.5 for p, _ in total):
        return None  # failures only, or too few finished calls: nothing to replay
    sigma = _finite(row, "sigma")
    totals = grid(QuantileCurve(tuple(total), low_sigma=sigma))
    ttft = _known(row, _TTFT)
    if not any(p == 0.5 for p, _ in ttft):
        return [0.1 * t for t in totals], totals
    firsts = grid(QuantileCurve(tuple(ttft), low_sigma=sigma))
    return [min(f, t) for f, t in zip(firsts, totals, strict=True)], totals


def _tokens(row: Mapping[str, Any]) -> int | None:
    gen, speed = _finite(row, "gen_p50_s"), _finite(row, "tokens_per_s_p50")
    if gen is None or speed is None or gen <= 0 or speed <= 0:
        return None
    return max(round(gen * speed), 1)


def _outcomes(rows: list[Mapping[str, Any]]) -> Outcomes | None:
    """
    One route's table: each of its rows' grids, weighted by the row's calls.
    """
    ttfts: list[float] = []
    totals: list[float] = []
    counts: list[int] = []
    tokens: list[tuple[int, int]] = []
    for row in rows:
        entries = _entries(row)
        if entries is None:
            continue
        weight = _weight(row)
        ttfts += entries[0]
        totals += entries[1]
        counts += [weight] * len(entries[1])
        if (length := _tokens(row)) is not None:
            tokens.append((weight, length))
    if not totals:
        return None
    return Outcomes(
        ttft_s=tuple(ttfts),
        total_s=tuple(totals),
        kinds="o" * len(totals),
        output_tokens=max(tokens)[1] if tokens else _DEFAULT_TOKENS,
        counts=None if len(set(counts)) == 1 else tuple(counts),
    )


def profile_from_stats(
    stats_json: Mapping[str, Any] | list[Any] | str | os.PathLike[str],
    *,
    time_scale: float = 1.0,
) -> ServeConfig:
    """
    A serve profile that replays measured latency, one model per route of a ``tailkit stats`` table.

    Each request draws its TTFT and total from the route's measured quantiles (see the module
    docstring and docs/serve.md); rows of one route (token buckets) are mixed by their calls.
    Failures are not replayed.

    Args:
        stats_json: The stats table by provider and model, without token buckets (or split
            by bucket): its rows (``tailkit.stats(store, bucket=()).to_dicts()``), the JSON
            document the stats command prints (or its ``table`` list), or that file's path.
        time_scale: Real seconds per profile second (0.01 replays 100 times faster).

    Returns:
        One `ModelProfile` with a quantile-grid `Outcomes` table per route with latency,
        keyed ``provider/model``; seed 0.

    Raises:
        ConfigError: The file cannot be read, a row has no model, or no row has latency.
    """
    routes: dict[str, list[Mapping[str, Any]]] = {}
    for row in _rows(stats_json):
        routes.setdefault(_model_id(row), []).append(row)
    models: dict[str, ModelProfile] = {}
    for name, rows in routes.items():
        table = _outcomes(rows)
        if table is not None:
            models[name] = ModelProfile(outcomes=table)
    if not models:
        msg = "no stats row has latency to replay (p50_s);"
        raise ConfigError(msg, field="stats_json", value=stats_json, fix=_FIX)
    return ServeConfig(models=models, time_scale=time_scale)


def serve_outcomes(path: str | os.PathLike[str]) -> ServeConfig:
    """
    A serve config that replays measured outcome tables, one model per table.

    Args:
        path: An outcomes file (JSON), as a replay writes it into its output folder.

    Returns:
        One `ModelProfile` per table, answering with a drawn entry; the file's time scale
        and seed.

    Raises:
        ConfigError: The file cannot be read or a table is malformed.
    """
    models, time_scale, seed = load_outcomes(path)
    profiles = {
        name: ModelProfile(outcomes=table, chunk_tokens=chunk_tokens)
        for name, (table, chunk_tokens) in models.items()
    }
    return ServeConfig(models=profiles, time_scale=time_scale, seed=seed)
