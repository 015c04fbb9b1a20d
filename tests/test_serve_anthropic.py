"""
`tailkit serve` answers Anthropic's Messages API: the real ``anthropic`` SDK against its faults.
"""

from __future__ import annotations

import asyncio
import json
import time

from pathlib import Path
from typing import Any

import anthropic
import pytest

from tailkit.executor._ledger import AttemptRecord
from tailkit.serve import Faults, ServeConfig, Server

from .test_serve import (
    CLOSE,
    PROMPT,
    WORDS,
    Reply,
    chat,
    config,
    fixed,
    request_bytes,
    send,
    serving,
)


MESSAGES = "/v1/messages"


def client(server: Server, **kw: Any) -> anthropic.AsyncAnthropic:
    """
    The official SDK pointed at ``server``, its own retries off: every request is one attempt.
    """
    base_url = f"http://127.0.0.1:{server.port}"
    return anthropic.AsyncAnthropic(base_url=base_url, api_key="x", max_retries=0, **kw)


async def message(port: int, *, headers: dict[str, str] | None = None, **body: Any) -> Reply:
    """
    One raw ``POST /v1/messages`` on a new connection.
    """
    doc = {"model": "m", "max_tokens": 5, "messages": PROMPT, **body}
    return await send(port, request_bytes("POST", MESSAGES, doc, {**CLOSE, **(headers or {})}))


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
    assert "not_found_error" == err.body["error"]["type"]  # type: ignore[index]
