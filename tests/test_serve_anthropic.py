"""
`tailkit serve` answers Anthropic's Messages API: the real ``anthropic`` SDK against its faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tailkit.ledger import AttemptRecord
from tailkit.serve import Faults, ServeConfig, Server

from .test_serve import (
    CLOSE,
    PROMPT,
    WORDS,
    Reply,
    chat,
    config,
    fixed,
    only,
    request_bytes,
    send,
    serving,
    until,
)


MESSAGES = "/v1/messages"


def client(server: Server, **kw: Any) -> anthropic.AsyncAnthropic:
    """
    The official SDK pointed at ``server``, its own retries off: every request is one attempt.
    """
    return anthropic.AsyncAnthropic(base_url=server.root_url, api_key="x", max_retries=0, **kw)


async def message(port: int, *, headers: dict[str, str] | None = None, **body: Any) -> Reply:
    """
    One raw ``POST /v1/messages`` on a new connection.
    """
    doc = {"model": "m", "max_tokens": 5, "messages": PROMPT, **body}
    return await send(port, request_bytes("POST", MESSAGES, doc, {**CLOSE, **(headers or {})}))


def error_type(err: anthropic.APIStatusError) -> str:
    """
    The type of the Anthropic error object the SDK read from the body.
    """
    body: Any = err.body
    assert "error" == body["type"]
    return str(body["error"]["type"])


def faulty(**shares: float) -> ServeConfig:
    """
    A model that always shows the fault named.
    """
    return config(fixed(0.1, faults=Faults(**shares)))


def test_a_message_arrives_whole_with_its_usage() -> None:
    """
    messages.create: one text block of the words, end_turn or max_tokens, the usage.
    """

    async def main() -> tuple[Any, Any, list[AttemptRecord]]:
        async with serving(config(fixed(0.1, output_tokens=8))) as server:
            async with client(server) as sdk:
                whole = await sdk.messages.create(
                    model="m", max_tokens=100, system="be brief", messages=PROMPT
                )
                capped = await sdk.messages.create(model="m", max_tokens=5, messages=PROMPT)
            return whole, capped, list(server.records)

    whole, capped, records = asyncio.run(main())

    assert ("message", "assistant", "m") == (whole.type, whole.role, whole.model)
    assert ["text"] == [block.type for block in whole.content]
    assert whole.content[0].text.startswith(WORDS)
    assert ("end_turn", 7) == (whole.stop_reason, whole.usage.input_tokens)  # 5 + "be brief"
    assert whole.usage.output_tokens == len(whole.content[0].text.split())
    assert (WORDS, "max_tokens", 5) == (
        capped.content[0].text,
        capped.stop_reason,
        capped.usage.output_tokens,
    )
    assert [("ok", 200, False)] * 2 == [
        (r.status, r.http_status, r.attrs["stream"]) for r in records
    ]
    assert whole.id == f"msg_{records[0].call_id}"


def test_messages_are_recorded_as_chat_completions_are(tmp_path: Path) -> None:
    """
    The access log's line for a Messages request has the fields, key and deadline of a chat's.
    """
    log = tmp_path / "access.jsonl"

    async def main() -> None:
        deadline = {"x-tailkit-remaining-s": "30", "x-tailkit-deadline": f"{time.time() + 60}"}
        async with serving(config(), access_log=log) as server:
            await chat(server.port, headers={"Idempotency-Key": "k1", **deadline})
            await message(server.port, headers={"Idempotency-Key": "k1", **deadline})
            await message(server.port, model="nope")

    asyncio.run(main())
    chat_line, line, unknown = [json.loads(x) for x in log.read_text().splitlines()]

    assert chat_line.keys() == line.keys()
    assert chat_line["attrs"].keys() == line["attrs"].keys()
    different = {"call_id", "started_at", "ttft_s", "total_s", "attempt", "role", "deadline_at"}
    assert {k: v for k, v in chat_line.items() if k not in different | {"attrs"}} == {
        k: v for k, v in line.items() if k not in different | {"attrs"}
    }
    assert ("ok", "m", "k1", 1, "retry") == (
        line["status"], line["model"], line["idempotency_key"], line["attempt"], line["role"],
    )  # fmt: skip
    assert line["deadline_at"] is not None
    assert line["attrs"]["remaining_s_at_receive"] == pytest.approx(30.0, abs=0.005)
    assert ("error", "model_not_found", 404, "nope") == (
        unknown["status"], unknown["error_type"], unknown["http_status"], unknown["model"],
    )  # fmt: skip


def test_errors_are_anthropic_error_objects() -> None:
    """
    A bad body is 400 invalid_request_error, an unknown model 404 not_found_error, GET 405.
    """

    async def main() -> list[Reply]:
        async with serving(config()) as server:
            return [
                await message(server.port, max_tokens=None),  # Anthropic requires it
                await message(server.port, model="nope"),
                await send(server.port, request_bytes("GET", MESSAGES, None, CLOSE)),
            ]

    replies = asyncio.run(main())

    kinds = ["invalid_request_error", "not_found_error", "invalid_request_error"]
    assert [400, 404, 405] == [r.status for r in replies]
    assert [{"type", "error"}] * 3 == [r.json().keys() for r in replies]
    assert kinds == [r.json()["error"]["type"] for r in replies]
    assert "'max_tokens' must be a whole number >= 1" == replies[0].json()["error"]["message"]


def test_the_sdk_raises_its_errors_on_status() -> None:
    """
    Through the SDK: 404 is NotFoundError, a missing max_tokens never leaves it (it checks).
    """

    async def main() -> anthropic.NotFoundError:
        async with serving(config()) as server, client(server) as sdk:
            with pytest.raises(anthropic.NotFoundError) as err:
                await sdk.messages.create(model="nope", max_tokens=5, messages=PROMPT)
            return err.value

    err = asyncio.run(main())

    assert 404 == err.status_code
    assert "not_found_error" == error_type(err)


# --- streams -------------------------------------------------------------------------------

STREAM_EVENTS = [
    "message_start",
    "content_block_start",
    *["content_block_delta"] * 5,
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def test_a_stream_arrives_as_anthropic_events() -> None:
    """
    create(stream=True) yields Anthropic's events in order; messages.stream() adds them up.
    """

    async def main() -> tuple[list[Any], Any, str, list[AttemptRecord]]:
        async with serving(config()) as server, client(server) as sdk:
            raw = await sdk.messages.create(model="m", max_tokens=5, messages=PROMPT, stream=True)
            events = [event async for event in raw]
            async with sdk.messages.stream(model="m", max_tokens=5, messages=PROMPT) as stream:
                text = "".join([piece async for piece in stream.text_stream])
                final = await stream.get_final_message()
            return events, final, text, list(server.records)

    events, final, text, records = asyncio.run(main())

    assert STREAM_EVENTS == [e.type for e in events]
    assert WORDS == "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert (5, 0) == (events[0].message.usage.input_tokens, events[0].message.usage.output_tokens)
    assert ("max_tokens", 5) == (events[-2].delta.stop_reason, events[-2].usage.output_tokens)
    assert (WORDS, WORDS) == (text, final.content[0].text)
    assert ("max_tokens", 5, 5) == (
        final.stop_reason, final.usage.input_tokens, final.usage.output_tokens,
    )  # fmt: skip
    assert [("ok", True, 5)] * 2 == [
        (r.status, r.attrs["stream"], r.output_tokens) for r in records
    ]
    assert all(r.ttft_s is not None for r in records)


def _frames(reply: Reply) -> list[tuple[str, str]]:
    """
    The (event name, data) pairs of a server-sent event stream, each event's two lines whole.
    """
    frames = []
    for block in reply.body.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            assert name.startswith("event: ")
            assert data.startswith("data: ")
            frames.append((name[len("event: ") :], data[len("data: ") :]))
    return frames


def test_the_event_framing_on_the_wire() -> None:
    """
    Raw HTTP: every event is ``event: <type>`` then ``data: <JSON of that type>``, ping included.
    """

    async def main() -> Reply:
        async with serving(config()) as server:
            return await message(server.port, stream=True)

    reply = asyncio.run(main())
    frames = _frames(reply)

    assert (200, "text/event-stream") == (reply.status, reply.headers["content-type"])
    assert [*STREAM_EVENTS[:2], "ping", *STREAM_EVENTS[2:]] == [name for name, _ in frames]
    assert all(json.loads(data)["type"] == name for name, data in frames)
    start = json.loads(frames[0][1])["message"]
    assert ([], None, "assistant") == (start["content"], start["stop_reason"], start["role"])
    assert {"type": "text_delta", "text": "the"} == json.loads(frames[3][1])["delta"]
    assert reply.body.endswith(b'\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n')


# --- faults --------------------------------------------------------------------------------


async def _create(
    sdk: anthropic.AsyncAnthropic, *, stream: bool, into: list[str] | None = None, **kw: Any
) -> list[str]:
    """
    One request through the SDK; the types of the events it yields (a whole answer: its type).

    ``into`` gets them as they come, so that those before an exception are kept.
    """
    types = [] if into is None else into
    body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": PROMPT, **kw}
    if not stream:
        types.append((await sdk.messages.create(**body)).type)
        return types
    async for event in await sdk.messages.create(stream=True, **body):
        types.append(event.type)
    return types


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_429_raises_rate_limit_error_with_retry_after(stream: bool) -> None:
    """
    Over the tokens-per-minute limit: RateLimitError, retry-after in the response's headers.
    """

    async def main() -> tuple[anthropic.RateLimitError, AttemptRecord]:
        cfg = config(fixed(0.001, faults=Faults(tpm_limit=20)), time_scale=1.0)
        async with serving(cfg) as server, client(server) as sdk:
            await _create(sdk, stream=stream, max_tokens=15)  # 5 + 15 tokens: the bucket is empty
            with pytest.raises(anthropic.RateLimitError) as err:
                await _create(sdk, stream=stream, max_tokens=15)
            return err.value, server.records[-1]

    err, record = asyncio.run(main())

    retry_after_s = int(err.response.headers["retry-after"])
    assert 429 == err.status_code
    body: Any = err.body
    assert ({"type", "error"}, "rate_limit_error") == (body.keys(), body["error"]["type"])
    assert "Rate limit reached for m" in body["error"]["message"]
    # 20 tokens to refill at 20 a minute (less what refilled meanwhile), exact in retry-after-ms
    retry_ms = int(err.response.headers["retry-after-ms"])
    assert 50_000 <= retry_ms <= 60_000
    assert retry_ms <= 1000 * retry_after_s < retry_ms + 1000
    assert ("rate_limited", 429) == (record.status, record.http_status)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_5xx_raises_api_status_error(stream: bool) -> None:
    """
    The error_5xx fault: the SDK raises APIStatusError with an api_error body.
    """

    async def main() -> tuple[anthropic.APIStatusError, AttemptRecord]:
        async with serving(faulty(error_5xx=1.0)) as server, client(server) as sdk:
            with pytest.raises(anthropic.APIStatusError) as err:
                await _create(sdk, stream=stream)
            return err.value, server.records[-1]

    err, record = asyncio.run(main())

    assert err.status_code in (500, 502, 503)
    assert isinstance(err, anthropic.InternalServerError)
    assert "api_error" == error_type(err)
    assert ("error", "server_error", err.status_code) == (
        record.status, record.error_type, record.http_status,
    )  # fmt: skip


def test_a_cut_stream_ends_without_message_stop() -> None:
    """
    cut_stream: some text deltas, then the connection closes; no message_stop, no usage.
    """

    async def main() -> tuple[list[str], AttemptRecord, Reply]:
        cfg = config(fixed(0.1, output_tokens=30, faults=Faults(cut_stream=1.0)))
        async with serving(cfg) as server, client(server) as sdk:
            types = await _create(sdk, stream=True, max_tokens=100)
            record = server.records[-1]
            return types, record, await message(server.port, max_tokens=100, stream=True)

    types, record, reply = asyncio.run(main())
    names = [name for name, _ in _frames(reply)]

    assert ["message_start", "content_block_start"] == types[:2]
    assert {"content_block_delta"} == set(types[2:])
    assert "message_stop" not in names
    assert "message_delta" not in names
    assert ("error", "cut_stream", 200) == (record.status, record.error_type, record.http_status)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_malformed_chunk_makes_the_sdk_raise(stream: bool) -> None:
    """
    garbage: a ``data:`` line (or a body) that is not JSON; the SDK raises on reading it.
    """

    async def main() -> tuple[AttemptRecord, Reply]:
        async with serving(faulty(garbage=1.0)) as server, client(server) as sdk:
            with pytest.raises(ValueError, match="line 1"):  # json.JSONDecodeError
                await _create(sdk, stream=stream)
            return server.records[-1], await message(server.port, stream=stream)

    record, reply = asyncio.run(main())

    assert ("invalid", "garbage", 200) == (record.status, record.error_type, record.http_status)
    if stream:
        frames = _frames(reply)
        assert ["message_start", "content_block_start", "ping"] == [n for n, _ in frames[:3]]
        assert all(json.loads(data) for _, data in frames[:3])  # the opening is whole
        assert "content_block_delta" == frames[3][0]
        with pytest.raises(json.JSONDecodeError):
            json.loads(frames[3][1])
        assert "message_stop" == frames[-1][0]


def test_schema_invalid_loses_the_content() -> None:
    """
    schema_invalid: a message without ``content``; stream deltas without ``delta``.
    """

    async def main() -> list[Reply]:
        async with serving(faulty(schema_invalid=1.0)) as server:
            return [await message(server.port), await message(server.port, stream=True)]

    whole, streamed = asyncio.run(main())
    events = [json.loads(data) for _, data in _frames(streamed)]

    assert "message" == whole.json()["type"]
    assert "content" not in whole.json()
    deltas = [e for e in events if e["type"] in ("content_block_delta", "message_delta")]
    assert 6 == len(deltas)  # five text deltas and the message's
    assert all("delta" not in e for e in deltas)


def test_reset_is_a_connection_error() -> None:
    """
    reset: no HTTP answer at all; the SDK raises APIConnectionError, not a status error.
    """

    async def main() -> AttemptRecord:
        async with serving(faulty(reset=1.0)) as server, client(server) as sdk:
            with pytest.raises(anthropic.APIConnectionError) as err:
                await _create(sdk, stream=True)
            assert not isinstance(err.value, anthropic.APITimeoutError)
            return server.records[-1]

    record = asyncio.run(main())

    assert ("error", "connection_reset") == (record.status, record.error_type)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_deadline_header_is_honoured(stream: bool) -> None:
    """
    x-tailkit-remaining-s: 504 timeout_error before the answer, or a stream cut mid-way.
    """

    async def main() -> tuple[list[str] | anthropic.APIStatusError, AttemptRecord]:
        # whole: 1 s to the first token; streamed: the first at once, then 10 tokens a second
        model = fixed(2.0) if not stream else fixed(0.01, tokens_per_s=20.0, output_tokens=60)
        headers = {"x-tailkit-remaining-s": "0.3"}
        async with serving(config(model, time_scale=0.5)) as server, client(server) as sdk:
            try:
                outcome: Any = await _create(
                    sdk, stream=stream, max_tokens=100, extra_headers=headers
                )
            except anthropic.APIStatusError as exc:
                outcome = exc
            return outcome, server.records[-1]

    outcome, record = asyncio.run(main())

    assert ("timeout", "deadline_exceeded") == (record.status, record.error_type)
    if stream:
        assert isinstance(outcome, list)
        assert "message_stop" not in outcome
        assert record.attrs["tokens_sent"] < 60
    else:
        assert isinstance(outcome, anthropic.APIStatusError)
        assert (504, "timeout_error") == (outcome.status_code, error_type(outcome))


@pytest.mark.parametrize("fault", ["hang", "stall_mid"])
def test_silence_is_recorded_when_the_sdk_gives_up(fault: str) -> None:
    """
    hang, stall_mid: silence (after some text); the SDK's timeout raises; the log: client_gone.
    """

    async def main() -> tuple[list[str], AttemptRecord]:
        types: list[str] = []
        cfg = config(fixed(0.1, output_tokens=30, faults=Faults(**{fault: 1.0})))
        async with serving(cfg) as server, client(server, timeout=0.2) as sdk:
            with pytest.raises(anthropic.APITimeoutError):
                await _create(sdk, stream=True, into=types, max_tokens=100)
            await until(lambda: server.records)
            return types, server.records[-1]

    types, record = asyncio.run(main())

    assert ("timeout", "client_gone") == (record.status, record.error_type)
    if fault == "hang":
        assert ([], None) == (types, record.http_status)
    else:
        assert ["message_start", "content_block_start"] == types[:2]
        assert {"content_block_delta"} == set(types[2:])
        assert 200 == record.http_status


def test_a_request_that_is_not_http_is_answered_and_recorded() -> None:
    """
    A malformed request on /v1/messages: its 4xx as an Anthropic error, and its record.
    """
    head = f"POST {MESSAGES} HTTP/1.1\r\nHost: x\r\nContent-Length: nine\r\n\r\n".encode()

    async def main() -> tuple[Reply, AttemptRecord]:
        async with serving(config()) as server:
            reply = await send(server.port, head)
            return reply, only(server)

    reply, record = asyncio.run(main())

    assert (400, "invalid_request_error") == (reply.status, reply.json()["error"]["type"])
    assert ("error", "bad_http_request", 400) == (
        record.status, record.error_type, record.http_status,
    )  # fmt: skip


def test_both_sdks_meet_the_same_faults() -> None:
    """
    One seed, the same requests: the OpenAI and the Anthropic SDK meet the same faults, records.
    """
    faults = Faults(error_5xx=0.15, reset=0.1, garbage=0.1, schema_invalid=0.1, cut_stream=0.1)
    cfg = config(fixed(0.1, output_tokens=12, faults=faults), seed=3)

    async def via_openai() -> list[AttemptRecord]:
        async with serving(cfg) as server:
            sdk = openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0)
            async with sdk:
                for i in range(24):
                    with contextlib.suppress(openai.OpenAIError, ValueError):
                        stream = await sdk.chat.completions.create(
                            model="m", max_tokens=50, messages=PROMPT, stream=i % 2 == 1
                        )
                        if i % 2 == 1:
                            [_ async for _ in stream]  # type: ignore[union-attr]
            return list(server.records)

    async def via_anthropic() -> list[AttemptRecord]:
        async with serving(cfg) as server, client(server) as sdk:
            for i in range(24):
                with contextlib.suppress(anthropic.AnthropicError, ValueError):
                    await _create(sdk, stream=i % 2 == 1, max_tokens=50)
            return list(server.records)

    def outcomes(records: list[AttemptRecord]) -> list[tuple[Any, ...]]:
        return [
            (r.status, r.error_type, r.http_status, r.output_tokens, r.attrs["tokens_sent"])
            for r in records
        ]

    chats, messages = asyncio.run(via_openai()), asyncio.run(via_anthropic())

    assert outcomes(chats) == outcomes(messages)
    assert {"ok", "error", "invalid"} <= {r.status for r in messages}
    assert 4 <= len({r.error_type for r in messages})  # several faults, not one
