"""
Attempt functions for real providers, ready to hand to the executor.

`tailkit.adapters.openai.chat_attempt` calls any OpenAI-compatible chat endpoint (OpenAI,
Azure OpenAI, vLLM, gateways) with httpx: ``pip install 'tailkit[http]'``. It is re-exported
here lazily, so ``import tailkit.adapters`` stays cheap and works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from tailkit.adapters.openai import ChatAttempt as ChatAttempt
    from tailkit.adapters.openai import chat_attempt as chat_attempt

__all__ = ["ChatAttempt", "chat_attempt"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tailkit.adapters import openai

        return getattr(openai, name)
    msg = f"module 'tailkit.adapters' has no attribute {name!r}"
    raise AttributeError(msg)
