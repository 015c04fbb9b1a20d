"""
GenAI-Perf raw exports: every request of every experiment becomes a call, times in nanoseconds.
"""

from __future__ import annotations

import json
import tempfile

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.formats import ScanOptions
from tailkit.formats._genai_perf import detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


EXPORT = CORPUS / "genai-perf" / "profile_export.json"
_COLUMNS = (
    "source_row, provider, model, epoch(started_at), ttft_s, total_s, input_tokens, "
    "output_tokens, status, error_type, http_status, censored_at_s, source"
)
_T0 = 1767225600.0
_L = ("openai", "llama-3-8b")
_G = "genai-perf"


def test_every_mapped_column(store: Store) -> None:
    """
    Nanosecond timestamps give start, TTFT and total; no response is an error.
    """
    report = ingest_paths(store, [EXPORT], format="genai-perf")

    assert report.ok, report.errors
    assert {
        "rows_in": 10,
        "stored": 6,
        "rejected": 4,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    approx = pytest.approx
    assert [
        (1, *_L, _T0, approx(0.212), approx(3.1), None, None, "ok", None, None, None, _G),
        (2, *_L, _T0 + 4, None, 1.5, None, None, "ok", None, None, None, _G),
        (3, *_L, _T0 + 6, None, 0.75, None, None, "ok", None, None, None, _G),
        (4, *_L, _T0 + 7, None, None, None, None, "error", "no_response", None, None, _G),
        (7, *_L, _T0 + 20, approx(1e-9), approx(2e-9), None, None, "ok", None, None, None, _G),
        (9, "openai", "mistral-7b", _T0 + 30, 0.25, 120.0, 4096, 1200, "ok", None, None, None,
         _G),
    ] == rows  # fmt: skip


def test_not_streamed_has_null_ttft(store: Store) -> None:
    """
    "stream": false or a single response: TTFT NULL, never 0 and never the total.
    """
    ingest_paths(store, [EXPORT], format="genai-perf")

    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0 OR ttft_s = total_s")
    assert [(False, None), (None, None)] == store.fetchall(
        "SELECT (attrs->>'stream')::BOOLEAN, ttft_s FROM calls "
        "WHERE (attrs->>'responses')::INT = 1 ORDER BY source_row"
    )


def test_attrs_keep_the_experiment(store: Store) -> None:
    """
    The experiment's load and the request's place are in attrs; response texts are not.
    """
    ingest_paths(store, [EXPORT], format="genai-perf")

    row = store.fetchone("SELECT attrs FROM calls WHERE source_row = 9")
    assert row is not None
    assert {
        "experiment": 2, "mode": "request_rate", "load": 5.0, "request_index": 2,
        "endpoint": "v1/chat/completions", "responses": 2, "stream": True,
    } == json.loads(row[0])  # fmt: skip


def test_bad_requests_are_rejected_with_their_place(store: Store) -> None:
    """
    A missing timestamp, a response before the request, a non-object and no model: rejects.
    """
    report = ingest_paths(store, [EXPORT], format="genai-perf")

    assert report.ok
    rejects = store.fetchall("SELECT source_row, reason, detail FROM rejects ORDER BY 1")
    assert [(5, "ttft_s_not_a_number"), (6, "ttft_s_negative"), (8, "malformed_request"),
            (10, "missing_model")] == [r[:2] for r in rejects]  # fmt: skip
    assert "timestamp missing" in rejects[0][2]
    assert "experiments[1].requests[1] is not an object: 42" == rejects[2][2]


def test_set_fills_the_model(store: Store) -> None:
    """
    --set model covers a payload that is not JSON (and overrides the others).
    """
    options = ScanOptions(sets={"model": "m"})
    report = ingest_paths(store, [EXPORT], format="genai-perf", options=options)

    assert report.totals()["stored"] == 7
    assert [("m",)] == store.fetchall("SELECT DISTINCT model FROM calls")


def test_detect_by_content() -> None:
    """
    An object with experiments and GenAI-Perf keys is an export; other JSON is not.
    """
    assert "GenAI-Perf" in (detect(EXPORT.read_text()[:65536], None) or "")
    doc = {"service_kind": "openai", "experiments": []}
    assert detect(json.dumps(doc), doc) is not None
    assert detect('{"experiments": []}', {"experiments": []}) is None
    assert detect('{"benchmarks": [], "guidellm_version": "1"}', None) is None


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2 * 10**18), st.floats(allow_nan=False),
    st.sampled_from(["", "x", "1.5", "1767225600000000000"]),
)  # fmt: skip
_TS = st.one_of(st.integers(1767225600 * 10**9, 1767225700 * 10**9), _VALUE)
_PAYLOAD = st.one_of(
    _VALUE,
    st.fixed_dictionaries({}, optional={"model": _VALUE, "stream": _VALUE}).map(json.dumps),
    st.fixed_dictionaries({}, optional={"model": _VALUE, "stream": _VALUE}),
)
_REQUEST = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {},
        optional={
            "timestamp": _TS,
            "request_inputs": st.one_of(_VALUE, st.fixed_dictionaries({"payload": _PAYLOAD})),
            "response_timestamps": st.one_of(_VALUE, st.lists(_TS, max_size=4)),
            "input_tokens": _VALUE, "output_tokens": _VALUE,
        },
    ),
)  # fmt: skip
_EXPERIMENT = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {"requests": st.one_of(st.lists(_REQUEST, min_size=1, max_size=4), _VALUE)},
        optional={"experiment": st.fixed_dictionaries({"mode": _VALUE, "value": _VALUE})},
    ),
)


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    experiments=st.lists(_EXPERIMENT, min_size=1, max_size=3),
    service_kind=_VALUE,
)
def test_arbitrary_exports_are_accounted_for(
    experiments: list[object], service_kind: object
) -> None:
    """
    Any export-shaped JSON: no crash, and every request is stored or rejected with a reason.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.json"
        path.write_text(json.dumps({"service_kind": service_kind, "experiments": experiments}))
        with Store.open(Path(tmp) / "t.duckdb") as store:
            report = ingest_paths(store, [path], format="genai-perf")
            assert report.ok, report.errors
            totals = report.totals()
            stored = store.fetchone("SELECT count(*) FROM calls")
            unexplained = store.fetchone(
                "SELECT count(*) FROM rejects WHERE reason IS NULL OR detail IS NULL"
            )
    assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
    assert (totals["stored"],) == stored
    assert (0,) == unexplained
