"""
The LiteLLM side of the peer benchmark: LiteLLM's Router, configured for latency as its docs say.

`peers.py` runs each variant in its own client process against `tailkit serve`; this module only
builds the Router and makes one logical call through it. litellm is imported lazily (it takes
seconds), so importing this module is cheap and works without litellm installed.

Every deployment is ``{"model": "openai/<serve id>", "api_base": base_url, "api_key":
"sk-bench", "timeout": timeout_s, "stream_timeout": timeout_s, "max_retries": 0}``: serve
receives the bare serve id (LiteLLM strips the ``openai/`` provider prefix), and ``max_retries=0``
turns off the OpenAI SDK's own retries so that only the Router's ``num_retries`` retries (the
Router also defaults it to 0 in ``default_litellm_params``; it is set on each deployment so the
printed configuration says so). Variants:

- ``litellm-retry``: one model group {primary, fallback}, ``num_retries=1``, default routing
  (simple-shuffle: each call picks a deployment at random, so half the calls start on the
  fallback); a failed attempt is retried once, on the other deployment when it is healthy.
- ``litellm-fallback``: the group holds the primary only; ``fallbacks=[{name: [name +
  "-fallback"]}]`` names a group holding the fallback deployment. ``num_retries=0``: the Router's
  default is 2, which retries the primary twice (two more ``timeout_s``) before falling back;
  with 0 the first failure of the primary (timeout, 429, 5xx) goes to the fallback at once.
- ``litellm-latency``: as ``litellm-retry`` with ``routing_strategy="latency-based-routing"``.
- ``litellm-race``: one group per deployment and ``Router.abatch_completion_fastest_response``
  over both, ``num_retries=1`` (each branch retries once on its own deployment).

Time constants scaled by ``time_scale`` (they stand for real provider time): ``cooldown_time``
(LiteLLM's default 5 s), and latency routing's ``routing_strategy_args["ttl"]`` (default 1 h, how
long a latency sample counts). ``retry_after`` (the Router's minimum backoff) is 0 by default,
so scaling leaves it 0. Not scaled, because LiteLLM fixes them where no argument reaches them:
the one-minute window in which ``allowed_fails`` (default 3) failures count, and the retry
backoff without a Retry-After (0.5 s doubling up to 8 s, plus up to 0.75 s of jitter; computed by
the native router core, which does not read litellm's ``INITIAL_RETRY_DELAY`` constants).
Retry-After needs no scaling: serve already sends it in real seconds (whole ones, rounded up:
a client that waits it out may wait up to a second more than ``retry-after-ms`` says). No
health checks, no pre-call checks (both off by default; the docs do not recommend them for
latency), no callbacks, no telemetry, the local cost map.

Observed against ``tailkit serve`` (time_scale 0.25; serve sends a stream's role chunk with its
first token, and Retry-After in whole seconds with the exact wait in ``retry-after-ms``, as
providers do):
- retry: a timeout fires at ``timeout_s`` (serve cuts the attempt at timeout_s + 0.02..0.05 s,
  ``client_gone``) and is retried at once on a deployment the shuffle picks again, which can be
  the same one (one timeout does not cool it down: ``allowed_fails`` is 3). A 429 is retried at
  once (no sleep: another deployment is healthy) on the other one.
- fallback: a timeout or a 429 on the primary goes to the fallback group within ~0.03 s. The
  primary is never cooled down (the only deployment of its group), so every call tries it first:
  in a 429 storm nearly every call costs two requests.
- latency: it measures each deployment's latency (a stream's: to its first chunk) and sends most
  calls to the faster one.
- race: both requests start together; the first answer (a stream's first chunk) wins and the
  loser is cancelled (serve logs it ``timeout``/``client_gone``). A branch that fails (429) is
  retried on its own deployment after LiteLLM's backoff while the other runs.
- a stream that stalls before its first token: LiteLLM reads the first chunk inside the attempt,
  so ``stream_timeout`` fires there and the Router retries or falls back. (With a server that
  sends the role chunk at once, the stall comes after the first chunk, and LiteLLM raises
  ``Timeout`` with no retry or fallback: the OpenAI SDK's read timeout inside the stream is
  mapped to a 408 that no fallback takes over.)
- 429 with Retry-After: LiteLLM reads ``Retry-After`` with ``int()`` (whole seconds only); the
  OpenAI SDK's retries, the only reader of ``retry-after-ms``, are off.
- an outage (provider a answers 5xx to every request for a window; peers.py's ``outage``):
  the fallback variant tries a first on every call (its one-deployment group is never cooled
  down), then b; the group variants cool a down after ``allowed_fails`` failures, for the
  scaled ``cooldown_time``, so a is tried again many times in a long window, and a call whose
  two tries both land on a fails.
- Client CPU: 14-17 ms a call non-streamed, 33-38 ms streamed, 20-55 ms for the race (measured
  by peers.py, 6 calls a second per variant on 2 shared cores).
"""

from __future__ import annotations

import importlib
import logging
import os

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


VARIANTS: dict[str, str] = {
    "litellm-retry": "LiteLLM Router, group {primary, fallback}, timeout=p95, num_retries=1",
    "litellm-fallback": "LiteLLM Router, primary group, fallbacks=[fallback group], timeout=p95",
    "litellm-latency": "LiteLLM Router, group {primary, fallback}, latency-based-routing, "
    "timeout=p95, num_retries=1",
    "litellm-race": "LiteLLM Router.abatch_completion_fastest_response over primary and fallback",
}
API_KEY = "sk-bench"
# LiteLLM's defaults, in seconds of real provider time (scaled by time_scale).
COOLDOWN_TIME_S = 5.0
LATENCY_TTL_S = 3600.0


@dataclass(frozen=True, slots=True)
class Group:
    """
    One logical model the caller asks for, and the deployments behind it.

    Attributes:
        name: The logical model the caller asks for (e.g. ``"answer"``).
        primary: The serve model id of the primary route (no ``/``).
        fallback: The serve model id on the independent provider, or ``None``.
        timeout_s: Per-attempt timeout in real seconds (the primary's measured p95).
        primary_url: The primary's base URL (``None``: the client's; the outage case puts
            provider a behind its own).
        fallback_url: The fallback's base URL (``None``: the client's).
    """

    name: str
    primary: str
    fallback: str | None
    timeout_s: float
    primary_url: str | None = None
    fallback_url: str | None = None


def _deployment(model_name: str, serve_id: str, base_url: str, timeout_s: float) -> dict[str, Any]:
    params = {
        "model": f"openai/{serve_id}",
        "api_base": base_url,
        "api_key": API_KEY,
        "timeout": timeout_s,
        "stream_timeout": timeout_s,
        "max_retries": 0,
    }
    return {"model_name": model_name, "litellm_params": params}


def _race_names(group: Group) -> list[str]:
    names = [f"{group.name}.primary"]
    if group.fallback is not None:
        names.append(f"{group.name}.fallback")
    return names


def router_settings(
    variant: str, groups: Sequence[Group], *, base_url: str, time_scale: float
) -> dict[str, Any]:
    """
    The exact keyword arguments given to ``litellm.Router`` for a variant.

    Args:
        variant: A key of `VARIANTS`.
        groups: The logical models, each with its deployments and per-attempt timeout.
        base_url: The server's OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1``.
        time_scale: Real seconds per profile second; LiteLLM's time constants are multiplied
            by it.

    Returns:
        JSON-serializable keyword arguments (the api key is the benchmark's ``sk-bench``).

    Raises:
        ValueError: An unknown variant.
    """
    if variant not in VARIANTS:
        msg = f"unknown LiteLLM variant {variant!r}; choose one of {', '.join(VARIANTS)}"
        raise ValueError(msg)
    model_list: list[dict[str, Any]] = []
    fallbacks: list[dict[str, list[str]]] = []
    for g in groups:
        ids = [g.primary] if g.fallback is None else [g.primary, g.fallback]
        first, second = g.primary_url or base_url, g.fallback_url or base_url
        urls = [first, second]
        if g.fallback is None:  # nothing to fall back to or race: one deployment, retried once
            model_list.append(_deployment(g.name, g.primary, first, g.timeout_s))
        elif variant == "litellm-fallback":
            model_list.append(_deployment(g.name, g.primary, first, g.timeout_s))
            model_list.append(_deployment(f"{g.name}-fallback", g.fallback, second, g.timeout_s))
            fallbacks.append({g.name: [f"{g.name}-fallback"]})
        elif variant == "litellm-race":
            for name, serve_id, url in zip(_race_names(g), ids, urls, strict=True):
                model_list.append(_deployment(name, serve_id, url, g.timeout_s))
        else:
            model_list.extend(
                _deployment(g.name, i, url, g.timeout_s) for i, url in zip(ids, urls, strict=False)
            )
    # The router-level timeout applies to a group without its own; all groups share the largest.
    settings: dict[str, Any] = {
        "model_list": model_list,
        "timeout": max(g.timeout_s for g in groups),
        # the fallback variant's groups without a fallback get no retry either: its setting
        "num_retries": 0 if variant == "litellm-fallback" else 1,
        "cooldown_time": COOLDOWN_TIME_S * time_scale,
    }
    if variant == "litellm-fallback":
        settings["fallbacks"] = fallbacks
    if variant == "litellm-latency":
        settings["routing_strategy"] = "latency-based-routing"
        settings["routing_strategy_args"] = {"ttl": LATENCY_TTL_S * time_scale}
    return settings


def _import_litellm() -> Any:
    """Import litellm quietly and offline (the local cost map, no telemetry, no debug info)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        litellm: Any = importlib.import_module("litellm")
    except ImportError as exc:
        msg = "the LiteLLM peer needs litellm: pip install 'tailkit[bench]'"
        raise RuntimeError(msg) from exc
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return litellm


def _text(response: Any) -> str:
    return str(response.choices[0].message.content or "")


async def _drain(stream: Any) -> str:
    parts: list[str] = []
    async for chunk in stream:
        if chunk.choices and (delta := chunk.choices[0].delta.content):
            parts.append(delta)
    return "".join(parts)


class PeerClient:
    """
    One variant's LiteLLM Router, calling logical models by name.

    Open it with `PeerClient.open`; close it with `aclose`.
    """

    def __init__(self, router: Any, variant: str, groups: Sequence[Group], *, stream: bool) -> None:
        self._router = router
        self._variant = variant
        self._groups = {g.name: g for g in groups}
        self._stream = stream

    @classmethod
    async def open(
        cls,
        variant: str,
        groups: Sequence[Group],
        *,
        base_url: str,
        stream: bool,
        time_scale: float,
    ) -> PeerClient:
        """
        Build the Router for a variant.

        Args:
            variant: A key of `VARIANTS`.
            groups: The logical models, each with its deployments and per-attempt timeout.
            base_url: The server's OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1``.
            stream: Whether calls stream (read to the end) or not.
            time_scale: Real seconds per profile second (see `router_settings`).

        Returns:
            The client.

        Raises:
            RuntimeError: litellm is not installed.
            ValueError: As `router_settings`.
        """
        settings = router_settings(variant, groups, base_url=base_url, time_scale=time_scale)
        litellm = _import_litellm()
        return cls(litellm.Router(**settings), variant, groups, stream=stream)

    async def call(self, group: str, messages: list[dict[str, str]]) -> str:
        """
        One logical call through the Router.

        Args:
            group: The name of a `Group` the client was opened with.
            messages: The chat messages.

        Returns:
            The answer text (streamed: the joined deltas, read to the end).

        Raises:
            KeyError: An unknown group.
            Exception: Whatever LiteLLM raises when it gives up.
        """
        g = self._groups[group]
        if self._variant == "litellm-race" and g.fallback is not None:
            response = await self._router.abatch_completion_fastest_response(
                model=",".join(_race_names(g)), messages=messages, stream=self._stream
            )
        else:
            response = await self._router.acompletion(
                model=g.name, messages=messages, stream=self._stream
            )
        return await _drain(response) if self._stream else _text(response)

    async def aclose(self) -> None:
        """Close the HTTP clients LiteLLM cached for the deployments (the Router has no close)."""
        if self._router is None:
            return
        self._router = None
        litellm = _import_litellm()
        await litellm.close_litellm_async_clients()
