"""
The OpenAI chat-completions wire format: the request we accept and the bodies we answer.

`OpenAI` is the `Api` of ``POST /v1/chat/completions``; the errors it renders are also what
the routes that belong to no API answer (``/v1/models``, an unknown path).
"""

from __future__ import annotations

from typing import Any

from tailkit.serve._api import (
    ChatRequest,
    Reply,
    RequestError,
    load_request,
    max_tokens,
    text_words,
)


__all__ = [
    "DONE",
    "ChatRequest",
    "OpenAI",
    "RequestError",
    "chunk",
    "error",
    "models_list",
    "parse_chat",
    "word",
]

DONE = b"data: [DONE]\n\n"
_WORDS = (
    "the", "tail", "of", "latency", "is", "where", "deadlines", "are", "lost", "so", "we",
    "measure", "it", "cut", "slow", "calls", "early", "and", "hedge", "them", "on", "another",
    "route", "within", "a", "budget",
)  # fmt: skip


def parse_chat(body: bytes) -> ChatRequest:
    """
    Read a chat-completions request body.

    Raises:
        RequestError: The body is not a JSON object (see `load_request`), or ``model``,
            ``messages``, ``stream`` or ``max_tokens`` is missing or of the wrong type.
    """
    doc, model, messages, stream = load_request(body)
    cap = max_tokens(doc.get("max_completion_tokens", doc.get("max_tokens")), required=False)
    prompt = sum(text_words(m.get("content")) for m in messages)
    return ChatRequest(model, stream, cap, prompt)


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


def chunk(
    reply: Reply,
    delta: dict[str, str],
    *,
    finish: str | None = None,
    usage_: dict[str, int] | None = None,
) -> dict[str, Any]:
    """
    One ``chat.completion.chunk`` of a stream.
    """
    out: dict[str, Any] = {
        "id": f"chatcmpl-{reply.call_id}",
        "object": "chat.completion.chunk",
        "created": reply.created,
        "model": reply.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage_ is not None:
        out["usage"] = usage_
    return out


def error(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """
    An OpenAI-style error body.
    """
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class OpenAI:
    """
    The chat-completions API as an `Api`: ``POST /v1/chat/completions``.
    """

    path = "/v1/chat/completions"
    end = DONE

    def parse(self, body: bytes) -> ChatRequest:
        """
        Read a chat-completions request body (`parse_chat`).
        """
        return parse_chat(body)

    def error(
        self, status: int, message: str, *, type_: str, code: str | None = None,
        param: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """
        An OpenAI error body (the status is in the status line only).
        """
        return error(message, type_, code, param)

    def whole(self, reply: Reply, *, text: str, tokens: int, finish: str) -> dict[str, Any]:
        """
        A whole ``chat.completion``.
        """
        return {
            "id": f"chatcmpl-{reply.call_id}",
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": usage(reply.prompt_tokens, tokens),
        }

    def opening(self, reply: Reply) -> list[dict[str, Any]]:
        """
        The role chunk.
        """
        return [chunk(reply, {"role": "assistant", "content": ""})]

    def delta(self, reply: Reply, text: str) -> dict[str, Any]:
        """
        A chunk of content.
        """
        return chunk(reply, {"content": text})

    def closing(self, reply: Reply, *, tokens: int, finish: str) -> list[dict[str, Any]]:
        """
        The chunk with the finish reason and the usage.
        """
        return [chunk(reply, {}, finish=finish, usage_=usage(reply.prompt_tokens, tokens))]

    def strip(self, payload: dict[str, Any]) -> None:
        """
        Remove ``choices``.
        """
        payload.pop("choices", None)

    def frame(self, payload: dict[str, Any], data: bytes) -> bytes:
        """
        ``data: …``: chat completions name no events.
        """
        return b"data: " + data + b"\n\n"


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
