"""
Credentials and prompts never reach the store: not in attrs, not in a rejected row's raw text.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any

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


# Secrets inside values: found by their shape, wherever the text is stored.

VALUE_SECRETS = (
    "hunter2", "sk-proj-Abc123def456ghi789", "AIzaSyA-1234567890abcdefghijklmnopqrs",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdefghijklmnopqrstuvwxyz0123", "sk-ant-api03-XyZ987654321", "Sig0123456789abcdef",
    "tok-2345678901", "basicpass0123", "sk-line-Start1234", "Zq9Secret77", "hdr-Secret-88",
    "Qq7Hidden99",
)  # fmt: skip


def _with_secrets(i: int, total: object = 1.5) -> dict[str, object]:
    return {
        "call_id": f"c{i}", "provider": "openai", "model": "gpt-4o", "total_s": total,
        "started_at": f"2026-01-01T00:00:{i:02d}Z", "status": "error",
        "error_type": "AuthenticationError: Incorrect API key provided: sk-proj-Abc123def456ghi789",
        "api_base": "https://user:hunter2@proxy.internal:8443/v1?key=AIzaSyA-1234567890abcdefghij"
        "klmnopqrs&alt=json",
        "error_message": "401 from upstream; request had Authorization: Bearer eyJhbGciOiJIUzI1Ni"
        "J9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl and x-api-key: sk-ant-api03-XyZ987654321",
        "meta": {"aws": "AKIAIOSFODNN7EXAMPLE", "gh": "token ghp_abcdefghijklmnopqrstuvwxyz0123",
                 "blob": "https://b.blob.core.windows.net/c?sv=2024&sig=Sig0123456789abcdef"},
        "tags": ["Bearer tok-2345678901", "proxy=http://svc:basicpass0123@10.0.0.1:3128"],
        "trace": "Traceback:\nsk-line-Start1234\napi_key=Zq9Secret77\nx-api-key: hdr-Secret-88",
        "upstream_body": json.dumps({"error": "bad request", "api_key": "Qq7Hidden99"}),
    }  # fmt: skip


def _all_text(store: Store) -> str:
    """Every value of calls and rejects, as text."""
    return json.dumps(
        [store.fetchall("SELECT * EXCLUDE (started_at) FROM calls"),
         store.fetchall("SELECT * FROM rejects")],
        default=str,
    )  # fmt: skip


@pytest.mark.parametrize("together", [False, True], ids=["alone", "batch"])
def test_secrets_inside_values_are_redacted_alone_and_in_a_batch(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    """URL passwords, ?key=, quoted keys and tokens become [redacted], the rest stays readable."""
    from tailkit.ingest import _batch

    if not together:
        monkeypatch.setattr(_batch, "MAX_FILE_BYTES", 0)
    inserts: list[str] = []
    for name in ("execute", "fetchone"):
        original = getattr(Store, name)

        def spy(self: Store, sql: str, params: object = None, _original: Any = original) -> Any:
            inserts.extend([sql] if sql.startswith("INSERT INTO calls") else [])
            return _original(self, sql, params)

        monkeypatch.setattr(Store, name, spy)
    files = []
    for n in range(3):
        path = tmp_path / f"{n}.jsonl"
        rows = [_with_secrets(10 * n + 1), _with_secrets(10 * n + 2, total=-1)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(path)

    report = ingest_paths(store, files)

    assert report.ok, report.errors
    assert (3, 3) == (report.totals()["stored"], report.totals()["rejected"])
    assert (1 if together else 3) == len(inserts)
    kept = _all_text(store)
    assert [] == [s for s in VALUE_SECRETS if s in kept]
    (error_type, attrs) = store.fetchone("SELECT error_type, attrs FROM calls WHERE call_id = 'c1'")
    assert "AuthenticationError: Incorrect API key provided: [redacted]" == error_type
    attrs = json.loads(attrs)
    assert (
        "https://user:[redacted]@proxy.internal:8443/v1?key=[redacted]&alt=json"
        == attrs["api_base"]
    )
    assert attrs["error_message"].startswith("401 from upstream; request had Authorization: [re")
    blob = "https://b.blob.core.windows.net/c?sv=2024&sig=[redacted]"
    assert {"aws": "[redacted]", "gh": "token [redacted]", "blob": blob} == attrs["meta"]
    assert ["Bearer [redacted]", "proxy=http://svc:[redacted]@10.0.0.1:3128"] == attrs["tags"]
    assert "Traceback:\n[redacted]\napi_key=[redacted]\nx-api-key: [redacted]" == attrs["trace"]
    assert {"error": "bad request", "api_key": "[redacted]"} == json.loads(attrs["upstream_body"])
    (raw,) = store.fetchone("SELECT raw FROM rejects WHERE source_row = 2 ORDER BY ingest_id")
    assert "proxy.internal:8443" in raw  # the rejected line is still shown, minus the secrets
    assert all(json.loads(a) is not None for (a,) in store.fetchall("SELECT attrs FROM calls"))


def test_a_line_the_reader_refuses_loses_its_secrets(store: Store, tmp_path: Path) -> None:
    """A torn ledger line (a reader reject): its raw text and its detail are scrubbed too."""
    good = {
        "call_id": "k1-0", "run_id": "r", "step": "s", "attempt": 0, "role": "primary",
        "provider": "openai", "model": "gpt-4o", "started_at": "2026-11-29T12:00:03Z",
        "total_s": 1.5, "status": "ok", "idempotency_key": "k1", "winner": True,
        "attrs": {"endpoint": "https://u:hunter2@h/v1"},
    }  # fmt: skip
    torn = '{"call_id": "k2-0", "error_type": "at https://u:hunter2@h/v1?key=sk-proj-Abc123def456'
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(good) + "\n" + torn + "\n")

    report = ingest_paths(store, [path], format="trace")

    assert report.ok, report.errors
    assert {"malformed_json": 1} == report.files[0].reasons
    kept = _all_text(store)
    assert [] == [s for s in (*VALUE_SECRETS, "sk-proj-Abc") if s in kept]
    (detail, raw) = store.fetchone("SELECT detail, raw FROM rejects")
    assert raw.endswith('"at https://u:[redacted]@h/v1?key=[redacted]')
    assert detail.startswith('line is not a JSON object: {"call_id": "k2-0", "error_type": "at')


def test_a_litellm_error_string_keeps_its_words_not_its_key(store: Store, tmp_path: Path) -> None:
    """LiteLLM's error_str quotes the key it refused: kept in attrs, with the key redacted."""
    row = _litellm(
        1, status="failure", error_str="litellm.AuthenticationError: OpenAIException - Incorrect "
        "API key provided: sk-proj-Abc123def456ghi789. You can find your API key at https://x",
        api_base="https://api.openai.com/v1?api-key=basicpass0123",
    )  # fmt: skip
    path = tmp_path / "litellm.jsonl"
    path.write_text(json.dumps(row) + "\n")

    report = ingest_paths(store, [path], format="litellm")

    assert report.ok, report.errors
    assert 1 == report.totals()["stored"]
    kept = _all_text(store)
    assert [] == [s for s in (*VALUE_SECRETS, *SECRETS) if s in kept]
    attrs = json.loads(store.fetchone("SELECT attrs FROM calls")[0])
    assert "Incorrect API key provided: [redacted]. You can find" in attrs["error_str"]
    assert "https://api.openai.com/v1?api-key=[redacted]" == attrs["api_base"]


SCRUBBED = [
    ("https://user:pa:ss@host.com/x?y=1", "https://user:[redacted]@host.com/x?y=1"),
    ("postgres://app:s3cr3t@db:5432/calls", "postgres://app:[redacted]@db:5432/calls"),
    ("GET /v1?key=AIzaSy123&alt=json", "GET /v1?key=[redacted]&alt=json"),
    ("?access_token=abc.def&other=1", "?access_token=[redacted]&other=1"),
    ("X-Amz-Credential=AK%2F2026&X-Amz-Signature=ab12&X-Amz-Date=1",
     "X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]&X-Amz-Date=1"),
    ("retry with api_key=k-123, then fail", "retry with api_key=[redacted], then fail"),
    ("Incorrect API key: sk-proj-abc123DEF456.", "Incorrect API key: [redacted]."),
    ("key sk-ant-api03-xxxxxxxxxx here", "key [redacted] here"),
    ("authorization: Basic dXNlcjpwYXNz", "authorization: [redacted]"),
    ('{"error": "Invalid x-api-key: abcdef"}', '{"error": "Invalid x-api-key: [redacted]"}'),
    ("BEARER abcdefghijk", "BEARER [redacted]"),
    ("id AKIAIOSFODNN7EXAMPLE,", "id [redacted],"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123", "[redacted]"),
    ("hf_abcdefghijklmnopqrstuvwx", "[redacted]"),
    ("eyJhbGciOi.eyJzdWIiOiIx.sig-abc", "[redacted]"),
    # After a line break written as a JSON escape (the text of attrs).
    (r"one\nsk-proj-abc123DEF456\tapi_key=k-1\nCookie: s=1",
     r"one\n[redacted]\tapi_key=[redacted]\nCookie: [redacted]"),
    # A credential's pair quoted in error text: a Python dict, an inner JSON, a header line.
    ("{'api_key': 'abc123', 'model': 'x'}", "{'api_key': '[redacted]', 'model': 'x'}"),
    (r'{\"client_secret\": \"abc123\", \"n\": 1}',
     r'{\"client_secret\": \"[redacted]\", \"n\": 1}'),
    ("Password: hunter2", "Password: [redacted]"),
    # Not secrets: kept as they are.
    ("max token: 4096; key: not found; password_policy: strict",
     "max token: 4096; key: not found; password_policy: strict"),
    ("ssh://git@github.com/x", "ssh://git@github.com/x"),
    ("http://host:8080/path@x", "http://host:8080/path@x"),
    ("task-1234567890abcdef", "task-1234567890abcdef"),
    ("monkey=banana&prompt_tokens=12", "monkey=banana&prompt_tokens=12"),
    ("the Bearer token was refused", "the Bearer token was refused"),
    ("gpt-4o-mini", "gpt-4o-mini"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "want"), SCRUBBED, ids=[t for t, _ in SCRUBBED])
def test_scrub_text_in_python_and_in_duckdb(store: Store, text: str, want: str) -> None:
    """One expression: Python's re and DuckDB's RE2 redact the same parts of a text."""
    from tailkit.formats._secrets import scrub_text
    from tailkit.formats.lowlevel import literal, scrub_values

    assert want == scrub_text(text)
    row = store.fetchone(f"SELECT {scrub_values(literal(text))}")
    assert row is not None
    assert want == row[0]
