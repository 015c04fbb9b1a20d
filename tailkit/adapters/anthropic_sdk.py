"""
An attempt function over the official ``anthropic`` SDK: the Messages API, streamed or not.

``await executor.run_step("draft", anthropic_messages_attempt(client, messages,
max_tokens=1024))`` sends each attempt through your ``AsyncAnthropic`` client (its key, base
URL and HTTP client are yours); what the executor owns is set per attempt, as for the OpenAI
SDK (`tailkit.adapters.openai_sdk`):

- the attempt's model, and its deadline headers and ``Idempotency-Key`` as extra headers;
- no SDK retries (a copy of the client with ``max_retries=0``; your client is unchanged);
- the SDK's timeout is what is left of the run's deadline, and every read of a stream is also
  cut at the deadline itself;
- every SDK exception is an `AttemptError`: ``RateLimitError`` is ``rate_limited`` with the
  Retry-After of its response, ``APITimeoutError`` ``timeout``, ``APIConnectionError``,
  ``OverloadedError`` (529) and other 5xx ``error`` with the HTTP status, an ``error`` event
  inside the stream ``error`` (``rate_limited`` when its type is ``rate_limit_error``), a
  malformed event (the SDK's ``json.JSONDecodeError``) ``error``.

A stream yields the SDK's raw events (``message_start``, ``content_block_delta``, …,
``message_stop``), which the executor reads: text deltas are content (tool input and thinking
deltas are progress without text), ``message_stop`` is the end, usage comes from
``message_start`` and ``message_delta``. The SDK ends a cut stream silently; the executor calls
a stream without ``message_stop`` truncated, a failure retried like any other. The step's
result is a `StreamResult` (``text``, ``output_tokens``, ``input_tokens`` with cached input
tokens included, ``finish_reason`` = the ``stop_reason``), or, not streamed, the ``Message``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tailkit.adapters._sdk import answer, check_params, request_options, stream, without_retries
from tailkit.errors import ConfigError, MissingExtraError
from tailkit.executor import Attempt


try:
    import anthropic
except ImportError as exc:
    _msg = "tailkit.adapters.anthropic_sdk needs the anthropic SDK: pip install anthropic"
    raise MissingExtraError(_msg) from exc


__all__ = ["AnthropicMessagesAttempt", "anthropic_messages_attempt"]

Messages = Callable[[Attempt], Any] | list[dict[str, Any]]


class AnthropicMessagesAttempt:
    """
    An attempt function over ``client.messages.create``; made by `anthropic_messages_attempt`.
    """

    __slots__ = ("_client", "_where", "max_tokens", "messages", "params", "stream")

    def __init__(
        self, client: Any, messages: Messages, *, max_tokens: int, stream: bool, params: Any
    ) -> None:
        check_params(params, ("model", "messages", "stream", "max_tokens"))
        if not isinstance(client, anthropic.AsyncAnthropic):
            msg = f"{{field}} must be an anthropic.AsyncAnthropic, got {client!r}"
            fix = None
            if isinstance(client, anthropic.Anthropic):
                msg += ":"
                fix = "the executor is async, use anthropic.AsyncAnthropic"
            raise ConfigError(msg, field="client", value=client, fix=fix)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            msg = f"{{field}} must be a positive integer, got {max_tokens!r}."
            fix = "Pass the most tokens an answer may have, 1 or more (the Messages API needs it)."
            raise ConfigError(msg, field="max_tokens", value=max_tokens, fix=fix)
        self._client = without_retries(client, what="anthropic.AsyncAnthropic")
        self._where = f"{str(self._client.base_url).rstrip('/')}/v1/messages"
        self.messages, self.max_tokens = messages, max_tokens
        self.stream, self.params = stream, dict(params)

    def __repr__(self) -> str:
        return f"AnthropicMessagesAttempt({self._where!r}, stream={self.stream})"

    def __call__(self, attempt: Attempt) -> AsyncIterator[Any] | Awaitable[Any]:
        """
        Send one attempt: a stream of message events, or a ``Message``.
        """
        where = f"{attempt.route} at {self._where}"
        messages = self.messages(attempt) if callable(self.messages) else self.messages

        def send() -> Awaitable[Any]:
            options = request_options(attempt, where, self.params)
            return self._client.messages.create(  # type: ignore[no-any-return]
                **{**self.params, **options}, model=attempt.model, messages=messages,
                max_tokens=self.max_tokens, stream=self.stream,
            )  # fmt: skip

        if self.stream:
            return stream(attempt, where, send)
        return answer(attempt, where, send, field="content")


def anthropic_messages_attempt(
    client: Any, messages: Messages, *, max_tokens: int, stream: bool = True, **params: Any
) -> AnthropicMessagesAttempt:
    """
    An attempt function that sends each attempt to ``client.messages.create``.

    Args:
        client: Your ``anthropic.AsyncAnthropic`` client; the adapter sends through a copy of
            it with ``max_retries=0`` and never closes it.
        messages: The messages, or a function of the `Attempt` that returns them (to use
            ``attempt.inputs``, the results of the steps this one depends on).
        max_tokens: The most output tokens an answer may have (the API requires it).
        stream: Stream the events: the executor then sees the first token and the token rate,
            and can cut a stalled stream. ``False``: one ``Message``.
        **params: Any other argument of ``create`` (``system``, ``temperature``, ``tools``,
            ``thinking``, ``extra_headers``, …). Not ``model``, ``messages``, ``max_tokens``,
            ``stream`` (the adapter's) nor ``timeout`` (the attempt's deadline sets it).

    Returns:
        The attempt function: each call returns an async iterator of the SDK's raw message
        events (the step's result is then a `StreamResult`) or an awaitable of the ``Message``.

    Raises:
        ConfigError: ``client`` is not an async Anthropic client, ``max_tokens`` is not a
            positive integer, or ``params`` sets what the adapter sets.

    Example::

        client = anthropic.AsyncAnthropic()
        call = anthropic_messages_attempt(client, [{"role": "user", "content": "hi"}],
                                          max_tokens=1024)
        with deadline_after(20):
            answer = await executor.run_step("draft", call)   # answer.text
    """
    return AnthropicMessagesAttempt(
        client, messages, max_tokens=max_tokens, stream=stream, params=params
    )
