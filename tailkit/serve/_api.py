"""
What a provider API is to the server: the request it reads and the bodies and events it answers.

The server speaks two APIs, OpenAI's chat completions (`tailkit.serve._openai`) and Anthropic's
Messages (`tailkit.serve._anthropic`), and does everything else once: the draws, the deadline,
the schedule of a stream, the faults and the access-log record are the same whichever API a
request came in by. An `Api` only renders: a request body into a `ChatRequest`, an answer into
its body or its stream of events, an error into the API's error object. A fault is shaped the
same way in both: a malformed chunk is an event whose ``data:`` is cut inside its JSON, a
schema-invalid one has lost its content (`Api.strip`), and a cut stream stops before its
terminal event (`Api.end`).
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from typing import Any, Protocol


__all__ = [
    "Api",
    "ChatRequest",
    "Reply",
    "RequestError",
    "compact",
    "load_request",
    "max_tokens",
    "text_words",
]


class RequestError(ValueError):
    """
    The body is not a request of the API; ``param`` names the field at fault.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """
    What the server reads from a request body, whichever its API.

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


@dataclass(frozen=True, slots=True)
class Reply:
    """
    What every body and event of one answer carries: its id, model, time and prompt size.

    Args:
        call_id: The server's request id (the API prefixes it: ``chatcmpl-``, ``msg_``).
        model: The model id answered.
        created: Epoch seconds, whole.
        prompt_tokens: The prompt's size, for the usage.
    """

    call_id: str
    model: str
    created: int
    prompt_tokens: int


class Api(Protocol):
    """
    One provider API's wire format (see the module's docstring).
    """

    @property
    def path(self) -> str:
        """
        The route its requests arrive on, e.g. ``/v1/chat/completions``.
        """
        ...

    @property
    def end(self) -> bytes:
        """
        The bytes that end a whole stream (OpenAI's ``data: [DONE]``): a cut stream lacks them.
        """
        ...

    def parse(self, body: bytes) -> ChatRequest:
        """
        Read a request body.

        Raises:
            RequestError: It is not a request of this API.
        """
        ...

    def error(
        self, status: int, message: str, *, type_: str, code: str | None = None,
        param: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """
        The error body answered with HTTP ``status``.

        Args:
            status: The HTTP status.
            message: What went wrong, for people.
            type_: OpenAI's error type (an API with types of its own derives them from the
                status).
            code: OpenAI's machine-readable code.
            param: The request field at fault.
        """
        ...

    def whole(self, reply: Reply, *, text: str, tokens: int, finish: str) -> dict[str, Any]:
        """
        A whole (not streamed) answer.

        Args:
            reply: What every body of the answer carries.
            text: The answer's text.
            tokens: Its completion tokens, for the usage.
            finish: ``stop``, or ``length`` when ``max_tokens`` cut it (OpenAI's words).
        """
        ...

    def opening(self, reply: Reply) -> list[dict[str, Any]]:
        """
        The events a stream opens with, sent with its first content (never broken by a fault).
        """
        ...

    def delta(self, reply: Reply, text: str) -> dict[str, Any]:
        """
        One event of content.
        """
        ...

    def closing(self, reply: Reply, *, tokens: int, finish: str) -> list[dict[str, Any]]:
        """
        The events after the last content, before `end`: the finish reason and the usage.
        """
        ...

    def strip(self, payload: dict[str, Any]) -> None:
        """
        Remove the content from a body or an event: the ``schema_invalid`` fault.
        """
        ...

    def frame(self, payload: dict[str, Any], data: bytes) -> bytes:
        """
        The server-sent event of ``payload`` whose ``data:`` line is ``data``.

        ``data`` is the payload's JSON, or the broken part of it a fault sends.
        """
        ...


def load_request(body: bytes) -> tuple[dict[str, Any], str, list[dict[str, Any]], bool]:
    """
    A request body's JSON object, ``model``, ``messages`` and ``stream``: what both APIs share.

    Raises:
        RequestError: The body is not JSON, or not a JSON object that Python reads (nested too
            deep, a number of more than 4300 digits), or ``model``, ``messages`` or ``stream``
            is missing or of the wrong type.
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
    return doc, model, messages, stream


def max_tokens(value: object, *, required: bool) -> int | None:
    """
    The cap on completion tokens, checked: a whole number >= 1 (or ``None`` when not required).

    Raises:
        RequestError: It is missing though ``required``, or not a whole number >= 1.
    """
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = "'max_tokens' must be a whole number >= 1"
        raise RequestError(msg, "max_tokens")
    return value


def text_words(content: object) -> int:
    """
    Words in a message's content: a string, or content parts ``[{"type": "text", "text": …}]``.
    """
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, dict))
        return sum(len(text.split()) for text in texts if isinstance(text, str))
    return 0


def compact(payload: dict[str, Any]) -> bytes:
    """
    ``payload`` as compact JSON, the way every body and event is written.
    """
    return json.dumps(payload, separators=(",", ":")).encode()
