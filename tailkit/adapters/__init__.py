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

from typing import TYPE_CHECKING

from tailkit._lazy import lazy_exports


if TYPE_CHECKING:
    from tailkit.adapters.anthropic_sdk import anthropic_messages_attempt
    from tailkit.adapters.openai import (
        ChatAttempt,
        chat_attempt,
        close_shared_client,
        set_shared_client,
        shared_client,
    )
    from tailkit.adapters.openai_sdk import openai_chat_attempt, openai_responses_attempt

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

__getattr__ = lazy_exports(
    __name__,
    {
        "ChatAttempt": "tailkit.adapters.openai",
        "anthropic_messages_attempt": "tailkit.adapters.anthropic_sdk",
        "chat_attempt": "tailkit.adapters.openai",
        "close_shared_client": "tailkit.adapters.openai",
        "openai_chat_attempt": "tailkit.adapters.openai_sdk",
        "openai_responses_attempt": "tailkit.adapters.openai_sdk",
        "set_shared_client": "tailkit.adapters.openai",
        "shared_client": "tailkit.adapters.openai",
    },
)
