"""
The executor's ledger: exact lines, validation, sinks that fail, counts, concurrent writers.
"""

from __future__ import annotations

import json
import logging
import math
import threading

from datetime import UTC, datetime, timedelta, timezone
from http import HTTPStatus
from pathlib import Path
from types import MappingProxyType

import pytest

from hypothesis import given
from hypothesis import strategies as st

from tailkit.errors import ConfigError
from tailkit.ledger import (
    LEDGER_FIELDS,
    AttemptRecord,
    CallbackSink,
    JsonlSink,
    Ledger,
    MemorySink,
    _iso,
)
from tailkit.record import ROLES, SOURCE_COLUMNS, STATUSES


_T0 = datetime(2026, 11, 29, 12, 0, 3, 123456, tzinfo=UTC)


def _record(**changes: object) -> AttemptRecord:
    values: dict[str, object] = {
        "call_id": "k1-0", "run_id": "run-7", "step": "summarize", "attempt": 0,
        "role": "primary", "provider": "openai", "model": "gpt-4o", "started_at": _T0,
    }  # fmt: skip
    values.update(changes)
    return AttemptRecord(**values)  # type: ignore[arg-type]


class _Named(str):
    """
    A string subclass (an SDK's model-name type, say).
    """

    __slots__ = ()


class _Broken:
    """
    A sink whose every write and close raises.
    """

    def __init__(self) -> None:
        self.calls = 0

    def write(self, line: str, record: AttemptRecord) -> None:
        self.calls += 1
        msg = "disk full"
        raise OSError(msg)

    def close(self) -> None:
        msg = "cannot close"
        raise OSError(msg)

    def __repr__(self) -> str:
        return "Broken()"


def test_golden_line() -> None:
    """
    A fully filled record renders as exactly this line: field order, UTC 'Z', float repr.
    """
    record = _record(
        call_id="k1-1", attempt=1, role="hedge", provider="azure",
        started_at=datetime(2026, 11, 29, 13, 0, 3, 123456, tzinfo=timezone(timedelta(hours=1))),
        ttft_s=0.1 + 0.2, total_s=1.5, input_tokens=1200, output_tokens=300, status="ok",
        http_status=200, idempotency_key="k1", deadline_at=_T0 + timedelta(seconds=30),
        winner=True, attrs={"region": "eastus", "when": _T0},
    )  # fmt: skip

    assert (
        '{"call_id":"k1-1","run_id":"run-7","step":"summarize","attempt":1,"role":"hedge",'
        '"provider":"azure","model":"gpt-4o","started_at":"2026-11-29T12:00:03.123456Z",'
        '"ttft_s":0.30000000000000004,"total_s":1.5,"input_tokens":1200,"output_tokens":300,'
        '"status":"ok","error_type":null,"http_status":200,"censored_at_s":null,'
        '"abandoned":false,"job_key":null,"idempotency_key":"k1","deadline_at":"2026-11-29T12:00:33.123456Z",'
        '"winner":true,"attrs":{"region":"eastus","when":"2026-11-29 12:00:03.123456+00:00"}}'
    ) == record.to_json()


def test_whole_seconds_keep_their_microseconds() -> None:
    """
    An instant on a whole second is still written with six fraction digits.
    """
    line = _record(started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)).to_json()

    assert "2026-01-02T03:04:05.000000Z" == json.loads(line)["started_at"]


def test_round_trip_through_json() -> None:
    """
    json.loads gives back every field, keys in LEDGER_FIELDS order, and no source column.
    """
    record = _record(
        status="cancelled", censored_at_s=2.25, input_tokens=900, attrs={"error": "lost"}
    )
    data = json.loads(record.to_json())

    assert LEDGER_FIELDS == tuple(data)
    assert "source" not in data
    assert {
        "call_id": "k1-0", "run_id": "run-7", "step": "summarize", "attempt": 0,
        "role": "primary", "provider": "openai", "model": "gpt-4o",
        "started_at": "2026-11-29T12:00:03.123456Z", "ttft_s": None, "total_s": None,
        "input_tokens": 900, "output_tokens": None, "status": "cancelled", "error_type": None,
        "http_status": None, "censored_at_s": 2.25, "abandoned": False, "job_key": None,
        "idempotency_key": "", "deadline_at": None, "winner": False, "attrs": {"error": "lost"},
    } == data  # fmt: skip


def test_fields_are_the_call_record_then_the_executors_own() -> None:
    """
    The ledger's keys are the call record's source columns, then the three executor fields.
    """
    expected = (
        *(c.name for c in SOURCE_COLUMNS),
        "idempotency_key",
        "deadline_at",
        "winner",
        "attrs",
    )

    assert expected == LEDGER_FIELDS


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_is_accepted(status: str) -> None:
    """
    Each call-record status is written and counted under its own name.
    """
    sink = MemorySink()
    ledger = Ledger(sink)
    ledger.write(_record(status=status))

    assert status == json.loads(sink.lines[0])["status"]
    assert 1 == ledger.counts()[status]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_is_accepted(role: str) -> None:
    """
    Each call-record role is written as is.
    """
    sink = MemorySink()
    Ledger(sink).write(_record(role=role))

    assert role == json.loads(sink.lines[0])["role"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "done"}, "status must be one of ok, error, timeout, cancelled, invalid, "
                             "rate_limited, got 'done' for call 'k1-0'"),
        ({"role": "backup"}, "role must be one of primary, hedge, retry, downgrade, upgrade, "
                             "got 'backup' for call 'k1-0'"),
        ({"started_at": datetime(2026, 11, 29, 12, 0, 3)},
         "started_at must be a timezone-aware datetime (UTC), got naive 2026-11-29T12:00:03"),
        ({"total_s": float("inf")},
         "total_s must be a finite number of seconds or None, got inf"),
    ],
)  # fmt: skip
def test_bad_values_are_refused(change: dict[str, object], message: str) -> None:
    """
    A bad status, role, naive time or infinite duration is a ConfigError; nothing is written.
    """
    sink = MemorySink()
    ledger = Ledger(sink)

    with pytest.raises(ConfigError) as info:
        ledger.write(_record(**change))
    assert message == str(info.value)
    assert ([], 0) == (sink.lines, ledger.counts()["attempts"])


def test_failing_sink_is_logged_once_and_others_get_every_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """
    A sink that raises is logged once on tailkit.executor; the other sinks miss nothing.
    """
    broken, memory, seen = _Broken(), MemorySink(), []
    ledger = Ledger(broken, memory, CallbackSink(seen.append))
    with caplog.at_level(logging.ERROR, logger="tailkit.executor"):
        for i in range(5):
            ledger.write(_record(call_id=f"c{i}"))
        ledger.close()

    assert 5 == broken.calls
    assert (
        [f"c{i}" for i in range(5)]
        == [r.call_id for r in memory.records]
        == [r.call_id for r in seen]
    )
    assert 5 == ledger.counts()["attempts"]
    assert [("tailkit.executor", "ledger sink Broken() failed to write; the executor goes on, "
             "and later failures of this sink are not logged")] == [
        (r.name, r.getMessage()) for r in caplog.records
    ]  # fmt: skip


_OUTCOMES = st.lists(
    st.tuples(st.sampled_from(STATUSES), st.booleans(), st.booleans()), max_size=40
)


@given(outcomes=_OUTCOMES)
def test_counts_reconcile(outcomes: list[tuple[str, bool, bool]]) -> None:
    """
    The status counts add up to attempts; winners and abandoned count their records.
    """
    ledger = Ledger()
    for i, (status, winner, abandoned) in enumerate(outcomes):
        ledger.write(_record(call_id=f"c{i}", status=status, winner=winner, abandoned=abandoned))
    counts = ledger.counts()

    assert len(outcomes) == counts["attempts"] == sum(counts[s] for s in STATUSES)
    assert sum(w for _, w, _ in outcomes) == counts["winners"]
    assert sum(a for _, _, a in outcomes) == counts["abandoned"]
    assert {s: sum(o[0] == s for o in outcomes) for s in STATUSES} == {
        s: counts[s] for s in STATUSES
    }
    assert ["attempts", *STATUSES, "abandoned", "winners"] == list(counts)


def test_jsonl_sink_appends_and_creates_folders(tmp_path: Path) -> None:
    """
    The file and its folders are created; a second sink on it appends after the first.
    """
    path = tmp_path / "traces" / "2026-11-29" / "ledger.jsonl"
    for call_id in ("a", "b"):
        with Ledger(JsonlSink(path)) as ledger:
            ledger.write(_record(call_id=call_id))

    assert ["a", "b"] == [json.loads(line)["call_id"] for line in path.read_text().splitlines()]
    assert path.read_text().endswith("}\n")


def test_jsonl_sink_lines_are_flushed_as_written(tmp_path: Path) -> None:
    """
    A line is on disk as soon as write returns, before close.
    """
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(JsonlSink(path))
    ledger.write(_record())

    assert _record().to_json() + "\n" == path.read_text()
    ledger.close()


def test_jsonl_sink_that_cannot_open_names_the_path(tmp_path: Path) -> None:
    """
    A ledger path under a file (not a folder) is a ConfigError naming the path.
    """
    (tmp_path / "file").write_text("")
    bad = tmp_path / "file" / "ledger.jsonl"

    with pytest.raises(ConfigError, match=r"ledger file '.*ledger\.jsonl': cannot open it"):
        JsonlSink(bad)


def test_jsonl_sink_from_many_threads_writes_whole_lines(tmp_path: Path) -> None:
    """
    Eight threads, 200 lines each (some longer than the file buffer): 1,600 whole lines.
    """
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(JsonlSink(path))
    start = threading.Barrier(8)

    def work(t: int) -> None:
        start.wait()
        for i in range(200):
            ledger.write(_record(call_id=f"t{t}-{i}", attrs={"pad": "x" * (1500 * t + 37)}))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ledger.close()
    lines = path.read_text().splitlines()

    assert 1600 == len(lines) == ledger.counts()["attempts"]
    assert {f"t{t}-{i}" for t in range(8) for i in range(200)} == {
        json.loads(line)["call_id"] for line in lines
    }


def test_no_sinks_still_validates_and_counts() -> None:
    """
    A ledger without sinks drops lines but keeps its counts.
    """
    ledger = Ledger()
    ledger.write(_record(winner=True))
    ledger.write(_record(status="timeout", censored_at_s=3.0, abandoned=True))

    assert {"attempts": 2, "ok": 1, "timeout": 1, "winners": 1, "abandoned": 1} == {
        k: v for k, v in ledger.counts().items() if v
    }


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"ttft_s": 0.123456789, "total_s": 1.5, "input_tokens": 812, "output_tokens": 0,
         "status": "ok", "winner": True, "attrs": {"started_by": "cutoff", "hedge": True}},
        {"run_id": None, "step": None, "error_type": "APIError", "http_status": 503,
         "status": "error", "censored_at_s": 2, "abandoned": True, "job_key": 'q"\\ü\n',
         "deadline_at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)},
        # values the plain line leaves to the encoder: each must come out the same
        {"http_status": HTTPStatus.TOO_MANY_REQUESTS, "status": "rate_limited"},
        {"input_tokens": math.nan, "output_tokens": 7.0},
        {"abandoned": 0, "winner": 1},
        {"model": _Named("gpt-4o"), "attrs": MappingProxyType({})},
        {"attrs": {"error": ValueError("x")}, "total_s": True},
        {"started_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))},
    ],
)  # fmt: skip
def test_a_line_is_what_the_json_encoder_writes_whatever_the_values(
    changes: dict[str, object],
) -> None:
    """
    `to_json` writes plain records itself (half the time): byte for byte the encoder's line.

    The encoder with the ledger's options, over the fields in `LEDGER_FIELDS` order, is the
    reference; values that are not plain (an ``IntEnum``, a NaN, an int where a bool belongs,
    a string subclass, a mapping that is not a dict) take the encoder's own path.
    """
    record = _record(**changes)
    values = {name: getattr(record, name) for name in LEDGER_FIELDS}
    values["started_at"] = _iso("started_at", record.started_at)
    if record.deadline_at is not None:
        values["deadline_at"] = _iso("deadline_at", record.deadline_at)
    reference = json.JSONEncoder(separators=(",", ":"), default=str).encode(values)
    assert record.to_json() == reference
