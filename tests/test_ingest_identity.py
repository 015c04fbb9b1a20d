"""
What a duplicate is: scoped ids, ids derived from content, options, repeated rejects, names.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailkit.cli._render import file_line
from tailkit.ingest import ScanOptions, ingest_paths
from tailkit.ingest._identity import options_json
from tailkit.ingest.lowlevel import expand_paths
from tailkit.store import Store

from .conftest import CORPUS


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(call_id: str | None, model: str = "gpt-4o", total_s: float = 1.5) -> dict[str, Any]:
    row: dict[str, Any] = {"provider": "openai", "model": model, "total_s": total_s}
    if call_id is not None:
        row["call_id"] = call_id
    return row


def test_the_same_ids_in_two_models_are_two_sets_of_calls(store: Store, tmp_path: Path) -> None:
    """
    Ids repeated under another model (per-model folders numbering from 0) are all stored.
    """
    a = _write(tmp_path / "a.jsonl", [_row(f"simple_{i}", "model-a") for i in range(3)])
    b = _write(tmp_path / "b.jsonl", [_row(f"simple_{i}", "model-b") for i in range(3)])

    report = ingest_paths(store, [a, b])

    assert (6, 6) == (report.totals()["rows_in"], report.totals()["stored"])


def test_a_stored_id_with_other_values_is_a_conflict(store: Store, tmp_path: Path) -> None:
    """
    An id already stored for the same route but with other values is rejected, naming that row.
    """
    first = _write(tmp_path / "first.jsonl", [_row("c1"), _row("c2")])
    second = _write(tmp_path / "second.jsonl", [_row("c1"), _row("c2", total_s=9.0), _row("c3")])
    ingest_paths(store, [first])

    report = ingest_paths(store, [second])

    f = report.files[0]
    assert (3, 1, 1, 1) == (f.rows_in, f.stored, f.rejected, f.duplicates)
    assert {"call_id_conflict": 1} == f.reasons
    row, detail = store.fetchall("SELECT source_row, detail FROM rejects")[0]
    assert 2 == row
    assert (
        f'call_id "c2" of openai/gpt-4o already stored from {first} row 2 with other values: '
        "total_s 1.5 there, 9.0 here"
    ) == detail
    assert [("c1", 1.5), ("c2", 1.5), ("c3", 1.5)] == store.fetchall(
        "SELECT call_id, total_s FROM calls ORDER BY 1"
    )


def test_the_same_calls_from_another_file_are_duplicates(store: Store, tmp_path: Path) -> None:
    """
    Equal values under the same scoped id, from a file of another name, are duplicates.
    """
    rows = [_row("c1"), _row("c2", total_s=2.0)]
    ingest_paths(store, [_write(tmp_path / "a.jsonl", rows)])

    report = ingest_paths(store, [_write(tmp_path / "copy.jsonl", [*rows, _row("c3")])])

    assert (1, 0, 2) == (
        report.files[0].stored,
        report.files[0].rejected,
        report.totals()["duplicates"],
    )


def test_appended_rows_are_the_only_new_calls(store: Store, tmp_path: Path) -> None:
    """
    Without ids, re-ingesting a file after appending rows stores only the appended rows.
    """
    path = tmp_path / "log.jsonl"
    rows = [_row(None, total_s=1.0 + i) for i in range(4)]
    _write(path, rows)
    ingest_paths(store, [path])
    _write(path, [*rows, _row(None, total_s=7.0), _row(None, total_s=1.0)])

    report = ingest_paths(store, [path])

    f = report.files[0]
    assert (6, 2, 0, 4) == (f.rows_in, f.stored, f.rejected, f.duplicates)
    assert 6 == store.counts()["calls"]


def test_a_gzipped_copy_stores_nothing(store: Store, tmp_path: Path) -> None:
    """
    The same rows without ids, gzipped beside the file (`gzip -k`), derive the same ids.
    """
    plain = _write(tmp_path / "log.jsonl", [_row(None, total_s=1.0 + i) for i in range(3)])
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    ingest_paths(store, [plain])

    report = ingest_paths(store, [packed])

    assert (3, 0, 3) == (
        report.files[0].rows_in,
        report.files[0].stored,
        report.files[0].duplicates,
    )


def test_identical_rows_in_one_file_stay_two_calls(store: Store, tmp_path: Path) -> None:
    """
    Two identical rows without ids are two calls, with two different derived ids.
    """
    path = _write(tmp_path / "log.jsonl", [_row(None), _row(None), _row(None, total_s=2.0)])

    report = ingest_paths(store, [path])

    assert 3 == report.totals()["stored"]
    ids = [r[0] for r in store.fetchall("SELECT call_id FROM calls ORDER BY source_row")]
    assert 3 == len(set(ids))
    assert ids[1] == ids[0] + "-2"


def test_each_route_of_a_wide_csv_loads(store: Store, tmp_path: Path) -> None:
    """
    One file loaded route by route with a different --map each time stores every route.
    """
    path = tmp_path / "wide.csv"
    path.write_text("A total,B total\n1.5,2.5\n1.5,3.5\n")
    sets = {"provider": "lab", "model": "m"}

    a = ingest_paths(store, [path], options=ScanOptions({"total_s": "A total"}, sets))
    b = ingest_paths(store, [path], options=ScanOptions({"total_s": "B total"}, sets))

    assert (2, 2) == (a.totals()["stored"], b.totals()["stored"])
    assert b.files[0].already_ingested is None


def test_options_identity_covers_every_field() -> None:
    """
    Every option counts, including ones options_json does not know; defaults are left out.
    """

    @dataclasses.dataclass(frozen=True, slots=True)
    class MoreOptions(ScanOptions):
        status_map: Mapping[str, str] = dataclasses.field(default_factory=dict)
        overrides: frozenset[str] = frozenset()

    plain = MoreOptions()
    more = MoreOptions(status_map={"yes": "ok", "no": "error"}, overrides=frozenset({"b", "a"}))

    assert options_json("csv", ScanOptions()) == options_json("csv", plain)
    assert json.loads(options_json("csv", more)) == {
        "format": "csv", "map": {}, "set": {}, "unit": None,
        "status_map": {"no": "error", "yes": "ok"}, "overrides": ["a", "b"],
    }  # fmt: skip


def test_a_file_skipped_as_already_ingested_says_why(store: Store) -> None:
    """
    The text line of a skipped re-ingest names the earlier ingest and the reason.
    """
    first = ingest_paths(store, [CORPUS / "malformed_lines.jsonl"])
    again = ingest_paths(store, [CORPUS / "malformed_lines.jsonl"])

    line = file_line(again.files[0])
    assert line.endswith(
        f"5 rows, 0 stored, 2 rejected, 3 duplicates; already ingested as "
        f"#{first.files[0].ingest_id} with the same options, nothing stored (other "
        "--map/--set/--unit options load it again)"
    )


def test_rejects_are_not_stored_twice_under_other_options(store: Store) -> None:
    """
    The same bad rows read with other options are rejected again but stored in rejects once.
    """
    first = ingest_paths(store, [CORPUS / "bad_rows.jsonl"])
    again = ingest_paths(store, [CORPUS / "bad_rows.jsonl"], options=ScanOptions(unit="s"))

    assert first.totals() == again.totals() | {"stored": 3, "duplicates": 0}
    assert (11, 3) == (again.files[0].already_rejected, again.totals()["duplicates"])
    assert 11 == store.counts()["rejects"]
    assert first.reasons() == again.reasons()


def test_a_file_name_with_glob_characters_is_read_literally(store: Store, tmp_path: Path) -> None:
    """
    `x*.jsonl` reads that file only, not also `xy.jsonl`; `q[1].jsonl` is not `q1.jsonl`.
    """
    star = _write(tmp_path / "x*.jsonl", [_row("s1")])
    _write(tmp_path / "xy.jsonl", [_row("y1"), _row("y2")])
    bracket = _write(tmp_path / "q[1]?.jsonl", [_row("b1")])
    _write(tmp_path / "q1a.jsonl", [_row("q1")])

    assert ([star], []) == expand_paths([star])
    report = ingest_paths(store, [star, bracket])

    assert report.ok
    assert [("b1", str(bracket), 1), ("s1", str(star), 1)] == store.fetchall(
        "SELECT call_id, source_file, source_row FROM calls ORDER BY 1"
    )


def test_provider_inferences_are_counted(store: Store, tmp_path: Path) -> None:
    """
    Stored rows marked `provider_inferred` in attrs are counted per file and in the totals.
    """
    rows = [_row("c1") | {"provider_inferred": True}, _row("c2") | {"provider_inferred": False}]
    report = ingest_paths(store, [_write(tmp_path / "log.jsonl", rows)])

    assert 1 == report.files[0].inferred_provider == report.totals()["inferred_provider"]
    assert "1 with provider inferred from the model name" in file_line(report.files[0])


def test_nothing_stored_all_rejected(store: Store, tmp_path: Path) -> None:
    """
    The report tells a command whose every row was rejected from one that stored something.
    """
    bad = _write(tmp_path / "bad.jsonl", [_row("c1", total_s=-1.0)])
    good = _write(tmp_path / "good.jsonl", [_row("c2")])

    assert ingest_paths(store, [bad]).nothing_stored_all_rejected
    assert not ingest_paths(store, [good]).nothing_stored_all_rejected


def test_formats_that_open_the_file_themselves_read_glob_named_files(
    store: Store, tmp_path: Path
) -> None:
    """
    A `*` or `[` in a name reads the same calls in formats that also open the file themselves.
    """
    plain = [CORPUS / "langfuse" / "observations.jsonl", CORPUS / "otel" / "genai.jsonl"]
    llmperf = Path("data_samples/llmperf-leaderboard/raw_data")
    individual = sorted((llmperf / "individual").iterdir())[0]
    (tmp_path / "individual").mkdir()
    (tmp_path / "summary").mkdir()
    odd = [tmp_path / f"lf*[1]{plain[0].suffix}", tmp_path / f"ot?[{plain[1].suffix}"]
    odd.append(tmp_path / "individual" / ("[x]*" + individual.name))
    (tmp_path / "summary" / odd[2].name).write_bytes(
        (llmperf / "summary" / individual.name).read_bytes()
    )
    for source, target in zip([*plain, individual], odd, strict=True):
        target.write_bytes(source.read_bytes())
    for source, target in zip([*plain, individual], odd, strict=True):
        with (
            Store.open(tmp_path / "plain.duckdb") as one,
            Store.open(tmp_path / "odd.duckdb") as two,
        ):
            expected = ingest_paths(one, [source])
            got = ingest_paths(two, [target])
            assert got.ok, got.errors
            assert expected.files[0].format == got.files[0].format
            assert expected.totals() == got.totals()
            assert one.fetchall("SELECT DISTINCT model FROM calls ORDER BY 1") == two.fetchall(
                "SELECT DISTINCT model FROM calls ORDER BY 1"
            )


def test_an_option_that_changes_no_value_derives_the_same_ids(store: Store, tmp_path: Path) -> None:
    """
    Calls without ids read again with a no-op `--unit s`, or from a CSV copy, are duplicates.
    """
    when = "2026-01-0{}T00:00:00Z"
    rows = [
        {
            "provider": "openai",
            "model": "gpt-4o",
            "total_s": 1.0 + i,
            "started_at": when.format(i + 1),
        }
        for i in range(4)
    ]
    log = _write(tmp_path / "log.jsonl", rows)
    copy = tmp_path / "copy.csv"
    copy.write_text(
        "provider,model,total_s,started_at\n"
        + "".join(f"openai,gpt-4o,{1.0 + i},{when.format(i + 1)}\n" for i in range(4))
    )

    first = ingest_paths(store, [log])
    again = ingest_paths(store, [log], options=ScanOptions(unit="s"))
    csv = ingest_paths(store, [copy])

    assert 4 == first.totals()["stored"]
    assert (0, 4) == (again.totals()["stored"], again.totals()["duplicates"])
    assert (0, 4) == (csv.totals()["stored"], csv.totals()["duplicates"])


def test_rows_without_a_time_in_two_files_are_not_taken_for_the_same_calls(
    store: Store, tmp_path: Path
) -> None:
    """
    Two runs logging the same rounded latencies and no time keep all their calls.
    """
    rows = [_row(None, total_s=1.5), _row(None, total_s=2.0)]
    (tmp_path / "run1").mkdir()
    (tmp_path / "run2").mkdir()
    one = _write(tmp_path / "run1" / "results.jsonl", rows)
    two = _write(tmp_path / "run2" / "results.jsonl", [*rows, _row(None, total_s=3.0)])
    gz = tmp_path / "run1" / "results.jsonl.gz"
    gz.write_bytes(gzip.compress(one.read_bytes()))

    report = ingest_paths(store, [one, two, gz])

    assert [2, 3, 0] == [f.stored for f in report.files]
    assert 2 == report.files[2].duplicates  # the gzipped copy beside the file is the same source
