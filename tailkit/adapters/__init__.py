"""
Attempt functions for real providers, ready to hand to the executor.

`tailkit.adapters.openai.chat_attempt` calls any OpenAI-compatible chat endpoint (OpenAI,
Azure OpenAI, vLLM, gateways) with httpx: ``pip install 'tailkit[http]'``. Every adapter
sends through one shared client per event loop (`shared_client`, `set_shared_client`,
`close_shared_client`).

`tailkit.adapters.openai_sdk` (``openai_chat_attempt``, ``openai_responses_attempt``) and
`tailkit.adapters.anthropic_sdk` (``anthropic_messages_attempt``) send through your own client
of the official ``openai`` or ``anthropic`` SDK, with the SDK's retries off, its timeout from
the attempt's deadline and its exceptions mapped to the attempt statuses (docs/sdk.md).

They are re-exported here lazily, so ``import tailkit.adapters`` stays cheap and works without
the extra or the SDKs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from tailkit.adapters.anthropic_sdk import (
        anthropic_messages_attempt as anthropic_messages_attempt,
    )
    from tailkit.adapters.openai import ChatAttempt as ChatAttempt
    from tailkit.adapters.openai import chat_attempt as chat_attempt
    from tailkit.adapters.openai import close_shared_client as close_shared_client
    from tailkit.adapters.openai import set_shared_client as set_shared_client
    from tailkit.adapters.openai import shared_client as shared_client
    from tailkit.adapters.openai_sdk import openai_chat_attempt as openai_chat_attempt
    from tailkit.adapters.openai_sdk import openai_responses_attempt as openai_responses_attempt

__all__ = [
    "ChatAttempt",
    "anthropic_messages_attempt",
    "chat_attempt",
    "close_shared_client",
    "openai_chat_attempt",
    "openai_responses_attempt",
    "set_shared_client",
    "shared_client",
]

_MODULES = {
    "anthropic_messages_attempt": "anthropic_sdk",
    "openai_chat_attempt": "openai_sdk",
    "openai_responses_attempt": "openai_sdk",
}


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        module = importlib.import_module(f"tailkit.adapters.{_MODULES.get(name, 'openai')}")
        return getattr(module, name)
    msg = f"module 'tailkit.adapters' has no attribute {name!r}"
    raise AttributeError(msg)
