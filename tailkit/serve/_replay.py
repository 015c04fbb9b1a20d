"""
A serve profile from measured latency: replay ``tailkit stats`` output on loopback.

``tailkit stats --by provider,model --bucket none --json`` describes each route with quantiles,
a lognormal fit and a transient-tail mixture. A `ModelProfile` needs medians and log-scale
spreads, so each row is mapped best effort (the README lists the rules):

- the model id is ``provider/model`` (or ``model`` when the table is grouped by model alone);
- ``ttft_median_s`` is ``ttft_p50_s`` (unknown TTFT, from non-streamed logs: 10 % of ``p50_s``);
- ``tokens_per_s`` is ``tokens_per_s_p50``; ``gen_sigma`` comes from how far the slow calls'
  speed (``tokens_per_s_p10``) sits below it, ``ln(p50 / p10) / z(0.9)``, widened when decode
  is most of the latency so that length and speed together spread like the lognormal fit of
  the whole latency: ``sqrt(sigma² - 0.3²)`` (0.3: the output length's own spread);
- ``ttft_sigma`` is ``ln(ttft_p99_s / ttft_p50_s) / z(0.99)``, at most the lognormal ``sigma``
  of the whole latency: the TTFT's p99 holds the stalls, which the stall share replays;
- ``output_tokens`` is ``gen_p50_s * tokens_per_s_p50`` (or ``(p50_s - ttft) * speed``);
- ``stall_share`` and ``stall_factor`` are ``transient_share`` and ``transient_scale`` when
  the row's ``transient`` verdict is true and its mixture found a separate tail
  (``transient_mixture``, where the table has it), else no stalls.

Failures are not replayed (the table's ``failed_share`` mixes errors, 429s and cuts): add
``faults`` to a YAML profile for those.
"""

from __future__ import annotations

import math
import os

from collections.abc import Mapping
from typing import Any

from tailkit.errors import ConfigError
from tailkit.serve._draw import OUTPUT_SIGMA
from tailkit.serve._outcomes import load_outcomes, read_json
from tailkit.serve._profile import ModelProfile, ServeConfig


__all__ = ["profile_from_stats", "serve_outcomes"]

_Z90 = 1.2815515655446004  # standard normal quantile at 0.9
_Z99 = 2.3263478740408408  # ... at 0.99
_FIX = "write it with: tailkit stats --by provider,model --bucket none --json > stats.json"


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
        msg = f"stats JSON must hold a 'table' list of rows, got {type(rows).__name__}; {_FIX}"
        raise ConfigError(msg)
    return rows


def _model_id(row: Mapping[str, Any]) -> str:
    model = row.get("model")
    if not isinstance(model, str) or not model:
        msg = f"a stats row has no model (columns: {', '.join(map(str, row))}); {_FIX}"
        raise ConfigError(msg)
    provider = row.get("provider")
    return f"{provider}/{model}" if isinstance(provider, str) and provider else model


def _profile(row: Mapping[str, Any]) -> ModelProfile | None:
    p50 = _finite(row, "p50_s")
    ttft = _finite(row, "ttft_p50_s")
    if p50 is None and ttft is None:
        return None  # failures only: nothing to replay
    default = ModelProfile()
    if ttft is None or ttft <= 0:
        ttft = 0.1 * p50 if p50 else default.ttft_median_s
    speed = _finite(row, "tokens_per_s_p50")
    slow = _finite(row, "tokens_per_s_p10")
    gen_sigma = default.gen_sigma
    if speed is None or speed <= 0:
        speed = default.tokens_per_s
    elif slow is not None and 0 < slow <= speed:
        gen_sigma = math.log(speed / slow) / _Z90
    sigma = _finite(row, "sigma")
    ttft_p99 = _finite(row, "ttft_p99_s")
    ttft_sigma = default.ttft_sigma if sigma is None else sigma
    if ttft_p99 is not None and ttft_p99 >= ttft:
        ttft_sigma = min(ttft_sigma, math.log(ttft_p99 / ttft) / _Z99)
    gen = _finite(row, "gen_p50_s")
    if gen is None and p50 is not None:
        gen = max(p50 - ttft, 0.0)
    tokens = default.output_tokens if gen is None else max(round(gen * speed), 1)
    if sigma is not None and gen is not None and gen >= ttft:
        # Decode is most of the latency: its log-spread (length and speed together) is the
        # fitted sigma, when that is wider than the speed quantiles alone say.
        gen_sigma = max(gen_sigma, math.sqrt(max(sigma**2 - OUTPUT_SIGMA**2, 0.0)))
    stall_share, stall_factor = 0.0, default.stall_factor
    share, scale = _finite(row, "transient_share"), _finite(row, "transient_scale")
    separate = row.get("transient_mixture", True) is True  # tables before it had no such column
    if row.get("transient") is True and separate and share is not None and scale is not None:
        stall_share, stall_factor = min(max(share, 0.0), 1.0), max(scale, 1.0)
    return ModelProfile(
        ttft_median_s=ttft,
        ttft_sigma=ttft_sigma,
        tokens_per_s=speed,
        gen_sigma=gen_sigma,
        output_tokens=tokens,
        stall_share=stall_share,
        stall_factor=stall_factor,
    )


def profile_from_stats(
    stats_json: Mapping[str, Any] | list[Any] | str | os.PathLike[str],
    *,
    time_scale: float = 1.0,
) -> ServeConfig:
    """
    A serve profile that replays measured latency, one model per row of a ``tailkit stats`` table.

    The mapping from columns to profile fields is best effort (see the module docstring and
    the README); failures are not replayed.

    Args:
        stats_json: The output of ``tailkit stats --by provider,model --bucket none --json``:
            the parsed document, its ``table`` list, or the path of the file.
        time_scale: Real seconds per profile second (0.01 replays 100 times faster).

    Returns:
        One `ModelProfile` per row with latency, keyed ``provider/model``; seed 0.

    Raises:
        ConfigError: The file cannot be read, a row has no model, the same model appears in
            two rows (the table is split by token bucket), or no row has any latency.
    """
    models: dict[str, ModelProfile] = {}
    seen: set[str] = set()
    for row in _rows(stats_json):
        name = _model_id(row)
        if name in seen:
            msg = (
                f"model {name!r} appears in more than one stats row (split by token bucket or "
                f"another column); {_FIX}"
            )
            raise ConfigError(msg)
        seen.add(name)
        profile = _profile(row)
        if profile is not None:
            models[name] = profile
    if not models:
        msg = f"no stats row has latency to replay (p50_s or ttft_p50_s); {_FIX}"
        raise ConfigError(msg)
    return ServeConfig(models=models, time_scale=time_scale)


def serve_outcomes(path: str | os.PathLike[str]) -> ServeConfig:
    """
    A serve config that replays measured outcome tables, one model per table.

    Args:
        path: An outcomes file (JSON) as ``tailkit replay --out DIR`` writes it.

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
