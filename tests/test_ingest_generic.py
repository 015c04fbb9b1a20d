"""
Generic files: column mapping, constants, units, timestamps, and every tabular format.
"""

from __future__ import annotations

import json

from pathlib import Path

import duckdb
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.errors import IngestError, MappingError, UnitError
from tailkit.ingest import ScanOptions, ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


_ROWS = [
    {"call_id": "c1", "provider": "openai", "model": "gpt-4o", "total_s": 1.25, "ttft_s": 0.5,
     "input_tokens": 900, "output_tokens": 120, "started_at": "2026-10-01T00:00:00Z",
     "team": "search"},
    {"call_id": "c2", "provider": "azure", "model": "gpt-4o", "total_s": 7.5, "ttft_s": None,
     "input_tokens": 20000, "output_tokens": 800, "started_at": "2026-10-01T00:00:01Z",
     "team": "ads"},
]  # fmt: skip


def _write(tmp_path: Path, fmt: str, rows: list[dict[str, object]]) -> Path:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if fmt == "jsonl":
        return jsonl
    if fmt == "json":
        out = tmp_path / "rows.json"
        out.write_text(json.dumps(rows))
        return out
    out = tmp_path / f"rows.{fmt}"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM read_json('{jsonl}')) TO '{out}' (FORMAT {fmt})")
    con.close()
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_every_tabular_format_stores_the_same_calls(store: Store, tmp_path: Path, fmt: str) -> None:
    """
    JSONL, JSON arrays, CSV and Parquet with call-record names give identical rows.
    """
    report = ingest_paths(store, [_write(tmp_path, fmt, _ROWS)])

    assert report.ok
    assert fmt == report.files[0].format
    rows = store.fetchall(
        "SELECT call_id, provider, total_s, ttft_s, input_tokens, output_tokens, "
        "epoch(started_at), source_row, attrs->>'team' FROM calls ORDER BY call_id"
    )
    assert [
        ("c1", "openai", 1.25, 0.5, 900, 120, 1790812800.0, 1, "search"),
        ("c2", "azure", 7.5, None, 20000, 800, 1790812801.0, 2, "ads"),
    ] == rows


def test_map_set_and_unit_ms(store: Store) -> None:
    """
    --map renames source columns, --set fills missing ones, --unit ms converts durations.
    """
    options = ScanOptions(
        mapping={"call_id": "id", "total_s": "latency_ms", "input_tokens": "prompt_tokens",
                 "output_tokens": "completion_tokens", "started_at": "ts"},
        sets={"provider": "openai", "model": "gpt-4o"},
        unit="ms",
    )  # fmt: skip
    report = ingest_paths(store, [CORPUS / "latency_ms.csv"], options=options)

    assert report.ok
    rows = store.fetchall(
        "SELECT call_id, provider, model, total_s, input_tokens FROM calls ORDER BY 1"
    )
    assert [
        ("x1", "openai", "gpt-4o", 1.5, 900),
        ("x2", "openai", "gpt-4o", 2.5, 1800),
        ("x3", "openai", "gpt-4o", 12.0, 20000),
    ] == rows


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_prompt_id_maps_to_job_key(store: Store, tmp_path: Path, fmt: str) -> None:
    """
    --map job_key=prompt_id pairs the same prompt across routes; a job_key column needs no map.
    """
    rows = [dict(r, prompt_id=f"p{i}") for i, r in enumerate(_ROWS)]
    ingest_paths(
        store, [_write(tmp_path, fmt, rows)], options=ScanOptions(mapping={"job_key": "prompt_id"})
    )
    (tmp_path / "named").mkdir()
    ingest_paths(
        store, [_write(tmp_path / "named", fmt, [dict(_ROWS[0], call_id="c9", job_key="j")])]
    )

    keys = store.fetchall("SELECT call_id, job_key FROM calls ORDER BY 1")

    assert [("c1", "p0"), ("c2", "p1"), ("c9", "j")] == keys


def test_millisecond_values_without_unit_are_refused(store: Store) -> None:
    """
    Durations that look like milliseconds need --unit; nothing is stored meanwhile.
    """
    options = ScanOptions(
        mapping={"total_s": "latency_ms"}, sets={"provider": "openai", "model": "gpt-4o"}
    )
    report = ingest_paths(store, [CORPUS / "latency_ms.csv"], options=options)

    assert isinstance(report.errors[0], UnitError)
    assert str(report.errors[0]).endswith(
        "total_s values look like milliseconds (median 2,500); "
        "pass unit ms, or unit s if they really are seconds"
    )
    assert 0 == store.counts()["calls"]


def test_unknown_mapping_names_the_column_and_the_choices(store: Store) -> None:
    """
    A --map source that does not exist is named with the file's columns.
    """
    options = ScanOptions(mapping={"total_s": "latency"}, sets={"provider": "p", "model": "m"})
    report = ingest_paths(store, [CORPUS / "latency_ms.csv"], options=options)

    assert isinstance(report.errors[0], MappingError)
    assert "mapping total_s=latency: no column 'latency' (did you mean 'latency_ms'?)" in str(
        report.errors[0]
    )


def test_unknown_target_is_refused_before_reading(store: Store) -> None:
    """
    --map to a name that is not a call-record column fails at once, with a suggestion.
    """
    with pytest.raises(MappingError, match=r"'totl_s' is not a call-record column \(did you"):
        ingest_paths(
            store, [CORPUS / "latency_ms.csv"], options=ScanOptions(mapping={"totl_s": "x"})
        )


def test_missing_required_column_says_how_to_fill_it(store: Store) -> None:
    """
    A file without a model column names --map and --set.
    """
    report = ingest_paths(store, [CORPUS / "latency_ms.csv"])

    assert "no column for 'model'" in str(report.errors[0])
    assert "sets model=NAME" in str(report.errors[0])


@pytest.mark.parametrize(
    "value",
    ["2026-10-01T00:00:00Z", "2026-10-01T02:00:00+02:00", 1790812800, 1790812800000,
     1790812800000000, 1790812800000000000],
)  # fmt: skip
def test_timestamps_iso_and_epoch_units(store: Store, tmp_path: Path, value: object) -> None:
    """
    ISO-8601 with any offset and epoch seconds/ms/µs/ns all give the same UTC instant.
    """
    row = {"provider": "p", "model": "m", "total_s": 1.0, "started_at": value}
    ingest_paths(store, [_write(tmp_path, "jsonl", [row])])

    assert (1790812800.0,) == store.fetchone("SELECT epoch(started_at) FROM calls")


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=12)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    names=st.lists(_NAMES, min_size=4, max_size=4, unique=True),
    fmt=st.sampled_from(["jsonl", "csv", "parquet"]),
)
def test_any_column_names_map_to_the_same_calls(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], fmt: str
) -> None:
    """
    Renaming source columns and mapping them back with --map stores the same values.
    """
    targets = ["model", "total_s", "ttft_s", "output_tokens"]
    renamed = [{new: r[old] for old, new in zip(targets, names, strict=True)} for r in _ROWS]
    folder = tmp_path_factory.mktemp("map")
    options = ScanOptions(
        mapping=dict(zip(targets, names, strict=True)), sets={"provider": "openai"}
    )
    with Store.open(folder / "t.duckdb") as store:
        report = ingest_paths(store, [_write(folder, fmt, renamed)], options=options)
        rows = store.fetchall("SELECT model, total_s, ttft_s, output_tokens FROM calls ORDER BY 2")

    assert report.ok
    assert [("gpt-4o", 1.25, 0.5, 120), ("gpt-4o", 7.5, None, 800)] == rows


def test_broken_json_array_is_one_file_error(store: Store, tmp_path: Path) -> None:
    """
    A JSON document that does not parse cannot be split into rows: one error, nothing stored.
    """
    path = tmp_path / "broken.json"
    path.write_text('[{"provider": "p", "model": "m", "total_s": 1.0}, {"provider": ')
    report = ingest_paths(store, [path])

    assert 1 == len(report.errors)
    assert str(report.errors[0]).startswith(f"{path}: not readable as json (")
    assert {"calls": 0, "rejects": 0, "ingests": 0} == store.counts()


def test_globs_and_folders_pick_known_suffixes(store: Store, tmp_path: Path) -> None:
    """
    Globs and folders take .jsonl/.csv/... files only; an empty match is an error.
    """
    _write(tmp_path, "csv", _ROWS)
    (tmp_path / "notes.txt").write_text("not a log")
    report = ingest_paths(store, [str(tmp_path / "*.csv"), tmp_path / "nothing-*.jsonl"])

    assert ["rows.csv"] == [f.path.name for f in report.files]
    assert [f"{tmp_path / 'nothing-*.jsonl'}: pattern matches no files"] == [
        str(e) for e in report.errors
    ]


def test_forced_format_is_reported(store: Store, tmp_path: Path) -> None:
    """
    --format skips detection and says so.
    """
    path = _write(tmp_path, "csv", _ROWS)
    report = ingest_paths(store, [path], format="csv")

    assert ("csv", "format given", 2) == (
        report.files[0].format,
        report.files[0].why,
        report.files[0].stored,
    )


def test_unknown_format_name_is_refused(store: Store) -> None:
    """
    A --format that does not exist fails before any file is read.
    """
    with pytest.raises(IngestError, match=r"format must be auto or one of jsonl, json"):
        ingest_paths(store, [CORPUS], format="xml")


@pytest.mark.parametrize(
    "names", [("reason", "v_total_s"), ("r_model", "attrs"), ("detail", "raw")]
)
def test_source_names_cannot_shadow_working_columns(
    store: Store, tmp_path: Path, names: tuple[str, str]
) -> None:
    """
    Source columns named like the validator's own columns map like any other.
    """
    rows = [{names[0]: "gpt-4o", names[1]: 1.5, "provider": "openai"}]
    options = ScanOptions(mapping={"model": names[0], "total_s": names[1]})
    report = ingest_paths(store, [_write(tmp_path, "jsonl", rows)], options=options)

    assert report.ok, report.errors
    assert [("gpt-4o", 1.5)] == store.fetchall("SELECT model, total_s FROM calls")
