"""
Tests of `tailkit.races`: two hand-written logs with a known clock skew and known races.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import ConfigError
from tailkit.executor import AttemptRecord
from tailkit.ingest import ScanOptions
from tailkit.races import RaceReport, find_races


SKEW_S = 0.5  # the tool's clock is ahead of the harness's by this much
OUT_S = 0.06  # the answer's way back; the request's way in is at least 0.1 s
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
runner = CliRunner()


def _at(seconds: float, *, tool: bool = False) -> datetime:
    return T0 + timedelta(seconds=seconds + (SKEW_S if tool else 0.0))


@dataclass(frozen=True)
class Call:
    """
    One call on the harness's clock: sent, received by the tool, ended at the tool.
    """

    key: str
    send: float
    recv: float
    tool_s: float
    run_id: str = "r1"
    step: str = "draft"
    attempt: int = 0
    harness_status: str = "ok"
    tool_status: str = "ok"
    gave_up: float | None = None
    harness_deadline: float | None = None
    tool_deadline: float | None = None
    harness_id: str = ""
    tool_id: str = ""
    tool_attrs: tuple[tuple[str, object], ...] = ()


CALLS = (
    Call("k1", 0.0, 0.1, 1.0, tool_attrs=(("remaining_s_at_receive", 8.0),)),
    Call("k2", 2.0, 2.3, 2.0, step="search", tool_deadline=10.0),
    # The harness gives up on a payment at 8.0 s; the tool succeeds at 8.7 s. A re-plan follows.
    Call("k3", 5.0, 5.2, 3.5, step="pay", harness_status="timeout", gave_up=8.0,
         harness_deadline=8.0, tool_deadline=8.0),
    Call("k4", 8.1, 8.2, 1.0, step="pay", harness_deadline=16.1, tool_deadline=16.1),
    # A retry under the same key: the tool runs the call twice, the first one for nobody.
    Call("k5", 10.0, 10.1, 1.5, run_id="r2", harness_status="timeout", gave_up=11.0),
    Call("k5", 11.0, 11.1, 0.5, run_id="r2", attempt=1),
    # A rate-limited first try is not an execution.
    Call("k6", 12.0, 12.1, 0.01, run_id="r2", step="search", harness_status="rate_limited",
         tool_status="rate_limited"),
    Call("k6", 12.5, 12.6, 0.5, run_id="r2", step="search", attempt=1),
    # No key on either side: paired by call id, then by time alone.
    Call("", 50.0, 50.1, 0.2, run_id="r3", harness_id="shared-1", tool_id="shared-1"),
    Call("", 20.0, 20.2, 0.5, run_id="r3", harness_id="h-w", tool_id="t-w"),
)  # fmt: skip


def _harness(call: Call, n: int) -> AttemptRecord:
    end = call.gave_up if call.gave_up is not None else call.recv + call.tool_s + OUT_S
    cut = call.harness_status in ("timeout", "cancelled")
    return AttemptRecord(
        call_id=call.harness_id or f"h{n}",
        run_id=call.run_id,
        step=call.step,
        attempt=call.attempt,
        role="primary" if call.attempt == 0 else "retry",
        provider="p",
        model="m",
        started_at=_at(call.send),
        total_s=None if cut else end - call.send,
        censored_at_s=end - call.send if cut else None,
        status=call.harness_status,
        idempotency_key=call.key,
        deadline_at=None if call.harness_deadline is None else _at(call.harness_deadline),
    )


def _tool(call: Call, n: int) -> AttemptRecord:
    deadline = call.tool_deadline
    return AttemptRecord(
        call_id=call.tool_id or f"t{n}",
        run_id=None,
        step=None,
        attempt=call.attempt,
        role="primary" if call.attempt == 0 else "retry",
        provider="serve",
        model="m",
        started_at=_at(call.recv, tool=True),
        total_s=call.tool_s,
        status=call.tool_status,
        idempotency_key=call.key,
        deadline_at=None if deadline is None else _at(deadline, tool=True),
        attrs=dict(call.tool_attrs),
    )


def _write(path: Path, records: list[AttemptRecord]) -> Path:
    path.write_text("".join(r.to_json() + "\n" for r in records))
    return path


@pytest.fixture
def logs(tmp_path: Path) -> tuple[Path, Path]:
    harness = [_harness(c, n) for n, c in enumerate(CALLS)]
    harness.append(
        _harness(
            Call("k-lost", 30.0, 0.0, 0.0, run_id="r9", harness_status="error", gave_up=30.5), 99
        )
    )
    tool = [_tool(c, n) for n, c in enumerate(CALLS)]
    tool.append(_tool(Call("k-orphan", 0.0, 40.0, 0.3), 99))
    return _write(tmp_path / "ledger.jsonl", harness), _write(tmp_path / "access.jsonl", tool)


@pytest.fixture
def report(logs: tuple[Path, Path]) -> RaceReport:
    return find_races(*logs, side_effecting=["pay"])


def test_known_skew_is_recovered_within_its_bounds(report: RaceReport) -> None:
    """
    The NTP-style estimate brackets the true skew and is off by half the path asymmetry.
    """
    skew = report.skew
    assert skew is not None
    assert skew.low_s <= SKEW_S <= skew.high_s
    assert skew.skew_s == pytest.approx(SKEW_S + (0.1 - OUT_S) / 2)
    assert (skew.low_s, skew.high_s) == pytest.approx((SKEW_S - OUT_S, SKEW_S + 0.1))
    assert (skew.pairs, skew.how) == (6, "estimated from 6 pairs matched by id")


def test_counts_and_how_pairs_were_matched(report: RaceReport) -> None:
    """
    Keys pair first, then call ids, then time; the lost call and the orphan stay unpaired.
    """
    assert (report.caller_attempts, report.callee_records) == (11, 11)
    assert report.matched_by == {"idempotency_key": 8, "call_id": 1, "time_window": 1}
    assert (report.paired, report.unmatched_caller, report.unmatched_callee) == (10, 1, 1)


def test_abandoned_successes_are_listed_with_the_side_effecting_ones(report: RaceReport) -> None:
    """
    Exactly the two successes after a timeout, latest first, the payment flagged.
    """
    error = (0.1 - OUT_S) / 2  # the skew estimate's error moves every lateness by it
    got = [(a.key, a.step, a.caller_status, a.side_effecting) for a in report.abandoned]

    assert got == [("k3", "pay", "timeout", True), ("k5", "draft", "timeout", False)]
    assert [a.late_s for a in report.abandoned] == pytest.approx([0.7 - error, 0.6 - error])
    assert report.findings()[0] == "2 calls finished after the harness gave up (1 side-effecting)"


def test_abandoned_lateness_counts_from_the_deadline_and_is_never_negative(
    tmp_path: Path,
) -> None:
    """
    A cut logged after its deadline gave up at the deadline; an answer before it is not late.
    """
    error = (0.1 - OUT_S) / 2
    calls = [
        Call("a1", 0.0, 0.1, 1.0),
        Call("a2", 2.0, 2.1, 1.0),
        # The tool ends at 8.1 s, after the harness's 8.0 s deadline; the harness's busy loop
        # logged the cut at 8.3 s. It gave up at 8.0 s: 0.1 s late, not 0.2 s early.
        Call("d1", 4.0, 4.1, 4.0, harness_status="timeout", harness_deadline=8.0, gave_up=8.3),
        # The tool answers at 13.8 s, before the 14.0 s deadline; the harness timed out all
        # the same (its loop did not read the answer in time). It did not end after the
        # harness gave up, so it is not listed (it was, with a negative lateness).
        Call("d2", 10.0, 10.1, 3.7, harness_status="timeout", harness_deadline=14.0,
             gave_up=14.05),
        # No deadline: the harness gave up when it stopped waiting.
        Call("d3", 20.0, 20.1, 1.0, harness_status="cancelled", gave_up=20.5),
        # An answer the harness took, though just after its deadline: it never gave up.
        Call("d4", 29.0, 29.1, 0.95, harness_deadline=30.0),
    ]  # fmt: skip
    harness = _write(tmp_path / "h.jsonl", [_harness(c, n) for n, c in enumerate(calls)])
    tool = _write(tmp_path / "t.jsonl", [_tool(c, n) for n, c in enumerate(calls)])

    report = find_races(harness, tool)

    assert [a.key for a in report.abandoned] == ["d3", "d1"]
    late = [a.late_s for a in report.abandoned]
    assert late == pytest.approx([(21.1 - 20.5) - error, (8.1 - 8.0) - error])
    assert all(s is not None and s > 0 for s in late)


def test_idempotent_false_in_attrs_marks_a_call_side_effecting(logs: tuple[Path, Path]) -> None:
    """
    Without --side-effecting, only a record saying ``idempotent: false`` is flagged.
    """
    harness, tool = logs
    lines = tool.read_text().splitlines()
    lines[4] = lines[4].replace('"attrs":{}', '"attrs":{"idempotent":false}')
    tool.write_text("\n".join(lines) + "\n")

    flags = [(a.key, a.side_effecting) for a in find_races(harness, tool).abandoned]

    assert flags == [("k3", False), ("k5", True)]


def test_duplicates_and_replans_are_counted_exactly(report: RaceReport) -> None:
    """
    k5 ran twice (k6's rate-limited try does not count); step pay got a second key.
    """
    assert [(d.key, d.executions, d.step) for d in report.duplicates] == [("k5", 2, "draft")]
    assert [(r.run_id, r.step, r.keys, r.executed) for r in report.replans] == [("r1", "pay", 2, 2)]


def test_deadline_honoured_share(report: RaceReport) -> None:
    """
    Of three tool records with a deadline, the one that ran past it did not honour it.
    """
    assert (report.deadline_carried, report.deadline_honoured) == (3, 2)
    assert report.deadline_honoured_share == pytest.approx(2 / 3)


def test_t_zero_gap_and_budgets(report: RaceReport) -> None:
    """
    The gap is the skew-corrected way in; the budgets are the caller's and the tool's own.
    """
    error = (0.1 - OUT_S) / 2
    gap = report.t_zero_gap
    assert gap.n == 10
    assert (gap.p50, gap.max) == pytest.approx((0.1 - error, 0.3 - error))
    assert report.budget_share.n == 2
    assert report.budget_share.max == pytest.approx((0.2 - error) / 3.0)
    assert report.budget_real.n == 2
    assert report.budget_real.p50 == pytest.approx(((8.0 - 5.2) + (16.1 - 8.2)) / 2 + error)
    believed = report.budget_believed
    assert believed.n == 4
    assert believed.max == pytest.approx(8.0)  # k1's remaining_s_at_receive: no deadline_at
    assert believed.p50 == pytest.approx(((10.0 - 2.3) + (16.1 - 8.2)) / 2)


def test_time_window_only_is_reported_as_such(tmp_path: Path) -> None:
    """
    Logs without keys or shared ids pair by time, and the skew says so.
    """
    calls = [Call("", 3.0 * n, 3.0 * n + 0.1, 1.0, harness_id=f"h{n}") for n in range(4)]
    harness = _write(tmp_path / "h.jsonl", [_harness(c, n) for n, c in enumerate(calls)])
    tool = _write(tmp_path / "t.jsonl", [_tool(c, n) for n, c in enumerate(calls)])

    report = find_races(harness, tool, window_s=1.0)

    assert report.matched_by == {"idempotency_key": 0, "call_id": 0, "time_window": 4}
    assert report.skew is not None
    assert report.skew.how == "estimated from 4 pairs matched by time window"
    assert "(4 by time window only)" in report.findings()[-1]


def test_window_too_short_leaves_calls_unpaired(tmp_path: Path) -> None:
    """
    A receive later than the window after the send is not paired.
    """
    calls = [Call("", 0.0, 0.1, 1.0, harness_id="h0")]
    harness = _write(tmp_path / "h.jsonl", [_harness(c, 0) for c in calls])
    tool = _write(tmp_path / "t.jsonl", [_tool(c, 0) for c in calls])

    report = find_races(harness, tool, window_s=0.2)

    assert (report.paired, report.unmatched_caller, report.unmatched_callee) == (0, 1, 1)
    assert report.skew is None


def test_mapped_columns_are_read_through_the_options(tmp_path: Path) -> None:
    """
    A tool log with its own column names pairs once --map names them.
    """
    harness = _write(tmp_path / "h.jsonl", [_harness(CALLS[0], 0)])
    row = {"id": "x1", "model": "m", "provider": "p", "ts": _at(0.1, tool=True).isoformat(),
           "latency": 1.0, "status": "ok"}  # fmt: skip
    tool = tmp_path / "t.jsonl"
    tool.write_text(json.dumps(row) + "\n")

    options = ScanOptions(mapping={"call_id": "id", "started_at": "ts", "total_s": "latency"})
    report = find_races(harness, tool, callee_options=options)

    assert report.matched_by["time_window"] == 1


def test_bad_window_is_refused(logs: tuple[Path, Path]) -> None:
    """
    A window that is not a positive number names the value.
    """
    with pytest.raises(ConfigError, match="window_s must be a positive number of seconds, got 0"):
        find_races(*logs, window_s=0)


def test_cli_json(logs: tuple[Path, Path]) -> None:
    """
    ``--json`` prints the report's dict, findings included.
    """
    harness, tool = logs
    result = runner.invoke(
        app, ["races", str(harness), str(tool), "--side-effecting", "pay", "--json"]
    )

    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["matched_by"] == {"idempotency_key": 8, "call_id": 1, "time_window": 1}
    assert [a["key"] for a in data["abandoned"]] == ["k3", "k5"]
    assert data["findings"][0] == "2 calls finished after the harness gave up (1 side-effecting)"
    assert data["skew"]["how"] == "estimated from 6 pairs matched by id"


def test_cli_table_starts_with_the_findings(logs: tuple[Path, Path]) -> None:
    """
    The table output opens with the plain-language findings.
    """
    result = runner.invoke(app, ["races", *map(str, logs), "--side-effecting", "pay"])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:3] == [
        "2 calls finished after the harness gave up (1 side-effecting)",
        "1 calls executed more than once (1 extra runs)",
        "1 steps re-planned with a new call",
    ]


def test_cli_missing_file_is_an_error(tmp_path: Path) -> None:
    """
    A missing log is ``Error: …`` and exit 1, not a traceback.
    """
    result = runner.invoke(app, ["races", str(tmp_path / "no.jsonl"), str(tmp_path / "no2.jsonl")])

    assert result.exit_code == 1
    assert result.output.startswith("Error: ")


def test_cli_unit_advice_names_the_side_and_its_option(tmp_path: Path) -> None:
    """
    A tool log in milliseconds: the error names --tool-unit, which then reads it.
    """
    harness = _write(tmp_path / "h.jsonl", [_harness(CALLS[0], 0)])
    row = {"call_id": "x1", "model": "m", "provider": "p", "status": "ok",
           "started_at": _at(0.1, tool=True).isoformat(), "total_s": 1500}  # fmt: skip
    tool = tmp_path / "t.jsonl"
    tool.write_text(json.dumps(row) + "\n")

    refused = runner.invoke(app, ["races", str(harness), str(tool)])
    read = runner.invoke(app, ["races", str(harness), str(tool), "--tool-unit", "ms", "--json"])

    assert 1 == refused.exit_code
    assert "pass --tool-unit ms, or --tool-unit s if they really are seconds" in refused.output
    assert 0 == read.exit_code, read.output
    assert 1 == json.loads(read.output)["matched_by"]["time_window"]
