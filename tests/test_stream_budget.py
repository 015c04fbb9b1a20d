"""
Streams that never end: the byte and chunk budgets of an attempt, and a linear SSE decoder.

A stream without its terminal marker used to be held in memory until the deadline; now an
attempt that passes its budget fails with `StreamTooLarge` (a named error on its ledger line)
and the step goes on as after any failure. Executor tests run on the virtual clock; the
adapters' on httpx mocks and a scripted loopback server.
"""

from __future__ import annotations

import asyncio
import json
import re

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tailkit.adapters import _sse as sse_module
from tailkit.adapters import chat_attempt
from tailkit.adapters._bodies import clip
from tailkit.adapters._sse import SSEDecoder
from tailkit.adapters.anthropic_sdk import anthropic_messages_attempt
from tailkit.adapters.openai_sdk import openai_chat_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Executor,
    Ledger,
    MemorySink,
    StepPolicy,
    StreamTooLarge,
    deadline_after,
    now,
)
from tests import _fakeloop
from tests._sdk_fake import MESSAGES, FakeSDKServer, Reply
from tests._sdk_fake import run as run_real


def plan() -> Plan:
    """Step s on a/m, failing over to b/m (another provider) after an error."""
    text = (
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 60\nhedge_budget: 0.5\nroutes:\n"
        "  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "steps:\n  s:\n    route: a/m\n    hedge_route: b/m\n"
    )
    return parse_plan(text)


def runaway(piece: str) -> Callable[[Attempt], Any]:
    """On a/m: ``piece`` every millisecond, never ending; on b/m: a short whole answer."""

    async def fn(a: Attempt) -> AsyncIterator[Any]:
        if a.route == "b/m":
            yield "fine"
            yield FINAL
            return
        while True:
            await asyncio.sleep(0.001)
            yield piece

    return fn


def step(policy: StepPolicy, fn: Callable[[Attempt], Any]) -> tuple[Any, MemorySink]:
    sink = MemorySink()
    executor = Executor(plan(), ledger=Ledger(sink), policies={"s": policy})

    async def main() -> Any:
        with deadline_after(30.0):
            return await executor.run_step("s", fn, run_id="r")

    return _fakeloop.run(main()), sink


@pytest.mark.parametrize(
    ("policy", "piece", "unit", "read_s"),
    [
        (StepPolicy(max_stream_chunks=1000), "", "chunks", 1.001),  # keep-alives count
        (StepPolicy(max_stream_chunks=1000), "x", "chunks", 1.001),
        (StepPolicy(max_stream_bytes=10_000), "x" * 1000, "characters", 0.011),
    ],
    ids=["keepalives", "tokens", "text"],
)
def test_a_runaway_stream_fails_at_its_budget_and_the_step_fails_over(
    policy: StepPolicy, piece: str, unit: str, read_s: float
) -> None:
    """Past its budget a stream is a failed attempt (StreamTooLarge), retried on the hedge route."""
    result, sink = step(policy, runaway(piece))
    assert "fine" == result.text
    first, second = sink.records
    assert ("error", "StreamTooLarge", "a/m") == (
        first.status, first.error_type, f"{first.provider}/{first.model}"
    )  # fmt: skip
    assert f"budget of {1000 if unit == 'chunks' else 10_000:,} {unit}" in first.attrs["error"]
    assert first.total_s == pytest.approx(read_s)  # cut at its budget, not at the deadline
    assert (second.status, second.winner, second.provider) == ("ok", True, "b")


def test_a_runaway_primary_fails_at_its_budget_while_its_hedge_races_on() -> None:
    """Hedged at its cutoff, a runaway stream still fails at its budget; the hedge wins."""
    text = (
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 60\nhedge_budget: 0.5\nroutes:\n"
        "  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "steps:\n  s:\n    route: a/m\n    hedge_route: b/m\n    cutoff_s: 2\n"
        "    on_cutoff: hedge\n"
    )
    slow = runaway("x")

    async def fn(a: Attempt) -> AsyncIterator[Any]:
        if a.route == "b/m":
            await asyncio.sleep(10.0)
        async for chunk in slow(a):
            yield chunk

    sink = MemorySink()
    policy = StepPolicy(max_stream_chunks=5000)
    executor = Executor(parse_plan(text), ledger=Ledger(sink), policies={"s": policy})

    async def main() -> Any:
        with deadline_after(30.0):
            return await executor.run_step("s", fn, run_id="r")

    assert "fine" == _fakeloop.run(main()).text
    primary, hedge = sorted(sink.records, key=lambda line: line.attempt)
    assert ("error", "StreamTooLarge", "total") == (
        primary.status, primary.error_type, primary.attrs["cutoff"]
    )  # fmt: skip
    assert primary.total_s == pytest.approx(5.001)
    assert (hedge.role, hedge.winner, hedge.total_s) == ("hedge", True, 10.0)


def test_the_default_budgets_are_beyond_a_real_answer_and_the_policy_checks_them() -> None:
    """128k one-token chunks pass the defaults; a budget must be a positive integer."""
    tokens = 128_000

    async def long(a: Attempt) -> AsyncIterator[Any]:
        for _ in range(tokens):
            yield "word "
        yield FINAL

    result, sink = step(StepPolicy(), long)
    assert (tokens, "ok") == (result.output_tokens, sink.records[0].status)
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ConfigError, match="max_stream_bytes must be a positive integer"):
            StepPolicy(max_stream_bytes=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="max_stream_chunks must be a positive integer"):
            StepPolicy(max_stream_chunks=bad)  # type: ignore[arg-type]


def test_the_attempt_carries_the_steps_budgets_to_its_function() -> None:
    """An attempt function (an adapter) reads the step's byte budget from its Attempt."""
    seen: list[tuple[int, int]] = []

    async def fn(a: Attempt) -> str:
        seen.append((a.max_stream_bytes, a.max_stream_chunks))
        return "ok"

    step(StepPolicy(max_stream_bytes=123, max_stream_chunks=45), fn)
    assert [(123, 45)] == seen


# --- chat_attempt: the raw bytes ------------------------------------------------------------


def attempt(max_bytes: int) -> Attempt:
    return Attempt("s", "fake/m", "fake", "m", 0, "primary", "k", now() + 30.0,
                   max_stream_bytes=max_bytes)  # fmt: skip


class Endless:
    """An endless body of ``piece``, counting the bytes it gave."""

    def __init__(self, piece: bytes) -> None:
        self.piece, self.sent = piece, 0

    async def body(self) -> AsyncIterator[bytes]:
        """The body: ``piece`` forever."""
        while True:
            self.sent += len(self.piece)
            yield self.piece


async def drain(chunks: Any) -> int:
    """Read a stream of chunks to its end; how many there were."""
    count = 0
    async for _ in chunks:
        count += 1
    return count


def endless(body: Endless, content_type: str = "text/event-stream") -> httpx.AsyncClient:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body.body())

    return httpx.AsyncClient(transport=httpx.MockTransport(respond))


@pytest.mark.parametrize(
    "piece",
    [
        b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',  # events, never [DONE]
        b"x" * 65536,  # one line that never ends
        b"\n" * 4096,  # blank lines: no event at all
    ],
    ids=["events", "one-line", "blank-lines"],
)
def test_chat_attempt_stops_reading_a_stream_at_its_byte_budget(piece: bytes) -> None:
    """chat_attempt raises StreamTooLarge after max_stream_bytes, however the bytes come."""
    body = Endless(piece)
    budget = 1 << 20

    async def main() -> BaseException:
        async with endless(body) as client:
            call = chat_attempt("http://x/v1", [], client=client)
            with pytest.raises(StreamTooLarge) as info:
                await drain(call(attempt(budget)))
        return info.value

    error = run_real(main())
    assert "1,048,576 bytes" in str(error)
    assert ("error", "bytes") == (error.status, error.unit)  # type: ignore[attr-defined]
    assert budget < body.sent <= budget + 2 * max(len(piece), 65536)  # read no further


@pytest.mark.parametrize("content_type", ["application/json"], ids=["json-answer"])
def test_a_non_streamed_answer_is_read_to_the_byte_budget_only(content_type: str) -> None:
    """stream=False: an endless JSON body is cut at the budget too (it was read whole)."""
    body = Endless(b'{"choices": [' + b"1," * 32768)

    async def main() -> BaseException:
        async with endless(body, content_type) as client:
            call = chat_attempt("http://x/v1", [], client=client, stream=False)
            with pytest.raises(StreamTooLarge) as info:
                await call(attempt(1 << 20))  # type: ignore[misc]
        return info.value

    run_real(main())
    assert body.sent <= (1 << 20) + 2 * len(body.piece)


def test_an_endless_error_body_is_read_for_its_message_only() -> None:
    """A 500 whose body never ends: its first 64 KiB give the message; the rest is not read."""
    body = Endless(b"overloaded " * 1000)

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=body.body())

    async def main() -> BaseException:
        async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
            call = chat_attempt("http://x/v1", [], client=client)
            with pytest.raises(AttemptError) as info:
                await drain(call(attempt(1 << 30)))
        return info.value

    error = run_real(main())
    assert "HTTP 500: overloaded overloaded" in str(error)
    assert body.sent < 1 << 20


# --- the SDK adapters -----------------------------------------------------------------------


def chat_chunk(text: str) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "a",
            "choices": [choice]}  # fmt: skip


OPENAI_REPLIES = {
    "events": Reply(events=tuple(("", chat_chunk("word")) for _ in range(400))),
    "one-line": Reply(events=(("", "x" * 200_000),)),
}


@pytest.mark.parametrize("kind", sorted(OPENAI_REPLIES))
def test_the_openai_sdk_adapter_counts_the_bytes_the_sdk_reads(kind: str) -> None:
    """Past the byte budget the SDK's stream raises StreamTooLarge (not JSON or truncation)."""

    async def main() -> BaseException:
        async with FakeSDKServer([OPENAI_REPLIES[kind]]) as server:
            client = openai.AsyncOpenAI(api_key="sk", base_url=f"{server.url}/v1")
            try:
                call = openai_chat_attempt(client, MESSAGES)
                with pytest.raises(StreamTooLarge) as info:
                    await drain(call(attempt(8192)))
            finally:
                await client.close()
        return info.value

    assert "8,192 bytes" in str(run_real(main()))


def test_the_anthropic_sdk_adapter_counts_the_bytes_its_sdk_reads() -> None:
    """The Anthropic SDK wraps errors in its stream as connection errors: the budget's shows."""
    delta = {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "word"}}  # fmt: skip
    reply = Reply(events=tuple(("content_block_delta", delta) for _ in range(400)))

    async def main() -> BaseException:
        async with FakeSDKServer([reply]) as server:
            client = anthropic.AsyncAnthropic(api_key="sk", base_url=server.url)
            try:
                call = anthropic_messages_attempt(client, MESSAGES, max_tokens=10)
                with pytest.raises(StreamTooLarge) as info:
                    await drain(call(attempt(8192)))
            finally:
                await client.close()
        return info.value

    assert "8,192 bytes" in str(run_real(main()))


# --- the SSE decoder: linear work, a bounded event ------------------------------------------


class _Counted:
    """The decoder's line-end pattern, counting the characters it is asked to search."""

    def __init__(self, limit: int) -> None:
        self.scanned, self.limit = 0, limit

    def split(self, text: str) -> list[str]:
        self.scanned += len(text)
        assert self.scanned <= self.limit, "the decoder searched the same text again"
        return re.split(r"\r\n|\r|\n", text)


def test_one_20_mb_event_in_64_kib_reads_is_searched_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each byte of a 20 MB line is searched for a line end once (it was: every read, again)."""
    size, read = 20 * 2**20, 64 * 1024
    body = b'data: "' + b"x" * size + b'"\n\n'
    counted = _Counted(limit=len(body) + 16)
    monkeypatch.setattr(sse_module, "_LINE_BREAK", counted)
    decoder = SSEDecoder()
    events = []
    for start in range(0, len(body), read):
        events += decoder.feed(body[start : start + read])
    events += decoder.close()
    assert [("", '"' + "x" * size + '"')] == events
    assert counted.scanned <= len(body)


def test_an_event_of_many_data_lines_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 data lines of one event: its data is not parsed again at every new line."""
    parsed = [0]
    real = json.loads
    body = b"data: [\n" + b"data: [1],[1],\n" * 20_000 + b"data: [1]]\n\n"

    def loads(text: str) -> Any:
        parsed[0] += len(text)
        assert parsed[0] <= 2 * len(body), "the decoder parsed the same data again"
        return real(text)

    monkeypatch.setattr(sse_module.json, "loads", loads)
    decoder = SSEDecoder()
    events = [e for start in range(0, len(body), 4096) for e in decoder.feed(body[start:][:4096])]
    [(_, data)] = events + decoder.close()
    assert len(real(data)) == 40_001
    assert parsed[0] <= 2 * len(body)


@pytest.mark.parametrize("split", [1, 2, 3, 5, 4096], ids=lambda n: f"pieces-of-{n}")
def test_line_ends_split_across_pieces_read_as_one(split: int) -> None:
    """CR LF split between pieces is one line end; CR CR and LF LF are two (a blank line)."""
    body = b"data: 1\r\n\r\ndata: 2\r\rdata: 3\n\ndata: \xe2\x9c\x93\r\n\r\n: c\r\ndata: [DONE]"
    decoder = SSEDecoder()
    events = [e for i in range(0, len(body), split) for e in decoder.feed(body[i : i + split])]
    assert [("", "1"), ("", "2"), ("", "3"), ("", "✓"), ("", "[DONE]")] == events + decoder.close()


def test_the_decoder_refuses_a_body_past_its_byte_budget() -> None:
    """With max_bytes, one event (or line) never grows past it: StreamTooLarge names the where."""
    decoder = SSEDecoder(max_bytes=100_000, where="fake/m at http://x")
    for _ in range(99):
        assert [] == decoder.feed(b"data: " + b"x" * 1000)
    with pytest.raises(StreamTooLarge, match=r"^fake/m at http://x: .* 100,000 bytes"):
        decoder.feed(b"data: " + b"x" * 1000)


def test_one_event_may_hold_a_sixteenth_of_the_budget() -> None:
    """chat_attempt: one event (or line) past budget / 16 is refused before it is parsed."""
    body = Endless(b'data: {"choices": [' + b"1," * 32768)  # one event that never ends
    budget = 64 * 2**20

    async def main() -> BaseException:
        async with endless(body) as client:
            call = chat_attempt("http://x/v1", [], client=client)
            with pytest.raises(StreamTooLarge) as info:
                await drain(call(attempt(budget)))
        return info.value

    error = run_real(main())
    assert "4,194,304 bytes in one event" in str(error)
    assert body.sent <= budget // 16 + 2 * len(body.piece)
    decoder = SSEDecoder(max_event_bytes=1000)
    assert [("", "x" * 900)] == decoder.feed(b"data: " + b"x" * 900 + b"\n\n")  # one at a time
    decoder.feed(b"data: " + b"x" * 900 + b"\n")
    with pytest.raises(StreamTooLarge, match="1,000 bytes in one event"):
        decoder.feed(b"data: " + b"x" * 200 + b"\n")  # the same event's data: 1,100


def test_an_error_message_reads_only_the_start_of_a_huge_body() -> None:
    """Clip keeps 300 characters on one line, splitting only the start of what it is given."""
    split: list[int] = []

    class Body(str):
        """A body that notes how much of it is split into words."""

        __slots__ = ()

        def split(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
            split.append(len(self))
            return super().split(*args, **kwargs)

    assert "a b c" == clip(Body("  a  b\n c "))
    huge = Body("word " * 1_000_000)  # 5 MB of words: 1 million strings if split whole
    assert ("word " * 60)[:299] + "…" == clip(huge)
    assert max(split, default=0) <= 11
    assert 300 == len(clip("ab " * 100 + " " * 3000 + "z"))
