"""
Anthropic's Messages API wire format: ``POST /v1/messages``, its bodies, events and errors.

A whole answer is a ``message`` with one text block. A stream is Anthropic's named events::

    event: message_start        the message, empty, with the input usage
    event: content_block_start  a text block at index 0
    event: ping
    event: content_block_delta  text_delta, one per chunk of tokens
    event: content_block_stop
    event: message_delta        stop_reason and the output usage
    event: message_stop         the end: a cut stream has none

An error is ``{"type": "error", "error": {"type": …, "message": …}}``, its type read from the
HTTP status as Anthropic's are (429 ``rate_limit_error``, 500 ``api_error``, 529
``overloaded_error``, …). The request must carry ``max_tokens``, as Anthropic's does; the
``anthropic-version`` and ``x-api-key`` headers are not checked.
"""

from __future__ import annotations

from typing import Any

from tailkit.serve._api import ChatRequest, Reply, compact, load_request, max_tokens, text_words


__all__ = ["Anthropic"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def _message(
    reply: Reply, content: list[dict[str, Any]], stop: str | None, output_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"msg_{reply.call_id}",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": output_tokens},
    }


def _text(text: str, type_: str = "text") -> dict[str, str]:
    return {"type": type_, "text": text}


class Anthropic:
    """
    The Messages API as an `Api` (see the module's docstring).
    """

    path = "/v1/messages"
    end = b"event: message_stop\ndata: " + compact({"type": "message_stop"}) + b"\n\n"

    def parse(self, body: bytes) -> ChatRequest:
        """
        Read a Messages request body: the prompt is the messages' text and the ``system``'s.

        Raises:
            RequestError: The body is not a JSON object (see `load_request`), or ``model``,
                ``messages``, ``stream`` or ``max_tokens`` is missing or of the wrong type.
        """
        doc, model, messages, stream = load_request(body)
        cap = max_tokens(doc.get("max_tokens"), required=True)
        prompt = text_words(doc.get("system")) + sum(text_words(m.get("content")) for m in messages)
        return ChatRequest(model, stream, cap, prompt)

    def error(
        self, status: int, message: str, *, type_: str, code: str | None = None,
        param: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """
        An Anthropic error object, its type read from ``status`` (OpenAI's ``type_`` unused).
        """
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def whole(self, reply: Reply, *, text: str, tokens: int, finish: str) -> dict[str, Any]:
        """
        A whole ``message`` with one text block.
        """
        content = [_text(text)]
        return _message(reply, content, _STOP_REASONS.get(finish, finish), tokens)

    def opening(self, reply: Reply) -> list[dict[str, Any]]:
        """
        ``message_start``, ``content_block_start`` and a ``ping``.
        """
        return [
            {"type": "message_start", "message": _message(reply, [], None, 0)},
            {"type": "content_block_start", "index": 0, "content_block": _text("")},
            {"type": "ping"},
        ]

    def delta(self, reply: Reply, text: str) -> dict[str, Any]:
        """
        A ``content_block_delta`` of ``text_delta``.
        """
        return {"type": "content_block_delta", "index": 0, "delta": _text(text, "text_delta")}

    def closing(self, reply: Reply, *, tokens: int, finish: str) -> list[dict[str, Any]]:
        """
        ``content_block_stop`` and the ``message_delta`` with the stop reason and usage.
        """
        delta = {"stop_reason": _STOP_REASONS.get(finish, finish), "stop_sequence": None}
        usage = {"input_tokens": reply.prompt_tokens, "output_tokens": tokens}
        return [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": delta, "usage": usage},
        ]

    def strip(self, payload: dict[str, Any]) -> None:
        """
        Remove ``content`` (a message) or ``delta`` (an event).
        """
        payload.pop("content", None)
        payload.pop("delta", None)

    def frame(self, payload: dict[str, Any], data: bytes) -> bytes:
        """
        ``event: <type>`` then ``data: …``: the SDKs dispatch on the event's name.
        """
        return b"event: " + str(payload["type"]).encode() + b"\ndata: " + data + b"\n\n"
