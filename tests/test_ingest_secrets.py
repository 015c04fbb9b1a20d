"""
Credentials and prompts never reach the store: not in attrs, not in a rejected row's raw text.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from tailkit.ingest import ingest_paths
from tailkit.store import Store


SECRETS = ("sk-live-SECRET", "Bearer tok-SECRET", "PROMPT-TEXT", "COMPLETION-TEXT", "cookie-SECRET")


def _everything(store: Store) -> str:
    """All text the store keeps about calls and rejects."""
    calls = store.fetchall("SELECT attrs::VARCHAR FROM calls")
    rejects = store.fetchall("SELECT detail, raw FROM rejects")
    return json.dumps([calls, rejects])


def _assert_clean(store: Store) -> None:
    kept = _everything(store)
    assert [] == [s for s in SECRETS if s in kept]


def _litellm(i: int, **over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": f"chatcmpl-{i}", "call_type": "acompletion", "stream": False, "status": "success",
        "custom_llm_provider": "openai", "model": "gpt-4o", "startTime": 1767225600.0 + i,
        "endTime": 1767225601.5 + i, "prompt_tokens": 10, "completion_tokens": 5,
        "api_key": "sk-live-SECRET",
        "messages": [{"role": "user", "content": "PROMPT-TEXT"}],
        "response": {"choices": [{"message": {"content": "COMPLETION-TEXT"}}]},
        "metadata": {
            "user_api_key": "sk-live-SECRET", "user_api_key_team_id": "team-a",
            "headers": {"Authorization": "Bearer tok-SECRET", "x-request": "r"},
            "requester_custom_headers": {"authorization": "Bearer tok-SECRET",
                                         "cookie": "cookie-SECRET"},
        },
    }  # fmt: skip
    return {**row, **over}


@pytest.mark.parametrize("torn", [False, True], ids=["fast-path", "line-by-line"])
def test_litellm_rejects_and_attrs_keep_no_secret(store: Store, tmp_path: Path, torn: bool) -> None:
    """A rejected LiteLLM row loses api_key, Authorization and the prompt; so does every attrs."""
    lines = [
        json.dumps(_litellm(1)),
        json.dumps(_litellm(2, endTime="not a time")),
        *(['{"id": "torn", "api_key": "sk-live-SECRET", "messages": "PROMPT-TEXT'] if torn else []),
        json.dumps(_litellm(3)),
    ]
    path = tmp_path / "litellm.jsonl"
    path.write_text("\n".join(lines) + "\n")

    report = ingest_paths(store, [path], format="litellm")

    assert report.ok, report.errors
    assert 2 == report.totals()["stored"]
    assert 1 + torn == report.totals()["rejected"]
    _assert_clean(store)
    attrs = store.fetchone("SELECT attrs FROM calls WHERE call_id = 'chatcmpl-1'")
    assert attrs is not None
    assert "team-a" == json.loads(attrs[0])["metadata"]["user_api_key_team_id"]
    raw = store.fetchone("SELECT raw FROM rejects WHERE source_row = 2")
    assert raw is not None
    assert "not a time" in raw[0]  # the rejected line is still shown, minus the secrets


@pytest.mark.parametrize("torn", [False, True], ids=["fast-path", "line-by-line"])
def test_generic_jsonl_drops_credential_and_content_columns(
    store: Store, tmp_path: Path, torn: bool
) -> None:
    """A generic file's api_key, headers, messages and prompt are neither attrs nor raw text."""

    def row(i: int, total: object) -> str:
        return json.dumps({
            "call_id": f"c{i}", "provider": "openai", "model": "gpt-4o", "total_s": total,
            "api_key": "sk-live-SECRET", "headers": {"Authorization": "Bearer tok-SECRET"},
            "messages": [{"content": "PROMPT-TEXT"}], "prompt": "PROMPT-TEXT",
            "output": "COMPLETION-TEXT", "region": "eu", "prompt_tokens": 7,
        })  # fmt: skip

    lines = [row(1, 1.5), row(2, -1), *(['{"api_key": "sk-live-SECRET", "x'] if torn else [])]
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n")

    report = ingest_paths(store, [path])

    assert report.ok, report.errors
    assert (1, 1 + torn) == (report.totals()["stored"], report.totals()["rejected"])
    _assert_clean(store)
    attrs = store.fetchone("SELECT attrs FROM calls")
    assert attrs is not None
    assert {"region": "eu", "prompt_tokens": 7} == json.loads(attrs[0])


def test_generic_csv_drops_credential_columns(store: Store, tmp_path: Path) -> None:
    """A CSV's api_key and prompt columns are not kept in attrs."""
    path = tmp_path / "calls.csv"
    path.write_text(
        "call_id,provider,model,total_s,api_key,prompt,region\n"
        "c1,openai,gpt-4o,1.5,sk-live-SECRET,PROMPT-TEXT,eu\n"
        "c2,openai,gpt-4o,1.5,sk-live-SECRET,PROMPT-TEXT,eu,one column too many\n"
    )

    report = ingest_paths(store, [path])

    assert report.ok, report.errors
    assert {"malformed_row": 1} == report.files[0].reasons
    _assert_clean(store)
    attrs = store.fetchone("SELECT attrs FROM calls")
    assert attrs is not None
    assert {"region": "eu"} == json.loads(attrs[0])


def test_a_rejected_langfuse_observation_keeps_no_prompt(store: Store, tmp_path: Path) -> None:
    """A rejected observation's raw text has no input, output or metadata."""
    obs = {
        "id": "obs_1", "trace_id": "tr_1", "type": "GENERATION", "name": "chat",
        "start_time": "2026-01-01 00:00:00.112000", "end_time": "not a time",
        "completion_start_time": None, "provided_model_name": "gpt-4o-mini",
        "model_parameters": {"provider": "openai", "api_key": "sk-live-SECRET"},
        "input": [{"role": "user", "content": "PROMPT-TEXT"}], "output": "COMPLETION-TEXT",
        "metadata": {"headers": {"authorization": "Bearer tok-SECRET"}},
    }  # fmt: skip
    path = tmp_path / "obs.jsonl"
    path.write_text(json.dumps(obs) + "\n")

    report = ingest_paths(store, [path], format="langfuse")

    assert report.ok, report.errors
    assert 1 == report.totals()["rejected"]
    _assert_clean(store)


def test_a_rejected_otel_span_keeps_no_prompt(store: Store, tmp_path: Path) -> None:
    """A rejected span's text has no prompt, completion or credential attribute."""

    def attr(key: str, value: str) -> dict[str, object]:
        return {"key": key, "value": {"stringValue": value}}

    span = {
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7",
        "name": "chat", "kind": 3, "startTimeUnixNano": "1767225600000000000",
        "endTimeUnixNano": "not a time",
        "attributes": [
            attr("gen_ai.operation.name", "chat"), attr("gen_ai.provider.name", "openai"),
            attr("gen_ai.request.model", "gpt-4o"), attr("gen_ai.prompt.0.content", "PROMPT-TEXT"),
            attr("gen_ai.completion.0.content", "COMPLETION-TEXT"),
            attr("http.request.header.authorization", "Bearer tok-SECRET"),
            attr("llm.token_count.prompt", "12"),
        ],
        "events": [{"name": "gen_ai.content.prompt",
                    "attributes": [attr("gen_ai.prompt", "PROMPT-TEXT")]}],
        "status": {},
    }  # fmt: skip
    request = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(request) + "\n")

    report = ingest_paths(store, [path], format="otel")

    assert report.ok, report.errors
    assert 1 == report.totals()["rejected"]
    _assert_clean(store)
    raw = store.fetchone("SELECT raw FROM rejects")
    assert raw is not None
    assert "llm.token_count.prompt" in raw[0]  # counts are not content


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_credentials_nested_in_a_kept_column_are_dropped(
    store: Store, tmp_path: Path, suffix: str
) -> None:
    """
    A nested object kept in attrs loses the credentials inside it, at any depth.
    """
    path = tmp_path / f"nested.{suffix}"
    rows = (
        "SELECT 'openai' AS provider, 'gpt-4o' AS model, 1.5 AS total_s, "
        "{'api_key': 'sk-nested-1', 'team': 't', 'deep': {'client_secret': 'sk-nested-2'}} AS meta"
    )
    if suffix == "jsonl":
        store.execute(f"COPY ({rows}) TO '{path}' (FORMAT json)")
    else:
        store.execute(f"COPY ({rows}) TO '{path}' (FORMAT parquet)")

    report = ingest_paths(store, [path])

    assert 1 == report.totals()["stored"]
    (attrs,) = store.fetchone("SELECT attrs::VARCHAR FROM calls")
    assert "sk-nested" not in attrs
    assert '"team":"t"' in attrs
