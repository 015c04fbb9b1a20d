"""
Attempt functions for real providers, ready to hand to the executor.

`tailkit.adapters.openai.chat_attempt` calls any OpenAI-compatible chat endpoint (OpenAI,
Azure OpenAI, vLLM, gateways) with httpx: ``pip install 'tailkit[http]'``. Every adapter
sends through one shared client per event loop (`shared_client`, `set_shared_client`,
`close_shared_client`). They are re-exported here lazily, so ``import tailkit.adapters``
stays cheap and works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from tailkit.adapters.openai import ChatAttempt as ChatAttempt
    from tailkit.adapters.openai import chat_attempt as chat_attempt
    from tailkit.adapters.openai import close_shared_client as close_shared_client
    from tailkit.adapters.openai import set_shared_client as set_shared_client
    from tailkit.adapters.openai import shared_client as shared_client

__all__ = [
    "ChatAttempt",
    "chat_attempt",
    "close_shared_client",
    "set_shared_client",
    "shared_client",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tailkit.adapters import openai

        return getattr(openai, name)
    msg = f"module 'tailkit.adapters' has no attribute {name!r}"
    raise AttributeError(msg)
