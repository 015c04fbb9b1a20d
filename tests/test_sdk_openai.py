"""
The executor around the official OpenAI SDK, over HTTP: ``tailkit serve`` with its faults.

Two ways a service calls the SDK are covered: the attempt functions of
`tailkit.adapters.openai_sdk`, and a generator of the service's own that yields the SDK's chunks
as they come (the pattern the docs show). The Responses API, which serve does not answer, runs
against a scripted loopback server (tests/_sdk_fake.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import pytest

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import ResponseCompletedEvent

from tailkit.adapters.openai_sdk import openai_chat_attempt, openai_responses_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed, ConfigError
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Executor,
    Ledger,
    MemorySink,
    ProviderThrottle,
    StreamResult,
    deadline_after,
    idempotency_key,
    now,
)
from tailkit.executor.lowlevel import UnreadableChunk, classify, read_chunk
from tailkit.serve import Faults, ModelProfile, ServeConfig, Server
from tests._sdk_fake import FAST, MESSAGES, FakeSDKServer, Reply, plan, run


Call = Callable[[openai.AsyncOpenAI], Callable[[Attempt], Any]]


def adapter(client: openai.AsyncOpenAI) -> Callable[[Attempt], Any]:
    return openai_chat_attempt(client, MESSAGES)


def own(client: openai.AsyncOpenAI, **options: Any) -> Callable[[Attempt], Any]:
    """A service's own wrapper: the SDK's chunks yielded as they come, the SDK's errors raised."""
    sdk = client.with_options(max_retries=0, **options)

    async def call(attempt: Attempt) -> AsyncIterator[Any]:
        stream = await sdk.chat.completions.create(
            model=attempt.model, messages=MESSAGES, stream=True, extra_headers=attempt.headers()
        )
        async for chunk in stream:
            yield chunk

    return call


def returned(client: openai.AsyncOpenAI) -> Callable[[Attempt], Any]:
    """A service's own attempt function that returns the SDK's stream itself."""
    sdk = client.with_options(max_retries=0)

    async def call(attempt: Attempt) -> Any:
        return await sdk.chat.completions.create(
            model=attempt.model, messages=MESSAGES, stream=True, extra_headers=attempt.headers()
        )

    return call


PATTERNS = pytest.mark.parametrize(
    "make", [adapter, own, returned], ids=["adapter", "own-generator", "returned-stream"]
)


async def step(
    server: Server, make: Call, *, throttle: ProviderThrottle | None = None, hedge: bool = False,
    calls: int = 1, deadline_s: float = 10.0,
) -> tuple[list[Any], MemorySink]:  # fmt: skip
    """Run ``calls`` calls of step s through ``make``'s attempt function; results or errors."""
    sink = MemorySink()
    executor = Executor(plan(hedge), ledger=Ledger(sink), throttle=throttle)
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url)
    out: list[Any] = []
    try:
        for k in range(calls):
            try:
                with deadline_after(deadline_s):
                    out.append(await executor.run_step("s", make(client), run_id=f"r{k}"))
            except Exception as error:
                out.append(error)
    finally:
        await client.close()
    return out, sink


def serve(a: ModelProfile = FAST, b: ModelProfile = FAST) -> Server:
    return Server(ServeConfig(models={"a": a, "b": b}, seed=1))


def with_faults(**faults: Any) -> ModelProfile:
    return dataclasses.replace(FAST, faults=Faults(**faults))


# --- a healthy stream --------------------------------------------------------------------------


@PATTERNS
def test_a_stream_of_sdk_chunks_ends_at_its_finish_reason_in_one_call(make: Call) -> None:
    """ChatCompletionChunk objects: text, usage and the end read, one request, not two."""

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve() as server:
            out, sink = await step(server, make)
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, StreamResult), result
    assert result.text
    assert "stop" == result.finish_reason
    assert isinstance(result.final, ChatCompletionChunk)
    assert {idempotency_key("r0", "s", 0): 1} == dict(server.seen_keys)
    [line] = sink.records
    [served] = server.records
    assert ("ok", served.output_tokens) == (line.status, line.output_tokens)  # the usage
    assert line.ttft_s is not None


def test_the_adapter_sends_the_attempt_and_leaves_the_client_as_it_was() -> None:
    """Model, deadline and Idempotency-Key on the wire; the caller's client keeps its retries."""

    async def main() -> tuple[FakeSDKServer, openai.AsyncOpenAI]:
        choice = {"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}
        done = {"choices": [choice], "id": "c", "object": "chat.completion.chunk", "created": 0,
                "model": "a"}  # fmt: skip
        async with FakeSDKServer([Reply(events=(("", done), ("", "[DONE]")))]) as server:
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1")
            executor = Executor(plan(), ledger=Ledger(MemorySink()))
            with deadline_after(7.0):
                await executor.run_step("s", openai_chat_attempt(client, MESSAGES), run_id="r")
            await client.close()
        return server, client

    server, client = run(main())
    [seen] = server.requests
    assert ("/v1/chat/completions", "a") == (seen.path, seen.body["model"])
    assert seen.body["stream"] is True
    assert {"include_usage": True} == seen.body["stream_options"]
    assert idempotency_key("r", "s", 0) == seen.headers["idempotency-key"]
    assert 0.0 < float(seen.headers["x-tailkit-remaining-s"]) <= 7.0  # what was left at sending
    assert "0" == seen.headers["x-stainless-retry-count"]
    assert 2 == client.max_retries  # the adapter sends through a copy without retries


def test_a_non_streamed_answer_is_the_completion_with_its_usage_on_the_ledger() -> None:
    """stream=False: the ChatCompletion, and the ledger has the provider's token counts."""

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve() as server:
            out, sink = await step(server, lambda c: openai_chat_attempt(c, MESSAGES, stream=False))
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, ChatCompletion)
    assert result.choices[0].message.content
    [line] = sink.records
    assert ("ok", server.records[0].output_tokens) == (line.status, line.output_tokens)
    assert line.input_tokens is not None


# --- faults ------------------------------------------------------------------------------------


@PATTERNS
def test_a_429_with_retry_after_rests_the_provider(make: Call) -> None:
    """After a 429 with Retry-After, later calls start on the hedge route: one 429, not one each."""
    a = with_faults(tpm_limit=8)  # the first call fits; the next waits about 30 s

    async def main() -> tuple[list[Any], Server, ProviderThrottle]:
        throttle = ProviderThrottle()
        async with serve(a=a) as server:
            out, _ = await step(server, make, throttle=throttle, hedge=True, calls=6)
        return out, server, throttle

    out, server, throttle = run(main())
    assert all(isinstance(r, StreamResult) for r in out), out
    assert 1 == server.counts["rate_limited"]
    assert throttle.resting("fake", now())


@PATTERNS
def test_an_sdk_timeout_is_a_timeout(make: Call) -> None:
    """The SDK's APITimeoutError on a hanging provider is status timeout, not error."""
    hang = with_faults(hang=1.0)

    def short(client: openai.AsyncOpenAI) -> Callable[[Attempt], Any]:
        if make is adapter:  # its timeout is the deadline's: run it with a short deadline
            return adapter(client)
        return make(client.with_options(timeout=0.2))

    async def main() -> MemorySink:
        async with serve(a=hang) as server:
            _, sink = await step(server, short, deadline_s=0.3 if make is adapter else 10.0)
        return sink

    sink = run(main())
    assert sink.records
    assert {"timeout"} == {line.status for line in sink.records}


def test_the_adapter_times_out_at_the_attempt_deadline() -> None:
    """Outside the executor: a hanging provider raises AttemptError(timeout) by the deadline."""

    async def main() -> AttemptError:
        async with serve(a=with_faults(hang=1.0)) as server:
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url)
            fn = openai_chat_attempt(client, MESSAGES)
            attempt = Attempt("s", "fake/a", "fake", "a", 0, "primary", "k", now() + 0.3)
            try:
                with pytest.raises(AttemptError) as caught:
                    async for _ in fn(attempt):  # type: ignore[union-attr]
                        pass
            finally:
                await client.close()
            return caught.value

    error = run(main())
    assert "timeout" == error.status


@PATTERNS
def test_a_malformed_chunk_is_the_providers_failure_and_retried(make: Call) -> None:
    """A chunk that is not JSON (json.JSONDecodeError in the SDK): status error, retried."""

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve(a=with_faults(garbage=1.0)) as server:
            out, sink = await step(server, make)
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, AllAttemptsFailed), result
    assert ["primary", "retry"] == [line.role for line in sink.records]
    assert {"error"} == {line.status for line in sink.records}
    assert not any(line.attrs.get("caller_error") for line in sink.records)
    assert [2] == list(server.seen_keys.values())


@PATTERNS
def test_a_stream_cut_before_its_finish_reason_is_a_failure(make: Call) -> None:
    """Serve's cut_stream: no finish_reason, no [DONE]: truncated and retried; a whole one wins."""

    async def main() -> tuple[list[Any], MemorySink, list[Any]]:
        async with serve(a=with_faults(cut_stream=1.0)) as server:
            cut, sink = await step(server, make)
        async with serve() as server:
            whole, _ = await step(server, make)
        return cut, sink, whole

    [cut], sink, [whole] = run(main())
    assert isinstance(cut, AllAttemptsFailed), cut
    assert ["TruncatedStream"] * 2 == [line.error_type for line in sink.records]
    assert isinstance(whole, StreamResult), whole


def test_the_sdk_does_not_retry_behind_the_executor() -> None:
    """5xx to everything: the server sees the executor's two attempts, not the SDK's three each."""

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve(a=with_faults(error_5xx=1.0)) as server:
            out, sink = await step(server, adapter)
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, AllAttemptsFailed)
    assert [2] == list(server.seen_keys.values())
    assert 2 == len(sink.records)
    assert all(line.http_status and line.http_status >= 500 for line in sink.records)


def test_parameters_the_adapter_sets_are_refused() -> None:
    """model, messages, stream and timeout are the adapter's; a sync client is named."""
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    for bad in ({"model": "x"}, {"timeout": 3}):
        with pytest.raises(ConfigError, match="sets"):
            openai_chat_attempt(client, MESSAGES, **bad)
    with pytest.raises(ConfigError, match="AsyncOpenAI"):
        openai_chat_attempt(openai.OpenAI(api_key="k", base_url="http://x/v1"), MESSAGES)


# --- the Responses API (a scripted server) ----------------------------------------------------


def _responses_events(*, complete: bool = True, failed: bool = False) -> tuple[Any, ...]:
    response = {"id": "r", "object": "response", "created_at": 0, "model": "a", "output": [],
                "status": "in_progress", "parallel_tool_calls": True, "tool_choice": "auto",
                "tools": []}  # fmt: skip
    events: list[tuple[str, Any]] = [
        ("response.created", {"type": "response.created", "response": response,
                              "sequence_number": 0}),
    ]  # fmt: skip
    for n, word in enumerate(["Hello", " world"]):
        events.append(("response.output_text.delta", {
            "type": "response.output_text.delta", "delta": word, "item_id": "m",
            "output_index": 0, "content_index": 0, "sequence_number": n + 1, "logprobs": [],
        }))  # fmt: skip
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    if failed:
        gone = {**response, "status": "failed", "error": {"code": "server_error",
                                                           "message": "boom"}}  # fmt: skip
        events.append(("response.failed", {"type": "response.failed", "response": gone,
                                           "sequence_number": 3}))  # fmt: skip
    elif complete:
        whole = {**response, "status": "completed", "usage": usage}
        events.append(("response.completed", {"type": "response.completed", "response": whole,
                                              "sequence_number": 3}))  # fmt: skip
    return tuple(events)


def _responses(replies: list[Reply], **params: Any) -> tuple[list[Any], MemorySink, int]:
    async def main() -> tuple[list[Any], MemorySink, int]:
        async with FakeSDKServer(replies) as server:
            sink = MemorySink()
            executor = Executor(plan(), ledger=Ledger(sink))
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1")
            fn = openai_responses_attempt(client, "hi", **params)
            try:
                with deadline_after(10):
                    out: list[Any] = [await executor.run_step("s", fn)]
            except Exception as error:
                out = [error]
            finally:
                await client.close()
        return out, sink, len(server.requests)

    return run(main())


def test_a_responses_stream_ends_at_response_completed() -> None:
    """Text from output_text deltas, usage and the whole response from response.completed."""
    [result], sink, sent = _responses([Reply(events=_responses_events())])
    assert isinstance(result, StreamResult), result
    assert ("Hello world", 2, 3, "completed") == (
        result.text, result.output_tokens, result.input_tokens, result.finish_reason
    )  # fmt: skip
    assert isinstance(result.final, ResponseCompletedEvent)
    assert "completed" == result.final.response.status
    assert 1 == sent
    assert ["ok"] == [line.status for line in sink.records]


def test_a_responses_stream_cut_before_response_completed_is_a_failure() -> None:
    """Deltas then the connection closes: truncated and retried; the retry's whole answer wins."""
    cut = Reply(events=_responses_events(complete=False))
    [result], sink, sent = _responses([cut, Reply(events=_responses_events())])
    assert isinstance(result, StreamResult)
    assert "Hello world" == result.text
    assert 2 == sent
    assert [("error", "TruncatedStream"), ("ok", None)] == [
        (line.status, line.error_type) for line in sink.records
    ]


def test_a_failed_response_or_a_429_is_the_providers_failure() -> None:
    """response.failed is an error; a 429's retry-after-ms is the attempt's Retry-After."""
    failed = Reply(events=_responses_events(failed=True))
    [result], sink, _ = _responses([failed])
    assert isinstance(result, AllAttemptsFailed)
    assert {"error"} == {line.status for line in sink.records}

    limited = Reply(status=429, body={"error": {"message": "slow down"}},
                    headers=(("retry-after-ms", "250"), ("Retry-After", "1")))  # fmt: skip

    async def direct() -> AttemptError:
        async with FakeSDKServer([limited]) as server:
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url + "/v1")
            fn = openai_responses_attempt(client, "hi")
            attempt = Attempt("s", "fake/a", "fake", "a", 0, "primary", "k", now() + 5)
            try:
                with pytest.raises(AttemptError) as caught:
                    async for _ in fn(attempt):  # type: ignore[union-attr]
                        pass
            finally:
                await client.close()
            return caught.value

    error = run(direct())
    assert ("rate_limited", 429, 0.25) == (error.status, error.http_status, error.retry_after_s)


# --- reading chunks (no network) ---------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate({
        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": "a",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra,
    })  # fmt: skip


def test_chat_chunks_are_read_by_their_fields() -> None:
    """Content, a tool-call delta (progress, no text), content and finish_reason in one chunk."""
    role = read_chunk(_chunk({"role": "assistant", "content": ""}))
    text = read_chunk(_chunk({"content": "Hi"}))
    tool = read_chunk(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}))
    last = read_chunk(_chunk({"content": "!"}, "stop"))
    usage = read_chunk(ChatCompletionChunk.model_validate({
        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": "a", "choices": [],
        "usage": {"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13},
    }))  # fmt: skip
    assert (False, False) == (role.content, role.final)
    assert (True, "Hi", False) == (text.content, text.text, text.final)
    assert (True, "") == (tool.content, tool.text)
    assert (True, "!", True, "stop") == (last.content, last.text, last.final, last.finish_reason)
    assert {"input_tokens": 4, "output_tokens": 9} == usage.usage


def test_a_chunk_of_an_unknown_shape_names_the_fix() -> None:
    """An object the executor cannot read is an error naming what it reads, never content."""

    @dataclasses.dataclass
    class Mine:
        words: str

    with pytest.raises(UnreadableChunk, match="FINAL") as caught:
        read_chunk(Mine("hi"), "draft")
    assert "step 'draft'" in str(caught.value)
    assert "Mine" in str(caught.value)


def test_a_streamed_result_keeps_its_text_not_its_chunks() -> None:
    """Of a 200-chunk stream the result holds the text and the terminal chunk only."""

    async def call(attempt: Attempt) -> AsyncIterator[Any]:
        for _ in range(200):
            yield _chunk({"content": "word "})
        yield _chunk({}, "stop")
        yield FINAL  # as the README's pattern did: the end, said twice

    result = run(Executor(plan(), ledger=Ledger(MemorySink())).run_step("s", call))
    held = [
        value
        for f in dataclasses.fields(result)
        for value in (getattr(result, f.name),)
        for value in (value if isinstance(value, tuple) else (value,))
        if isinstance(value, ChatCompletionChunk)
    ]
    assert "word " * 200 == result.text
    assert [result.final] == held
    assert "stop" == result.final.choices[0].finish_reason


def test_sdk_exceptions_from_your_own_code_are_classified_by_their_fields() -> None:
    """Raw SDK errors: the 429's Retry-After from its response, timeouts, an in-stream error."""
    # the HTTP library the installed SDKs are built on (httpx2 for the newer ones)
    httpx2 = importlib.import_module("httpx2" if importlib.util.find_spec("httpx2") else "httpx")
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    limited = httpx2.Response(429, headers={"retry-after-ms": "1500"}, request=request)
    dated = httpx2.Response(429, headers={"Retry-After": "3"}, request=request)
    in_stream = httpx2.Response(200, request=request)
    overloaded = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}

    assert ("rate_limited", 429, 1.5) == classify(
        openai.RateLimitError("slow", response=limited, body=None)
    )
    assert ("rate_limited", 429, 3.0) == classify(
        anthropic.RateLimitError("slow", response=dated, body=None)
    )
    assert ("timeout", None, None) == classify(openai.APITimeoutError(request=request))
    assert ("timeout", None, None) == classify(anthropic.APITimeoutError(request=request))
    assert ("error", None, None) == classify(openai.APIConnectionError(request=request))
    assert ("rate_limited", None, None) == classify(
        anthropic.APIStatusError("x", response=in_stream, body=overloaded)
    )


@pytest.mark.parametrize("fault", ["schema_invalid", "garbage", "cut_stream"])
def test_a_broken_non_streamed_answer_is_the_providers_failure(fault: str) -> None:
    """No choices, not JSON, a body cut short: status error and retried, never an ok answer."""

    def whole(client: openai.AsyncOpenAI) -> Callable[[Attempt], Any]:
        return openai_chat_attempt(client, MESSAGES, stream=False)

    async def main() -> tuple[list[Any], MemorySink]:
        async with serve(a=with_faults(**{fault: 1.0})) as server:
            return await step(server, whole)

    [result], sink = run(main())
    assert isinstance(result, AllAttemptsFailed), result
    assert [("primary", "error"), ("retry", "error")] == [
        (line.role, line.status) for line in sink.records
    ]


def cutoff_plan() -> Plan:
    text = (
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 30\nhedge_budget: 0.5\nroutes:\n"
        "  fake/a: {provider: fake, model: a}\n  other/b: {provider: other, model: b}\n"
        "steps:\n  s:\n    route: fake/a\n    signal: ttft\n    ttft_cutoff_s: 0.3\n"
        "    stall_cutoff_s: 0.3\n    on_cutoff: hedge\n    hedge_route: other/b\n"
    )
    return parse_plan(text)


@pytest.mark.parametrize("fault", ["hang", "stall_mid"])
def test_a_stuck_stream_is_hedged_and_its_connection_closed(fault: str) -> None:
    """No first token, or silence mid-stream: the hedge wins and the stuck request is let go."""

    async def main() -> tuple[Any, MemorySink, Server, int]:
        async with serve(a=with_faults(**{fault: 1.0})) as server:
            sink = MemorySink()
            client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url)
            try:
                with deadline_after(10):
                    result = await Executor(cutoff_plan(), ledger=Ledger(sink)).run_step(
                        "s", adapter(client)
                    )
            finally:
                await client.close()
            while len(server.records) < 2:  # the stuck request ends when the client goes
                await asyncio.sleep(0.01)
            return result, sink, server, server.open_connections

    result, sink, server, still_open = run(main())
    assert isinstance(result, StreamResult)
    assert [("hedge", "ok"), ("primary", "cancelled")] == [
        (line.role, line.status) for line in sink.records
    ]
    assert ["b", "a"] == [record.model for record in server.records]
    assert 0 == still_open
