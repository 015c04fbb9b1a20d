"""
The executor around the official Anthropic SDK, over HTTP: ``tailkit serve``'s Messages API.

The same faults as the OpenAI SDK's tests (tests/test_sdk_openai.py), through the attempt
function of `tailkit.adapters.anthropic_sdk` and through a service's own generator that yields
the SDK's events as they come; error events inside a stream run against a scripted server.
"""

from __future__ import annotations

import asyncio
import dataclasses

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest

from anthropic.types import Message, RawMessageStartEvent, RawMessageStopEvent

from tailkit.adapters.anthropic_sdk import anthropic_messages_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed, ConfigError
from tailkit.executor import (
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
from tailkit.executor.lowlevel import read_chunk
from tailkit.serve import Faults, ModelProfile, ServeConfig, Server
from tests._sdk_fake import FAST, MESSAGES, FakeSDKServer, Reply, plan, run


Call = Callable[[anthropic.AsyncAnthropic], Callable[[Attempt], Any]]


def adapter(client: anthropic.AsyncAnthropic) -> Callable[[Attempt], Any]:
    return anthropic_messages_attempt(client, MESSAGES, max_tokens=100)


def own(client: anthropic.AsyncAnthropic, **options: Any) -> Callable[[Attempt], Any]:
    """A service's own wrapper: the SDK's raw events yielded as they come, its errors raised."""
    sdk = client.with_options(max_retries=0, **options)

    async def call(attempt: Attempt) -> AsyncIterator[Any]:
        stream = await sdk.messages.create(
            model=attempt.model, messages=MESSAGES, max_tokens=100, stream=True,
            extra_headers=attempt.headers(),
        )  # fmt: skip
        async for event in stream:
            yield event

    return call


def helper(client: anthropic.AsyncAnthropic) -> Callable[[Attempt], Any]:
    """The SDK's messages.stream() helper, every event yielded (raw ones and derived ones)."""
    sdk = client.with_options(max_retries=0)

    async def call(attempt: Attempt) -> AsyncIterator[Any]:
        async with sdk.messages.stream(
            model=attempt.model, messages=MESSAGES, max_tokens=100,
            extra_headers=attempt.headers(),
        ) as stream:  # fmt: skip
            async for event in stream:
                yield event

    return call


PATTERNS = pytest.mark.parametrize(
    "make", [adapter, own, helper], ids=["adapter", "own-generator", "stream-helper"]
)


def sdk_client(server: Server | FakeSDKServer) -> anthropic.AsyncAnthropic:
    base = server.url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(api_key="sk-test", base_url=base)


async def step(
    server: Server, make: Call, *, throttle: ProviderThrottle | None = None, hedge: bool = False,
    calls: int = 1, deadline_s: float = 10.0,
) -> tuple[list[Any], MemorySink]:  # fmt: skip
    """Run ``calls`` calls of step s through ``make``'s attempt function; results or errors."""
    sink = MemorySink()
    executor = Executor(plan(hedge), ledger=Ledger(sink), throttle=throttle)
    client = sdk_client(server)
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
def test_a_message_stream_ends_at_message_stop_in_one_call(make: Call) -> None:
    """Text deltas are the text (not doubled by the helper's text events), usage, one request."""

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve() as server:
            out, sink = await step(server, make)
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, StreamResult), result
    [served] = server.records
    assert served.output_tokens == len(result.text.split())  # one word a token, each once
    assert "end_turn" == result.finish_reason
    assert "message_stop" == result.final.type
    assert {idempotency_key("r0", "s", 0): 1} == dict(server.seen_keys)
    [line] = sink.records
    assert ("ok", served.output_tokens) == (line.status, line.output_tokens)
    assert line.input_tokens == served.input_tokens
    assert line.ttft_s is not None


def test_a_non_streamed_message_has_its_usage_on_the_ledger() -> None:
    """stream=False: the Message, and the ledger has its token counts."""

    def whole(client: anthropic.AsyncAnthropic) -> Callable[[Attempt], Any]:
        return anthropic_messages_attempt(client, MESSAGES, max_tokens=100, stream=False)

    async def main() -> tuple[list[Any], MemorySink, Server]:
        async with serve() as server:
            out, sink = await step(server, whole)
        return out, sink, server

    [result], sink, server = run(main())
    assert isinstance(result, Message)
    assert result.content[0].text  # type: ignore[union-attr]
    [line] = sink.records
    assert ("ok", server.records[0].output_tokens) == (line.status, line.output_tokens)


# --- faults ------------------------------------------------------------------------------------


@PATTERNS
def test_a_429_with_retry_after_rests_the_provider(make: Call) -> None:
    """After a 429 with Retry-After, later calls start on the hedge route: one 429, not one each."""
    a = with_faults(tpm_limit=8)

    async def main() -> tuple[list[Any], Server, ProviderThrottle]:
        throttle = ProviderThrottle()
        async with serve(a=a) as server:
            out, _ = await step(server, make, throttle=throttle, hedge=True, calls=6)
        return out, server, throttle

    out, server, throttle = run(main())
    assert all(isinstance(r, StreamResult) for r in out), out
    assert 1 == server.counts["rate_limited"]
    assert throttle.resting("fake", now())


@pytest.mark.parametrize("make", [adapter, own], ids=["adapter", "own-generator"])
def test_an_sdk_timeout_is_a_timeout(make: Call) -> None:
    """The SDK's APITimeoutError on a hanging provider is status timeout, not error."""

    def short(client: anthropic.AsyncAnthropic) -> Callable[[Attempt], Any]:
        if make is own:
            return own(client, timeout=0.2)
        return adapter(client)

    async def main() -> MemorySink:
        async with serve(a=with_faults(hang=1.0)) as server:
            _, sink = await step(server, short, deadline_s=0.3 if make is adapter else 10.0)
        return sink

    sink = run(main())
    assert sink.records
    assert {"timeout"} == {line.status for line in sink.records}


@PATTERNS
def test_a_malformed_event_is_the_providers_failure_and_retried(make: Call) -> None:
    """Events that are not JSON (json.JSONDecodeError in the SDK): status error, retried."""

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
def test_a_stream_cut_before_message_stop_is_a_failure(make: Call) -> None:
    """Serve's cut_stream: no message_stop: truncated and retried; a whole stream wins."""

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


@pytest.mark.parametrize("make", [adapter, own], ids=["adapter", "own-generator"])
def test_events_without_their_delta_are_a_failure_not_an_empty_answer(make: Call) -> None:
    """Serve's schema_invalid (deltas stripped): the provider's error; a whole stream still wins."""

    async def main() -> tuple[list[Any], MemorySink, list[Any]]:
        async with serve(a=with_faults(schema_invalid=1.0)) as server:
            broken, sink = await step(server, make)
        async with serve() as server:
            whole, _ = await step(server, make)
        return broken, sink, whole

    [broken], sink, [whole] = run(main())
    assert isinstance(broken, AllAttemptsFailed), broken
    assert {"error"} == {line.status for line in sink.records}
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
    assert all(line.http_status and line.http_status >= 500 for line in sink.records)


@pytest.mark.parametrize(
    ("kind", "status"), [("overloaded_error", "error"), ("rate_limit_error", "rate_limited")]
)
def test_an_error_event_inside_the_stream_is_the_providers_failure(kind: str, status: str) -> None:
    """An `event: error` after the stream began: error, or rate_limited when its type says."""
    start = {"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "a", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0}}}  # fmt: skip
    error = {"type": "error", "error": {"type": kind, "message": "try later"}}
    script = [Reply(events=(("message_start", start), ("error", error)))]

    async def main() -> AttemptError:
        async with FakeSDKServer(script) as server:
            client = sdk_client(server)
            fn = adapter(client)
            attempt = Attempt("s", "fake/a", "fake", "a", 0, "primary", "k", now() + 5)
            try:
                with pytest.raises(AttemptError) as caught:
                    async for _ in fn(attempt):
                        pass
            finally:
                await client.close()
            return caught.value

    caught = run(main())
    assert (status, None) == (caught.status, caught.http_status)
    assert kind in str(caught)


def test_parameters_the_adapter_sets_are_refused() -> None:
    """model, max_tokens (an argument of its own) and timeout are refused; a sync client named."""
    client = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")
    for bad in ({"model": "x"}, {"timeout": 3}):
        with pytest.raises(ConfigError, match="sets"):
            anthropic_messages_attempt(client, MESSAGES, max_tokens=5, **bad)
    with pytest.raises(ConfigError, match="max_tokens"):
        anthropic_messages_attempt(client, MESSAGES, max_tokens=0)
    with pytest.raises(ConfigError, match="AsyncAnthropic"):
        anthropic_messages_attempt(anthropic.Anthropic(api_key="k"), MESSAGES, max_tokens=5)


# --- reading events (no network) ---------------------------------------------------------------


def test_anthropic_events_are_read_by_their_fields() -> None:
    """Usage with cached input, tool input as progress, derived and unknown events as nothing."""
    usage = {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 100}
    start = RawMessageStartEvent.model_validate({"type": "message_start", "message": {
        "id": "m", "type": "message", "role": "assistant", "model": "a", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})  # fmt: skip
    json_delta = {"type": "input_json_delta", "partial_json": '{"a"'}
    tool = read_chunk({"type": "content_block_delta", "index": 1, "delta": json_delta})
    text = read_chunk({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": "Hi"}})  # fmt: skip
    derived = read_chunk({"type": "text", "text": "Hi", "snapshot": "Hi"})
    delta = read_chunk({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                        "usage": {"output_tokens": 12}})  # fmt: skip

    assert {"input_tokens": 103, "output_tokens": 1} == read_chunk(start).usage
    assert (True, "") == (tool.content, tool.text)
    assert (True, "Hi") == (text.content, text.text)
    assert (False, "") == (derived.content, derived.text)
    assert ("tool_use", {"output_tokens": 12}) == (delta.finish_reason, delta.usage)
    assert read_chunk(RawMessageStopEvent(type="message_stop")).final


@pytest.mark.parametrize("fault", ["schema_invalid", "garbage", "cut_stream"])
def test_a_broken_non_streamed_message_is_the_providers_failure(fault: str) -> None:
    """No content, not JSON, a body cut short: status error and retried, never an ok answer."""

    def whole(client: anthropic.AsyncAnthropic) -> Callable[[Attempt], Any]:
        return anthropic_messages_attempt(client, MESSAGES, max_tokens=100, stream=False)

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
            client = sdk_client(server)
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
