"""
Options on formats with a fixed layout: each is applied, or refused naming the format and fix.

A fixed layout reads its own field names, so ``--map`` never applies, ``--unit`` only confirms
its own unit, and ``--status-map`` applies only where a source status vocabulary passes through
(LiteLLM's ``status``, Helicone's ``response_status``). Nothing is ignored silently, and a
missing model's hint names only an option the format accepts.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from tailkit.formats import ScanOptions
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS, LLMPERF


_SAMPLES = {
    "vllm-bench": CORPUS / "vllm-bench" / "detailed.json",
    "aiperf": CORPUS / "aiperf" / "profile_export.jsonl",
    "genai-perf": CORPUS / "genai-perf" / "profile_export.json",
    "guidellm": CORPUS / "guidellm" / "report.json",
    "otel": CORPUS / "otel" / "genai.jsonl",
    "llmperf": LLMPERF / "individual" / "together_13b.json",
    "langfuse": CORPUS / "langfuse" / "observations.jsonl",
    "litellm": CORPUS / "litellm" / "standard_logging_payload.jsonl",
    "helicone": CORPUS / "helicone" / "export.jsonl",
}
_OWN_UNIT = {"helicone": "ms", "aiperf": None}
_DERIVED_STATUS = ("vllm-bench", "aiperf", "genai-perf", "guidellm", "otel", "llmperf", "langfuse")


def _error(store: Store, fmt: str, options: ScanOptions) -> str:
    report = ingest_paths(store, [_SAMPLES[fmt]], format=fmt, options=options)
    assert 1 == len(report.errors), report
    assert 0 == store.fetchone("SELECT count(*) FROM calls")[0]
    return str(report.errors[0])


@pytest.mark.parametrize("fmt", _DERIVED_STATUS)
def test_status_map_is_refused_where_the_status_is_derived(store: Store, fmt: str) -> None:
    """
    --status-map on a format whose statuses are always call-record statuses is an error.
    """
    message = _error(store, fmt, ScanOptions(status_map={"done": "ok"}))

    assert str(_SAMPLES[fmt]) in message
    assert f"status_map does not apply to format {fmt}" in message
    assert message.endswith("drop status_map done=ok")


@pytest.mark.parametrize("fmt", sorted(_SAMPLES))
def test_another_unit_is_refused(store: Store, fmt: str) -> None:
    """
    --unit other than the format's own unit is an error naming the format.
    """
    other = "s" if _OWN_UNIT.get(fmt, "s") == "ms" else "ms"
    message = _error(store, fmt, ScanOptions(unit=other))

    assert f"unit {other} does not apply to format {fmt}" in message


@pytest.mark.parametrize("fmt", sorted(_SAMPLES))
def test_map_is_refused(store: Store, fmt: str) -> None:
    """
    --map on a fixed layout is an error naming the format and the --map given.
    """
    message = _error(store, fmt, ScanOptions(mapping={"model": "name"}))

    assert f"mapping does not apply to format {fmt}" in message
    assert "drop mapping model=name" in message


def test_set_over_replaces_a_fixed_layouts_value(store: Store) -> None:
    """
    --set-over is applied in a fixed layout (the same as --set there): every row takes it.
    """
    options = ScanOptions(sets={"provider": "azure"}, overrides=frozenset({"provider"}))
    report = ingest_paths(store, [_SAMPLES["litellm"]], format="litellm", options=options)

    assert report.ok
    assert [("azure",)] == store.fetchall("SELECT DISTINCT provider FROM calls")


_PAYLOAD = {
    "id": "c1", "call_type": "acompletion", "custom_llm_provider": "openai", "model": "gpt-4o",
    "startTime": 1767225600.0, "endTime": 1767225602.5, "prompt_tokens": 10,
    "completion_tokens": 5,
}  # fmt: skip


def test_litellm_status_map_reads_a_status_vocabulary(store: Store, tmp_path: Path) -> None:
    """
    LiteLLM: a status value it does not know is mapped by --status-map; a timeout is censored.
    """
    path = tmp_path / "payload.jsonl"
    rows = [
        {**_PAYLOAD, "id": "c1", "status": "done"},
        {**_PAYLOAD, "id": "c2", "status": "deadline"},
        {**_PAYLOAD, "id": "c3", "status": "success"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = ScanOptions(status_map={"Done": "ok", "deadline": "timeout"})

    report = ingest_paths(store, [path], format="litellm", options=options)

    assert report.ok
    assert [
        ("c1", "ok", 2.5, None),
        ("c2", "timeout", None, 2.5),
        ("c3", "ok", 2.5, None),
    ] == store.fetchall("SELECT call_id, status, total_s, censored_at_s FROM calls ORDER BY 1")


def test_litellm_unknown_status_names_the_status_map(store: Store, tmp_path: Path) -> None:
    """
    LiteLLM: without --status-map an unknown status is a reject whose detail names the option.
    """
    path = tmp_path / "payload.jsonl"
    path.write_text(json.dumps({**_PAYLOAD, "status": "done"}) + "\n")

    ingest_paths(store, [path], format="litellm")

    assert [
        ("bad_status", "status 'done' is not one of ok, error, timeout, cancelled, invalid, "
         "rate_limited (map other values with --status-map VALUE=STATUS)"),
    ] == store.fetchall("SELECT reason, detail FROM rejects")  # fmt: skip


def test_helicone_status_map_reads_other_codes(store: Store, tmp_path: Path) -> None:
    """
    Helicone: --status-map 529=rate_limited reads an overloaded answer as rate-limited.
    """
    row = json.loads(_SAMPLES["helicone"].read_text().splitlines()[0])
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({**row, "response_status": 529}) + "\n")
    options = ScanOptions(status_map={"529": "rate_limited"})

    plain = ingest_paths(store, [path], format="helicone")
    with Store.open(tmp_path / "mapped.duckdb") as other:
        mapped = ingest_paths(other, [path], format="helicone", options=options)
        rows = other.fetchall("SELECT status, error_type, http_status FROM calls")

    assert plain.ok
    assert mapped.ok
    assert [("error", "http_529", 529)] == store.fetchall(
        "SELECT status, error_type, http_status FROM calls"
    )
    assert [("rate_limited", "http_529", 529)] == rows


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("vllm-bench", json.dumps({"backend": "vllm", "ttfts": [0.1], "itls": [[0.2]]})),
        ("litellm", json.dumps({**_PAYLOAD, "model": None, "status": "success"})),
    ],
)
def test_missing_model_hint_names_only_set(
    store: Store, tmp_path: Path, fmt: str, text: str
) -> None:
    """
    A fixed layout's missing_model detail names --set model, never --map (which it refuses).
    """
    path = tmp_path / "in.json"
    path.write_text(text + "\n")

    ingest_paths(store, [path], format=fmt)

    assert [("missing_model", "model is missing (fill it with --set model=VALUE)")] == (
        store.fetchall("SELECT reason, detail FROM rejects")
    )
