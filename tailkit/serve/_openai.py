"""
The OpenAI chat-completions wire format: the request we accept and the bodies we answer.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from typing import Any


__all__ = [
    "DONE",
    "ChatRequest",
    "RequestError",
    "chunk",
    "completion",
    "error",
    "models_list",
    "parse_chat",
    "sse",
    "word",
]

DONE = b"data: [DONE]\n\n"
_WORDS = (
    "the", "tail", "of", "latency", "is", "where", "deadlines", "are", "lost", "so", "we",
    "measure", "it", "cut", "slow", "calls", "early", "and", "hedge", "them", "on", "another",
    "route", "within", "a", "budget",
)  # fmt: skip


class RequestError(ValueError):
    """
    The body is not a chat-completions request; ``param`` names the field at fault.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """
    What the server reads from a chat-completions body.

    Args:
        model: The model id.
        stream: Whether to answer with server-sent events.
        max_tokens: Cap on completion tokens, ``None`` for none.
        prompt_tokens: The prompt's size: words in the messages' text.
    """

    model: str
    stream: bool
    max_tokens: int | None
    prompt_tokens: int


def _text_words(content: object) -> int:
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):  # content parts: [{"type": "text", "text": "..."}, ...]
        texts = (p.get("text") for p in content if isinstance(p, dict))
        return sum(len(text.split()) for text in texts if isinstance(text, str))
    return 0


def parse_chat(body: bytes) -> ChatRequest:
    """
    Read a chat-completions request body.

    Raises:
        RequestError: The body is not JSON, or not a JSON object that Python reads (nested too
            deep, a number of more than 4300 digits), or ``model``, ``messages``, ``stream`` or
            ``max_tokens`` is missing or of the wrong type.
    """
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"the body is not valid JSON: {exc}"
        raise RequestError(msg) from None
    except RecursionError:
        msg = "the body nests arrays or objects too deep to read"
        raise RequestError(msg) from None
    except Exception as exc:  # e.g. ValueError: an integer of more than 4300 digits
        reason = str(exc).split(";", 1)[0] or type(exc).__name__
        msg = f"the body cannot be read as JSON: {reason}"
        raise RequestError(msg) from None
    if not isinstance(doc, dict):
        msg = f"the body must be a JSON object, got {type(doc).__name__}"
        raise RequestError(msg)
    model, messages, stream = doc.get("model"), doc.get("messages"), doc.get("stream", False)
    if not isinstance(model, str) or not model:
        msg = "'model' must be a non-empty string"
        raise RequestError(msg, "model")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        msg = "'messages' must be a list of message objects"
        raise RequestError(msg, "messages")
    if not isinstance(stream, bool):
        msg = "'stream' must be true or false"
        raise RequestError(msg, "stream")
    max_tokens = doc.get("max_completion_tokens", doc.get("max_tokens"))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        msg = "'max_tokens' must be a whole number >= 1"
        raise RequestError(msg, "max_tokens")
    prompt = sum(_text_words(m.get("content")) for m in messages)
    return ChatRequest(model, stream, max_tokens, prompt)


def word(index: int) -> str:
    """
    The ``index``-th token of every answer: a word, with a space before all but the first.
    """
    text = _WORDS[index % len(_WORDS)]
    return text if index == 0 else " " + text


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """
    The ``usage`` object.
    """
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    call_id: str, model: str, created: int, *, tokens: int, finish: str, prompt_tokens: int
) -> dict[str, Any]:
    """
    A whole ``chat.completion`` answer of ``tokens`` words.
    """
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "".join(word(i) for i in range(tokens)),
                },
                "finish_reason": finish,
            }
        ],
        "usage": usage(prompt_tokens, tokens),
    }


def chunk(
    call_id: str,
    model: str,
    created: int,
    delta: dict[str, str],
    *,
    finish: str | None = None,
    usage_: dict[str, int] | None = None,
) -> dict[str, Any]:
    """
    One ``chat.completion.chunk`` of a stream.
    """
    out: dict[str, Any] = {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage_ is not None:
        out["usage"] = usage_
    return out


def sse(payload: dict[str, Any]) -> bytes:
    """
    One server-sent event carrying ``payload`` as JSON.
    """
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def error(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """
    An OpenAI-style error body.
    """
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def models_list(ids: list[str]) -> dict[str, Any]:
    """
    The ``GET /v1/models`` answer.
    """
    return {
        "object": "list",
        "data": [
            {"id": i, "object": "model", "created": 0, "owned_by": "tailkit-serve"} for i in ids
        ],
    }
