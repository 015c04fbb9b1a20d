"""
How each served model behaves: its latency, its stalls and its faults, and reading that from YAML.

Every number in a profile is in *profile* seconds: what a real provider would take. The server
multiplies each one by ``time_scale`` when it sleeps, so a profile written from production logs
(tens of seconds per call) runs a test suite in milliseconds with the same shape.
"""

from __future__ import annotations

import math
import os
import re

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tailkit.config import safe_load_bounded
from tailkit.errors import ConfigError
from tailkit.serve._outcomes import Outcomes, check_groups


__all__ = ["FAULT_NAMES", "Faults", "ModelProfile", "ServeConfig", "load_profile"]

FAULT_NAMES: tuple[str, ...] = (
    "hang",
    "stall_mid",
    "error_5xx",
    "reset",
    "garbage",
    "schema_invalid",
    "cut_stream",
)
"""The fault shares of `Faults`, in the order the server draws them."""

# YAML 1.2 (and every user) reads 1e-3 as a number; PyYAML's YAML 1.1 reads it as a string.
_EXPONENT_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _number(where: str, value: object, *, low: float, strict: bool = False) -> float:
    """
    ``value`` as a finite float ``>= low`` (``> low`` when ``strict``), or a `ConfigError`.

    ``where`` is the field's path in a profile (``models.m.ttft_sigma``, ``time_scale``): the
    error carries it as its ``field`` and spells it out, since a profile file's key is not a
    command-line option.
    """
    bound = f"> {low:g}" if strict else f">= {low:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        msg = f"{where} must be a number {bound}, got {value!r}"
        raise ConfigError(msg, field=where, value=value)
    if value < low or (strict and value == low):
        msg = f"{where} must be a number {bound}, got {value!r}"
        raise ConfigError(msg, field=where, value=value)
    return float(value)


def _share(where: str, value: object) -> float:
    number = _number(where, value, low=0.0)
    if number > 1:
        msg = f"{where} is a share of requests between 0 and 1, got {value!r} (3 % is 0.03)"
        raise ConfigError(msg, field=where, value=value)
    return number


def _integer(where: str, value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        msg = f"{where} must be a whole number >= {low}, got {value!r}"
        raise ConfigError(msg, field=where, value=value)
    return value


@dataclass(frozen=True, slots=True)
class Faults:
    """
    Shares of requests that fail in each way; the server draws each independently, in order.

    The first fault whose draw hits wins, so a request has at most one. Each is rendered in
    the shapes of the API asked (Anthropic's in brackets below where they differ).

    Args:
        hang: Accept the request, then never send a byte until the client goes.
        stall_mid: Stream some tokens, then go silent until the client goes (not streamed:
            like ``hang``).
        error_5xx: Answer 500, 502 or 503 with the API's error body, at the TTFT.
        reset: Close the connection abruptly (TCP reset, no HTTP response), at the TTFT.
        garbage: Answer 200 with a body that is not JSON (streamed: ``data:`` lines that are
            not JSON, then ``data: [DONE]`` [``message_stop``]).
        schema_invalid: Answer 200 with JSON that has no ``choices`` [``content``] (streamed:
            chunks without ``choices`` [events without ``delta``]).
        cut_stream: Stop part-way and close the connection: a stream without ``data: [DONE]``
            [``message_stop``] (not streamed: a body shorter than its Content-Length).
        tpm_limit: Tokens per minute (prompt + completion, per minute of *profile* time) the
            model admits; over it, 429 with ``Retry-After``. ``None``: no limit.
    """

    hang: float = 0.0
    stall_mid: float = 0.0
    error_5xx: float = 0.0
    reset: float = 0.0
    garbage: float = 0.0
    schema_invalid: float = 0.0
    cut_stream: float = 0.0
    tpm_limit: int | None = None

    def __post_init__(self) -> None:
        _check_faults(self, "faults")

    def shares(self) -> tuple[tuple[str, float], ...]:
        """
        ``(name, share)`` for every fault, in draw order.
        """
        return tuple((name, getattr(self, name)) for name in FAULT_NAMES)


def _check_faults(faults: Faults, where: str) -> None:
    for name in FAULT_NAMES:
        _share(f"{where}.{name}", getattr(faults, name))
    if faults.tpm_limit is not None:
        _integer(f"{where}.tpm_limit", faults.tpm_limit, low=1)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """
    One model's behaviour. All seconds are profile seconds, before time scaling.

    Args:
        ttft_median_s: Median time to first token (lognormal).
        ttft_sigma: Log-scale spread of the TTFT (0: always the median).
        tokens_per_s: Median decode speed after the first token (lognormal).
        gen_sigma: Log-scale spread of the decode speed (0: always the median).
        output_tokens: Median completion length in tokens (lognormal, sigma 0.3, at least 1;
            a request's ``max_tokens`` caps it).
        stall_share: Share of requests that stall (a transient tail a fresh attempt escapes).
        stall_factor: How much slower a stalled request is: its TTFT, or for long outputs
            (600 tokens and more) its decode.
        faults: Shares of requests that fail, and the tokens-per-minute limit.
        chunk_tokens: Tokens per streamed chunk (1: one event per token, as most providers;
            more: fewer, bigger events for the same timing, cheaper to replay at scale).
        outcomes: Measured outcomes to replay instead of the lognormal model (``None``: the
            model above). Each request then draws one entry; the latency fields, stalls and
            fault shares are not used, the tokens-per-minute limit still is.
    """

    ttft_median_s: float = 0.5
    ttft_sigma: float = 0.3
    tokens_per_s: float = 80.0
    gen_sigma: float = 0.2
    output_tokens: int = 200
    stall_share: float = 0.0
    stall_factor: float = 6.0
    faults: Faults = field(default_factory=Faults)
    chunk_tokens: int = 1
    outcomes: Outcomes | None = None

    def __post_init__(self) -> None:
        _check_model(self, "")


def _check_model(model: ModelProfile, prefix: str) -> None:
    _number(f"{prefix}ttft_median_s", model.ttft_median_s, low=0.0)
    _number(f"{prefix}ttft_sigma", model.ttft_sigma, low=0.0)
    _number(f"{prefix}tokens_per_s", model.tokens_per_s, low=0.0, strict=True)
    _number(f"{prefix}gen_sigma", model.gen_sigma, low=0.0)
    _integer(f"{prefix}output_tokens", model.output_tokens, low=1)
    _share(f"{prefix}stall_share", model.stall_share)
    _number(f"{prefix}stall_factor", model.stall_factor, low=1.0)
    _integer(f"{prefix}chunk_tokens", model.chunk_tokens, low=1)
    if not isinstance(model.faults, Faults):
        msg = f"{prefix}faults must be a Faults, got {model.faults!r}"
        raise ConfigError(msg)
    if model.outcomes is not None and not isinstance(model.outcomes, Outcomes):
        msg = f"{prefix}outcomes must be an Outcomes table, got {type(model.outcomes).__name__}"
        raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """
    What `Server` serves.

    Args:
        models: Profiles by model id, the ``"model"`` clients send (e.g. ``"openai/gpt-4.1"``).
        time_scale: Real seconds per profile second (0.01 runs 100 times faster).
        seed: Seeds the server's one random generator: the same seed and the same requests
            in the same order give the same latencies and faults.
        workers: Requests worked on at once; the others wait in arrival order, and a
            request's clock (its log's start, its latency, its own budget) starts when a
            worker takes it, as in a tool server behind a queue. ``None``: no limit.
        deadline_margin_s: Profile seconds before a propagated deadline at which the server
            stops, so that its answer can still reach the caller in time (0: at the deadline).
        own_budget_s: Profile seconds of budget the server gives itself per request, from
            when a worker takes it, ignoring the deadline the request carries ("two
            clocks"). ``None``: honour the propagated deadline.
    """

    models: dict[str, ModelProfile]
    time_scale: float = 1.0
    seed: int = 0
    workers: int | None = None
    own_budget_s: float | None = None
    deadline_margin_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.models, Mapping) or not self.models:
            msg = f"models must map model ids to profiles, at least one, got {self.models!r}"
            raise ConfigError(msg)
        for name, model in self.models.items():
            if not isinstance(name, str) or not name.strip():
                msg = f"models: a model id must be a non-empty string, got {name!r}"
                raise ConfigError(msg)
            if not isinstance(model, ModelProfile):
                msg = f"models.{name} must be a ModelProfile, got {model!r}"
                raise ConfigError(msg)
        _number("time_scale", self.time_scale, low=0.0, strict=True)
        _integer("seed", self.seed, low=0)
        if self.workers is not None:
            _integer("workers", self.workers, low=1)
        if self.own_budget_s is not None:
            _number("own_budget_s", self.own_budget_s, low=0.0, strict=True)
        _number("deadline_margin_s", self.deadline_margin_s, low=0.0)
        check_groups({n: m.outcomes for n, m in self.models.items() if m.outcomes is not None})


# outcome tables come from `tailkit serve --outcomes FILE.json`, not from a YAML profile
_MODEL_FIELDS = tuple(f.name for f in fields(ModelProfile) if f.name != "outcomes")
_FAULT_FIELDS = tuple(f.name for f in fields(Faults))
_TOP_FIELDS = ("time_scale", "seed", "models", "workers", "own_budget_s", "deadline_margin_s")


def _unknown(where: str, found: Mapping[Any, Any], known: tuple[str, ...]) -> None:
    for key in found:
        if key not in known:
            msg = f"{where}{key} is not a field; the fields are {', '.join(known)}"
            raise ConfigError(msg)


def _mapping(where: str, value: object) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        msg = f"{where} must be a mapping of fields, got {value!r}"
        raise ConfigError(msg)
    return value


def _plain(value: object, *, whole: bool) -> Any:
    """
    A YAML scalar as the dataclasses take it: ``1e-3`` as a float, ``2e5`` as a whole number.
    """
    if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if whole and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _model(name: str, raw: object) -> ModelProfile:
    where = f"models.{name}"
    spec = {
        key: _plain(value, whole=key == "output_tokens")
        for key, value in _mapping(where, {} if raw is None else raw).items()
    }
    _unknown(f"{where}.", spec, _MODEL_FIELDS)
    faults_raw = _mapping(f"{where}.faults", spec.pop("faults", None) or {})
    _unknown(f"{where}.faults.", faults_raw, _FAULT_FIELDS)
    faults = {key: _plain(value, whole=key == "tpm_limit") for key, value in faults_raw.items()}
    try:
        return ModelProfile(**spec, faults=Faults(**faults))
    except ConfigError as exc:
        msg = f"{where}.{exc}"
        raise ConfigError(msg) from None


def parse_profile(document: object) -> ServeConfig:
    """
    A `ServeConfig` from a parsed profile document (see `load_profile` for the format).

    Raises:
        ConfigError: Naming the field (``models.<id>.<field>``) and the value.
    """
    top = _mapping("the profile", document)
    _unknown("", top, _TOP_FIELDS)
    if "models" not in top:
        msg = "models is missing: map each model id to its profile ({} takes the defaults)"
        raise ConfigError(msg)
    found = _mapping("models", top["models"]).items()
    models = {str(name): _model(str(name), raw) for name, raw in found}
    return ServeConfig(
        models=models,
        time_scale=_plain(top.get("time_scale", 1.0), whole=False),
        seed=_plain(top.get("seed", 0), whole=True),
        workers=None if top.get("workers") is None else _plain(top["workers"], whole=True),
        own_budget_s=None
        if top.get("own_budget_s") is None
        else _plain(top["own_budget_s"], whole=False),
        deadline_margin_s=_plain(top.get("deadline_margin_s", 0.0), whole=False),
    )


def load_profile(path: str | os.PathLike[str]) -> ServeConfig:
    """
    Read a serve profile from a YAML file.

    The format::

        time_scale: 0.01        # real seconds per profile second (default 1)
        seed: 7                 # default 0
        models:                 # model id (as clients send it) -> profile
          openai/gpt-4.1:
            ttft_median_s: 0.8
            output_tokens: 700
            stall_share: 0.03
            faults: {error_5xx: 0.01, tpm_limit: 200000}

    Fields left out take the `ModelProfile` and `Faults` defaults.

    Args:
        path: The YAML file (UTF-8).

    Raises:
        ConfigError: The file cannot be read or parsed, or a field is unknown or out of
            range; the message names the file and the field (``models.<id>.<field>``).
    """
    import yaml

    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        msg = f"{source}: no such profile file: check the path"
        raise ConfigError(msg) from None
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{source}: cannot read the profile: {exc}"
        raise ConfigError(msg) from None
    try:
        document = safe_load_bounded(text, source)
    except yaml.YAMLError as exc:
        msg = f"{source}: not valid YAML: {exc}"
        raise ConfigError(msg) from None
    try:
        return parse_profile(document)
    except ConfigError as exc:
        msg = f"{source}: {exc}"
        raise ConfigError(msg) from None
