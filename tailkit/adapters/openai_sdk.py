"""
Attempt functions over the official ``openai`` SDK: chat completions and the Responses API.

``await executor.run_step("draft", openai_chat_attempt(client, messages))`` sends each attempt
through your ``AsyncOpenAI`` (or ``AsyncAzureOpenAI``) client, so its API key, base URL, proxy
and HTTP client are yours; what the executor owns is set per attempt:

- the attempt's model (``attempt.model``), and its deadline headers and ``Idempotency-Key``
  as extra headers beside any you give;
- no SDK retries (a copy of the client with ``max_retries=0``: your client is unchanged): the
  executor retries, hedges and fails over from the plan, each attempt on the ledger;
- the SDK's timeout is what is left of the run's deadline, and every read of a stream is also
  cut at the deadline itself;
- every SDK exception is an `AttemptError` with the status the executor acts on: a
  ``RateLimitError`` is ``rate_limited`` with the Retry-After of its response (the provider
  rests), ``APITimeoutError`` ``timeout``, ``APIConnectionError`` and 5xx ``error`` (with the
  HTTP status), a malformed stream chunk (the SDK's ``json.JSONDecodeError``) ``error``.

A stream yields the SDK's own chunks (``ChatCompletionChunk``; Responses events), which the
executor reads: content, the terminal event (a ``finish_reason``; ``response.completed``) and
usage. The SDK ends a cut stream silently; the executor calls a stream without its terminal
event truncated, a failure retried like any other. The step's result is a `StreamResult`
(``text``, ``output_tokens``, ``input_tokens``, ``finish_reason``, and ``final``: the terminal
chunk, for the Responses API the ``response.completed`` event with the whole response), or,
not streamed, the SDK's response object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tailkit.adapters._bodies import clip
from tailkit.adapters._sdk import (
    answer,
    check_params,
    request_options,
    stream,
    without_retries,
)
from tailkit.errors import ConfigError, MissingExtraError
from tailkit.executor import Attempt, AttemptError


try:
    import openai
except ImportError as exc:
    _msg = "tailkit.adapters.openai_sdk needs the openai SDK: pip install openai"
    raise MissingExtraError(_msg) from exc


__all__ = [
    "OpenAIChatAttempt",
    "OpenAIResponsesAttempt",
    "openai_chat_attempt",
    "openai_responses_attempt",
]

Messages = Callable[[Attempt], Any] | list[dict[str, Any]]


def _client(client: Any) -> Any:
    if not isinstance(client, openai.AsyncOpenAI):
        msg = f"{{field}} must be an openai.AsyncOpenAI (or AsyncAzureOpenAI), got {client!r}"
        fix = None
        if isinstance(client, openai.OpenAI):
            msg += ":"
            fix = "the executor is async, use openai.AsyncOpenAI"
        raise ConfigError(msg, field="client", value=client, fix=fix)
    return without_retries(client, what="openai.AsyncOpenAI")


class OpenAIChatAttempt:
    """
    An attempt function over ``client.chat.completions.create``; made by `openai_chat_attempt`.
    """

    __slots__ = ("_client", "_where", "messages", "params", "stream")

    def __init__(self, client: Any, messages: Messages, *, stream: bool, params: Any) -> None:
        check_params(params, ("model", "messages", "stream"))
        self._client = _client(client)
        self._where = f"{str(self._client.base_url).rstrip('/')}/chat/completions"
        self.messages, self.stream, self.params = messages, stream, dict(params)
        if stream:
            self.params.setdefault("stream_options", {"include_usage": True})

    def __repr__(self) -> str:
        return f"OpenAIChatAttempt({self._where!r}, stream={self.stream})"

    def __call__(self, attempt: Attempt) -> AsyncIterator[Any] | Awaitable[Any]:
        """
        Send one attempt: a stream of ``ChatCompletionChunk``, or a ``ChatCompletion``.
        """
        where = f"{attempt.route} at {self._where}"
        messages = self.messages(attempt) if callable(self.messages) else self.messages

        def send() -> Awaitable[Any]:
            options = request_options(attempt, where, self.params)
            return self._client.chat.completions.create(  # type: ignore[no-any-return]
                **{**self.params, **options},
                model=attempt.model, messages=messages, stream=self.stream,
            )  # fmt: skip

        if self.stream:
            return stream(attempt, where, send)
        return _whole_chat(answer(attempt, where, send, field="choices"), where)


class OpenAIResponsesAttempt:
    """
    An attempt function over ``client.responses.create``; made by `openai_responses_attempt`.
    """

    __slots__ = ("_client", "_where", "input", "params", "stream")

    def __init__(self, client: Any, input_: Messages | str, *, stream: bool, params: Any) -> None:
        check_params(params, ("model", "input", "stream"))
        self._client = _client(client)
        self._where = f"{str(self._client.base_url).rstrip('/')}/responses"
        self.input, self.stream, self.params = input_, stream, dict(params)

    def __repr__(self) -> str:
        return f"OpenAIResponsesAttempt({self._where!r}, stream={self.stream})"

    def __call__(self, attempt: Attempt) -> AsyncIterator[Any] | Awaitable[Any]:
        """
        Send one attempt: a stream of Responses events, or a ``Response``.
        """
        where = f"{attempt.route} at {self._where}"
        input_ = self.input(attempt) if callable(self.input) else self.input

        def send() -> Awaitable[Any]:
            options = request_options(attempt, where, self.params)
            return self._client.responses.create(  # type: ignore[no-any-return]
                **{**self.params, **options},
                model=attempt.model, input=input_, stream=self.stream,
            )  # fmt: skip

        if self.stream:
            return stream(attempt, where, send)
        return _whole_response(answer(attempt, where, send, field="output"), where)


async def _whole_chat(pending: Awaitable[Any], where: str) -> Any:
    """
    A non-streamed chat answer, refused when it has no choice.
    """
    completion = await pending
    if not completion.choices:
        msg = f"{where}: the answer has no choices: {clip(repr(completion))}"
        raise AttemptError(msg, status="error")
    return completion


async def _whole_response(pending: Awaitable[Any], where: str) -> Any:
    """
    A non-streamed response, refused when the provider says it failed.
    """
    response = await pending
    if getattr(response, "status", None) == "failed":
        error = getattr(response, "error", None)
        msg = f"{where}: the response failed: {getattr(error, 'message', None) or error}"
        raise AttemptError(msg, status="error")
    return response


def openai_chat_attempt(
    client: Any, messages: Messages, *, stream: bool = True, **params: Any
) -> OpenAIChatAttempt:
    """
    An attempt function that sends each attempt to ``client.chat.completions.create``.

    Args:
        client: Your ``openai.AsyncOpenAI`` (or ``AsyncAzureOpenAI``) client; the adapter
            sends through a copy of it with ``max_retries=0`` and never closes it.
        messages: The chat messages, or a function of the `Attempt` that returns them (to use
            ``attempt.inputs``, the results of the steps this one depends on).
        stream: Stream the answer: the executor then sees the first token and the token rate,
            and can cut a stalled stream. ``stream_options={"include_usage": True}`` is sent
            unless you give ``stream_options``, so the ledger has the provider's usage.
        **params: Any other argument of ``create`` (``max_tokens``, ``temperature``, ``tools``,
            ``extra_headers``, ``extra_body``, …). Not ``model``, ``messages``, ``stream``
            (the adapter's) nor ``timeout`` (the attempt's deadline sets it).

    Returns:
        The attempt function: each call returns an async iterator of ``ChatCompletionChunk``
        (the step's result is then a `StreamResult`) or an awaitable of the
        ``ChatCompletion``.

    Raises:
        ConfigError: ``client`` is not an async OpenAI client, or ``params`` sets what the
            adapter sets.

    Example::

        client = openai.AsyncOpenAI()
        call = openai_chat_attempt(client, [{"role": "user", "content": "hi"}], max_tokens=200)
        with deadline_after(20):
            answer = await executor.run_step("draft", call)   # answer.text
    """
    return OpenAIChatAttempt(client, messages, stream=stream, params=params)


def openai_responses_attempt(
    client: Any,
    input: Messages | str,
    *,
    stream: bool = True,
    **params: Any,
) -> OpenAIResponsesAttempt:
    """
    An attempt function that sends each attempt to ``client.responses.create`` (Responses API).

    Args:
        client: Your ``openai.AsyncOpenAI`` client; the adapter sends through a copy of it
            with ``max_retries=0`` and never closes it.
        input: The ``input`` (a string or a list of input items), or a function of the
            `Attempt` that returns it.
        stream: Stream the events: the step's result is a `StreamResult` whose ``final`` is
            the ``response.completed`` event (``final.response`` is the whole response).
            ``False``: the ``Response``.
        **params: Any other argument of ``create`` (``instructions``, ``max_output_tokens``,
            ``tools``, ``extra_headers``, …). Not ``model``, ``input``, ``stream`` nor
            ``timeout``.

    Returns:
        The attempt function.

    Raises:
        ConfigError: ``client`` is not an async OpenAI client, or ``params`` sets what the
            adapter sets.
    """
    return OpenAIResponsesAttempt(client, input, stream=stream, params=params)
