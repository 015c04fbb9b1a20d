"""
Reading what OpenAI-compatible servers send back: answers, chunks, errors, Retry-After.

Standard library only (plus the executor's `AttemptError`), so it is tested without httpx.
"""

from __future__ import annotations

import json
import re

from collections.abc import Mapping
from typing import Any

from tailkit.adapters._sse import DONE
from tailkit.executor import AttemptError
from tailkit.executor.lowlevel import retry_after_from


CLIP_CHARS = 300  # characters of a provider's message kept in an error
_INK = re.compile(r"\S")  # where a text's first word starts


def loads(text: str) -> Any:
    """
    The JSON value of ``text``, or ``None`` when it is not JSON.
    """
    try:
        return json.loads(text)
    except ValueError:
        return None


def error_message(body: Any) -> str | None:
    """
    The message of an error object, or ``None`` when the body is not one.

    OpenAI, Azure and gateways send ``{"error": {"message": …}}`` (or ``{"error": "…"}``),
    older vLLM ``{"object": "error", "message": …}``, FastAPI servers ``{"detail": …}``.
    """
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return str(message) if message else json.dumps(error)
    if isinstance(error, str) and error:
        return error
    if body.get("object") == "error":
        return str(body.get("message") or json.dumps(body))
    if "detail" in body and "choices" not in body:
        return str(body["detail"])
    return None


def clip(text: str) -> str:
    """
    ``text`` on one line, at most `CLIP_CHARS` characters (an ellipsis marks a cut).

    Only its start is read: splitting a body of megabytes into words to keep 300 characters
    would cost more memory than the body.
    """
    start = _INK.search(text)
    if start is None:
        return ""
    head = text[start.start() : start.start() + 8 * CLIP_CHARS]
    line = " ".join(head.split())
    if len(line) <= CLIP_CHARS and start.start() + len(head) >= len(text):
        return line
    if len(line) >= CLIP_CHARS:
        return line[: CLIP_CHARS - 1] + "…"
    return line[: CLIP_CHARS - 2] + " …"  # the rest, past a long run of spaces, not read


def retry_after_s(headers: Mapping[str, str], *, now_wall: float | None = None) -> float | None:
    """
    Seconds the server asks to wait, or ``None`` when it does not say (or says nonsense).

    ``retry-after-ms`` (OpenAI, Azure) wins over ``Retry-After``, which is seconds or an HTTP
    date. A date in the past gives 0. (The executor's reading, which also reads the headers
    of an SDK's exception.)

    Args:
        headers: Response headers (a case-insensitive mapping, such as httpx's).
        now_wall: Wall-clock epoch seconds now, for a date (``None``: ``time.time()``).
    """
    return retry_after_from(headers, now_wall=now_wall)


def answer_of(text: str, http_status: int, where: str) -> dict[str, Any]:
    """
    A non-streamed answer, checked: JSON, no error object, a ``choices[0].message``.
    """
    body = loads(text)
    if body is None and text.strip() != "null":
        msg = f"{where}: the answer is not JSON: {clip(text)!r}"
        raise AttemptError(msg, status="invalid", http_status=http_status)
    error = error_message(body)
    if error is not None:
        msg = f"{where}: error in a {http_status} answer: {clip(error)}"
        raise AttemptError(msg, http_status=http_status)
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(body, dict) or not isinstance(first, dict) or "message" not in first:
        msg = f"{where}: the answer has no choices[0].message: {clip(text)!r}"
        raise AttemptError(msg, status="invalid", http_status=http_status)
    return body


def chunk_of(event: str, data: str, where: str) -> dict[str, Any] | None:
    """
    One SSE event as a chunk dict (``None`` for ``[DONE]``), checked like an answer.
    """
    if data.strip() == DONE:
        return None
    chunk = loads(data)
    if chunk is None:
        msg = f"{where}: a stream event is not JSON: {clip(data)!r}"
        raise AttemptError(msg, status="invalid")
    error = error_message(chunk)
    if event == "error" or error is not None:
        msg = f"{where}: error in the stream: {clip(error or data)}"
        raise AttemptError(msg, status="error")
    if not isinstance(chunk, dict) or ("choices" not in chunk and "usage" not in chunk):
        msg = f"{where}: a stream chunk has no choices: {clip(data)!r}"
        raise AttemptError(msg, status="invalid")
    return chunk
