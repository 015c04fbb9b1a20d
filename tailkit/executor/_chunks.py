"""
Reading a stream's chunks: content, the terminal marker and usage, whatever produced them.

The executor reads a chunk for three things: whether it is *content* (the first token, a sign
of progress that resets the stall timer), whether it is the stream's *terminal marker* (a
stream that ends without one was cut: a failure, never a short answer) and the *usage* the
provider reports. Attempt functions yield what they have, so the reader knows these shapes,
as objects or as the dicts their ``model_dump()`` gives:

- `Chunk` and `FINAL`; plain strings (``"[DONE]"`` is the terminal line);
- OpenAI chat chunks (``ChatCompletionChunk``, ``choices[0].delta``): content is
  ``delta.content`` (tool-call and reasoning deltas are progress without text); the end is a
  ``finish_reason``;
- OpenAI Responses events (``type: response.*``): ``response.output_text.delta`` is content,
  other deltas progress; the end is ``response.completed`` (or ``response.incomplete``, an
  answer capped by its token limit); ``response.failed`` and ``error`` are the provider's
  failure;
- Anthropic message events: ``content_block_delta`` is content (text) or progress (tool input,
  thinking); the end is ``message_stop``; usage arrives in ``message_start`` and
  ``message_delta``; ``ping`` is a keep-alive, ``error`` the provider's failure. The derived
  events of the SDK's ``messages.stream()`` helper (``text``, ``thinking``, ``input_json``, …)
  repeat a raw event beside them, so they are read as keep-alives, not counted twice.

It reads them by their fields, never by importing an SDK: the executor stays standard-library
only. Anything else raises `UnreadableChunk`, which names what the executor can read: a chunk
of an unknown shape counted as content would make a cut stream look whole, or an empty answer
look fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from tailkit.executor._types import DONE_TEXT, AttemptError, Chunk


__all__ = ["Read", "UnreadableChunk", "answer_usage", "read_chunk"]

CONTENT, PROGRESS, META, KEEPALIVE, FINAL_KIND = "content", "progress", "meta", "keepalive", "final"

# the derived events of anthropic's messages.stream() helper: each repeats a raw event
_ANTHROPIC_DERIVED = frozenset({"text", "thinking", "signature", "citation", "input_json"})
# delta fields of a chat chunk that show work without answer text
_CHAT_PROGRESS = (
    "tool_calls", "function_call", "reasoning_content", "reasoning", "refusal", "audio",
)  # fmt: skip
_CHAT_CHUNK = "chat.completion.chunk"
_MAPPING: dict[type, bool] = {dict: True, type(None): False}  # is a chunk type a mapping?
_TYPES_KEPT = 256  # chunk classes remembered (a stream has a handful)
_RESPONSES_END = frozenset({"response.completed", "response.incomplete"})


class Read(NamedTuple):
    """
    What the executor reads in one chunk (a named tuple: read for every chunk, made cheaply).

    Args:
        content: The chunk shows the answer progressing (a first token; resets the stall
            timer): text, but also tool-call arguments or reasoning.
        text: Its answer text (``""`` when it has none).
        tokens: Output tokens it carries (content chunks count one unless they say).
        final: It is the stream's terminal marker.
        usage: Provider usage it reports, as ``input_tokens`` / ``output_tokens``.
        finish_reason: Why the answer ended, when the chunk says (``stop``, ``end_turn``, …).
    """

    content: bool = False
    text: str = ""
    tokens: int = 0
    final: bool = False
    usage: Mapping[str, int] | None = None
    finish_reason: str | None = None


_NOTHING = Read()
_FINAL = Read(final=True)
_PROGRESS = Read(content=True, tokens=1)


class UnreadableChunk(TypeError):  # noqa: N818 - reads as what happened
    """
    A stream yielded a chunk of a shape the executor cannot read (the caller's code to fix).
    """

    def __init__(self, step: str, chunk: object) -> None:
        shape = type(chunk).__name__
        typed = _get(chunk, "type")
        if isinstance(typed, str):
            shape += f" (type {typed!r})"
        msg = (
            f"step {step!r}: the executor cannot read a stream chunk of type {shape}: yield "
            "strings or tailkit.executor.Chunk objects and then FINAL once the provider has "
            "ended the stream, or the provider SDK's own chunks as they come (OpenAI chat "
            "chunks, Responses events, Anthropic message events), or use the attempt "
            "functions of tailkit.adapters.openai_sdk / anthropic_sdk"
        )
        super().__init__(msg)


def read_chunk(chunk: object, step: str = "?") -> Read:
    """
    Read one chunk of a stream.

    Args:
        chunk: What the attempt function yielded.
        step: The step's name, for the error message.

    Raises:
        UnreadableChunk: The chunk has no shape the executor knows.
        AttemptError: The chunk is the provider's error event (``error``, ``response.failed``).
    """
    if isinstance(chunk, Chunk):
        if chunk.kind == FINAL_KIND:
            return Read(final=True, usage=_usage(chunk.usage))
        if chunk.kind == CONTENT and chunk.text:
            tokens = 1 if chunk.tokens is None else chunk.tokens
            return Read(True, chunk.text, tokens, usage=_usage(chunk.usage))
        return Read(usage=_usage(chunk.usage))
    if isinstance(chunk, str | bytes):
        text = chunk.decode() if isinstance(chunk, bytes) else chunk
        if text.strip() == DONE_TEXT:
            return _FINAL
        return Read(True, text, 1) if text else _NOTHING
    shape = _shape(chunk)
    if shape == _CHAT:
        return _chat(chunk)
    if shape == _EVENT:
        read = _event(_get(chunk, "type"), chunk)
        if read is not None:
            return read
        if _from_sdk(chunk):  # an event type newer than this reader: neither text nor the end
            return _NOTHING
    elif isinstance(chunk, Mapping) and "usage" in chunk:
        return Read(usage=_usage(chunk["usage"]))  # a gateway's usage-only chunk
    raise UnreadableChunk(step, chunk)


_CHAT, _EVENT = "chat", "event"
_SHAPES: dict[type, str | None] = {}  # an SDK class has one shape: found once, kept


def _shape(chunk: object) -> str | None:
    """
    ``chat`` (an OpenAI chat chunk), ``event`` (a typed stream event) or ``None``.

    Found once per class for objects (asking a model for a field it lacks raises inside
    pydantic, which costs more than reading the chunk); a dict's keys say it each time.
    """
    kind = type(chunk)
    if kind in _SHAPES:
        return _SHAPES[kind]
    if isinstance(_get(chunk, "choices"), list) or _get(chunk, "object") == _CHAT_CHUNK:
        shape: str | None = _CHAT
    else:
        shape = _EVENT if isinstance(_get(chunk, "type"), str) else None
    if not isinstance(chunk, Mapping) and len(_SHAPES) < _TYPES_KEPT:
        _SHAPES[kind] = shape
    return shape


def _from_sdk(chunk: object) -> bool:
    """
    Whether a chunk is an object of a provider SDK (its class is defined in one).
    """
    return (type(chunk).__module__ or "").split(".")[0] in ("openai", "anthropic")


def answer_usage(answer: object) -> Mapping[str, int] | None:
    """
    The usage of a non-streamed answer (an SDK's response object or its dict), if it has one.
    """
    # a tuple, not a union: isinstance takes half the time, on every non-streamed answer
    if answer is None or isinstance(answer, (str, bytes, int, float)):
        return None
    return _usage(_get(answer, "usage"))


def _get(obj: Any, name: str) -> Any:
    """
    A field of a dict or an attribute of an object (an SDK model), or ``None``.
    """
    kind = type(obj)
    mapping = _MAPPING.get(kind)
    if mapping is None:  # an ABC's isinstance costs more than reading the chunk: once a type
        mapping = isinstance(obj, Mapping)
        if len(_MAPPING) < _TYPES_KEPT:
            _MAPPING[kind] = mapping
    return obj.get(name) if mapping else getattr(obj, name, None)


def _usage(usage: object) -> Mapping[str, int] | None:
    """
    Usage as ``input_tokens`` / ``output_tokens``.

    OpenAI chat's ``prompt_tokens`` / ``completion_tokens`` are renamed; Anthropic's cached
    input tokens are added to its input.
    """
    if usage is None:
        return None
    out: dict[str, int] = {}
    for name, names in (
        ("input_tokens", ("input_tokens", "prompt_tokens")),
        ("output_tokens", ("output_tokens", "completion_tokens")),
    ):
        for key in names:
            value = _get(usage, key)
            if isinstance(value, int) and not isinstance(value, bool):
                out[name] = value
                break
    if "input_tokens" in out:
        for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            cached = _get(usage, key)
            if isinstance(cached, int) and not isinstance(cached, bool):
                out["input_tokens"] += cached
    return out or None


def _chat(chunk: object) -> Read:
    """
    An OpenAI chat chunk (or completions chunk): content, progress, the finish reason.

    Tool-call and reasoning deltas are progress without text; the finish reason ends the
    stream also when the same chunk carries the last content.
    """
    usage = _usage(_get(chunk, "usage"))
    choices = _get(chunk, "choices")
    if not isinstance(choices, list) or not choices:
        return Read(usage=usage)  # the usage chunk after the finish reason, or a heartbeat
    first = choices[0]
    finish = _get(first, "finish_reason")
    finish = finish if isinstance(finish, str) and finish else None
    delta = _get(first, "delta")
    if delta is None:  # a whole message (non-streamed shape) or a completions chunk
        delta = _get(first, "message")
    text = _get(delta, "content") if delta is not None else _get(first, "text")
    text = text if isinstance(text, str) else ""
    progress = bool(text) or any(_get(delta, name) for name in _CHAT_PROGRESS)
    return Read(progress, text, 1 if progress else 0, finish is not None, usage, finish)


def _event(typed: str, event: object) -> Read | None:
    """
    An OpenAI Responses or Anthropic stream event; ``None`` for a type neither has.
    """
    if typed.startswith("response."):
        return _responses(typed, event)
    if typed == "content_block_delta":
        delta = _get(event, "delta")
        if delta is None:
            raise _provider_error(event, "a content_block_delta without its delta")
        if _get(delta, "type") != "text_delta":  # tool input, thinking: progress, no text
            return _PROGRESS
        text = _get(delta, "text")
        return Read(True, text, 1) if isinstance(text, str) and text else _NOTHING
    if typed == "message_stop":
        return _FINAL
    if typed == "message_delta":
        reason = _get(_get(event, "delta"), "stop_reason")
        return Read(usage=_usage(_get(event, "usage")), finish_reason=reason or None)
    if typed == "message_start":
        return Read(usage=_usage(_get(_get(event, "message"), "usage")))
    if typed in ("content_block_start", "content_block_stop", "ping") or typed in (
        _ANTHROPIC_DERIVED
    ):
        return _NOTHING
    if typed == "error":
        raise _provider_error(_get(event, "error") or event)
    return None


def _responses(typed: str, event: object) -> Read:
    if typed == "response.output_text.delta":
        text = _get(event, "delta")
        return Read(True, text, 1) if isinstance(text, str) and text else _NOTHING
    if typed in _RESPONSES_END:
        response = _get(event, "response")
        usage = _usage(_get(response, "usage"))
        reason = "completed"
        if typed == "response.incomplete":
            reason = _get(_get(response, "incomplete_details"), "reason") or "incomplete"
        return Read(final=True, usage=usage, finish_reason=reason)
    if typed == "response.failed":
        raise _provider_error(_get(_get(event, "response"), "error") or event, "response failed")
    if typed.endswith(".delta"):  # tool-call arguments, reasoning, refusal, audio: progress
        return _PROGRESS
    return _NOTHING


def _provider_error(error: object, what: str = "error event") -> AttemptError:
    """
    The provider's error event in a stream, as the attempt's failure.
    """
    kind = _get(error, "code") or _get(error, "type")
    message = _get(error, "message") or error
    status = "rate_limited" if kind in ("rate_limit_error", "rate_limit_exceeded") else "error"
    text = " ".join(str(message).split())[:300]
    return AttemptError(f"{what} in the stream ({kind or 'no type'}): {text}", status=status)
