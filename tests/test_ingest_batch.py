"""
Many small files read together (one scan per format), and columns read from the path.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any

import pytest

from tailkit.errors import IngestError, MappingError
from tailkit.ingest import IngestReport, _batch, ingest_paths
from tailkit.store import Store

from .conftest import ROOT


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(n: int, model: str, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"call_id": f"c{start + i}", "provider": "openai", "model": model,
         "started_at": f"2026-01-01T00:00:{i % 60:02d}Z", "total_s": 1.0 + i / 10}
        for i in range(n)
    ]  # fmt: skip


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """
    The statements the store runs, in order.
    """
    seen: list[str] = []
    for name in ("execute", "fetchall", "fetchone"):
        original = getattr(Store, name)

        def spy(self: Store, sql: str, params: Any = None, _original: Any = original) -> Any:
            seen.append(sql)
            return _original(self, sql, params)

        monkeypatch.setattr(Store, name, spy)
    return seen


def test_many_files_cost_a_fixed_number_of_statements(tmp_path: Path, counted: list[str]) -> None:
    """
    Forty files take as many statements as ten: one scan over the list, not a round per file.
    """
    first: dict[int, int] = {}
    for n in (10, 40):
        folder = tmp_path / f"run{n}"
        for i in range(n):
            _write(folder / f"part-{i:03d}.jsonl", _rows(5, "gpt-4o", start=1000 * n + 10 * i))
        with Store.open(tmp_path / f"{n}.duckdb") as store:
            counted.clear()
            report = ingest_paths(store, [folder])
            assert report.ok
            assert report.totals()["stored"] == 5 * n
            assert [f.rows_in for f in report.files] == [5] * n
            first[n] = len(counted)
            if n == 40:  # read again: each file was ingested before, still one batch
                before = len(counted)
                again = ingest_paths(store, [folder])
                assert again.totals()["duplicates"] == 5 * n
                assert all(f.already_ingested for f in again.files)
                assert len(counted) - before < 60
    assert first[40] == first[10]
    assert first[10] < 60


def _tree(root: Path) -> list[Path]:
    """
    Files with every case a batch must count as the per-file path does.
    """
    base = _rows(6, "gpt-4o")
    bad = [*_rows(3, "gpt-4o", start=100), {"model": "gpt-4o", "total_s": -1.0}]
    conflict = [{**base[0], "total_s": 9.0}, *_rows(2, "gpt-4o", start=200)]
    repeats = [*_rows(2, "gpt-4o", start=300), _rows(2, "gpt-4o", start=300)[0]]
    no_ids = [{"model": "m", "total_s": 1.0}, {"model": "m", "total_s": 1.0}]
    return [
        _write(root / "a.jsonl", base),
        _write(root / "b.jsonl", base[2:4]),  # duplicates of a
        _write(root / "c.jsonl", bad),  # a bad row
        _write(root / "d.jsonl", conflict),  # an id of a with other values
        _write(root / "e.jsonl", repeats),  # a repeat within the file
        _write(root / "f.jsonl", base),  # a copy of a
        _write(root / "g.jsonl", no_ids),  # derived ids, two equal rows stay two calls
        _write(root / "h.jsonl", [{"model": "m", "total_s": 5000.0}]),  # milliseconds
        _write(root / "i.jsonl", no_ids),  # the same rows as g, another file
    ]


def _outcome(store: Store, report: IngestReport) -> tuple[Any, ...]:
    files = [
        (f.path.name, f.rows_in, f.stored, f.rejected, f.duplicates, f.reasons, f.already_rejected,
         f.already_ingested is not None)
        for f in report.files
    ]  # fmt: skip
    calls = store.fetchall(
        "SELECT call_id, model, total_s, source_file, source_row, attrs::VARCHAR FROM calls "
        "ORDER BY ALL"
    )
    rejects = store.fetchall(
        "SELECT source_file, source_row, reason, detail, raw FROM rejects ORDER BY ALL"
    )
    return files, [str(e) for e in report.errors], calls, rejects


def test_a_batch_counts_every_file_as_reading_them_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Duplicates, conflicts, bad rows, copies, derived ids and a failing file: the same per file.
    """
    files = _tree(tmp_path / "tree")
    outcomes = []
    for together in (True, False):
        if not together:
            monkeypatch.setattr(_batch, "MAX_FILE_BYTES", 0)
        with Store.open(tmp_path / f"{together}.duckdb") as store:
            outcomes.append(_outcome(store, ingest_paths(store, files)))
            # Again: every file was ingested before; the bad rows are rejected again.
            outcomes.append(_outcome(store, ingest_paths(store, files)))
    assert outcomes[0] == outcomes[2]
    assert outcomes[1] == outcomes[3]
    assert outcomes[1][0][0][-1]  # a.jsonl: already ingested
    files_seen, errors, _, rejects = outcomes[0]
    assert [f[0] for f in files_seen] == ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl", "e.jsonl",
                                         "f.jsonl", "g.jsonl", "i.jsonl"]  # fmt: skip
    assert len(errors) == 1
    assert "h.jsonl" in errors[0]
    assert "milliseconds" in errors[0]
    assert {r[2] for r in rejects} == {"total_s_negative", "call_id_conflict"}


def test_a_batch_reads_in_one_scan(store: Store, tmp_path: Path, counted: list[str]) -> None:
    """
    The files of a batch are read by one reader call over the list of files.
    """
    files = [_write(tmp_path / f"{i}.jsonl", _rows(3, "gpt-4o", start=10 * i)) for i in range(5)]
    ingest_paths(store, files)
    reads = sorted({sql for sql in counted if sql.startswith("INSERT INTO calls")})
    assert len(reads) == 1
    assert all(str(f) in reads[0] for f in files)


def test_a_file_the_batch_cannot_read_fails_alone(store: Store, tmp_path: Path) -> None:
    """
    A value the fast reader refuses sends the batch to the per-file path: one reject, no loss.
    """
    files = [_write(tmp_path / f"{i}.jsonl", _rows(3, "gpt-4o", start=10 * i)) for i in range(4)]
    files.append(
        _write(
            tmp_path / "x.jsonl",
            [
                *_rows(2, "gpt-4o", start=90),
                {
                    "model": "gpt-4o",
                    "call_id": "z",
                    "provider": "openai",
                    "started_at": "2026-01-01T00:00:00Z",
                    "total_s": "fast",
                },
            ],
        )
    )
    report = ingest_paths(store, files)
    assert report.totals() == {
        "rows_in": 15, "stored": 14, "rejected": 1, "duplicates": 0, "inferred_provider": 0
    }  # fmt: skip
    assert report.files[-1].reasons == {"total_s_not_a_number": 1}


def test_the_path_template_gives_each_file_its_model(store: Store, tmp_path: Path) -> None:
    """
    One folder per model, the rows without a model: one ingest, each row its folder's model.
    """
    rows = [{"call_id": f"c{i}", "provider": "openai", "total_s": 1.0} for i in range(3)]
    for model in ("gpt-4o", "gpt-4.1"):
        for run in range(3):
            _write(tmp_path / "bench" / model / f"run{run}.jsonl", rows)
    _write(tmp_path / "bench" / "stray.jsonl", rows)
    report = ingest_paths(store, [tmp_path / "bench"], path_template="{model}/run*.jsonl")
    assert store.fetchall("SELECT model, count(*) FROM calls GROUP BY 1 ORDER BY 1") == [
        ("gpt-4.1", 3),
        ("gpt-4o", 3),
    ]
    assert report.totals()["duplicates"] == 12
    assert len(report.errors) == 1
    assert "stray.jsonl" in str(report.errors[0])
    assert report.errors[0].field == "path_template"


def test_the_path_template_gives_the_same_values_alone_and_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The value a file's path gives is the same read alone (Python) and in a batch (DuckDB).
    """
    for provider, size in (("groq", "70b"), ("together", "7b"), ("fire-works", "13b")):
        for run in range(2):
            _write(
                tmp_path / "raw" / f"r{run}" / f"{provider}_{size}.jsonl",
                [{"call_id": "a", "total_s": 1.0}],
            )
    template = "r?/{provider}_{model}.jsonl"
    seen = []
    for together in (True, False):
        if not together:
            monkeypatch.setattr(_batch, "MAX_FILE_BYTES", 0)
        with Store.open(tmp_path / f"{together}.duckdb") as store:
            assert ingest_paths(store, [tmp_path / "raw"], path_template=template).ok
            seen.append(
                store.fetchall("SELECT provider, model, source_file FROM calls ORDER BY ALL")
            )
    assert seen[0] == seen[1]
    assert ("fire-works", "13b") in {(p, m) for p, m, _ in seen[0]}


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{modle}/*.jsonl", "did you mean 'model'"),
        ("runs/*.jsonl", "names no column"),
        ("{model}/{model}.jsonl", "twice"),
        ("{model/*.jsonl", "brace"),
    ],
)
def test_a_bad_template_is_refused_before_reading(
    store: Store, tmp_path: Path, template: str, words: str
) -> None:
    """
    Errors name the parameter and the fix.
    """
    _write(tmp_path / "gpt-4o" / "a.jsonl", [{"total_s": 1.0}])
    with pytest.raises(MappingError, match=words) as caught:
        ingest_paths(store, [tmp_path], path_template=template)
    assert caught.value.field == "path_template"


def test_a_template_column_the_file_has_is_refused_by_name(store: Store, tmp_path: Path) -> None:
    """
    A template value would replace the file's own column: that file fails, naming the template.
    """
    path = _write(tmp_path / "gpt-4o" / "a.jsonl", [{"model": "other", "total_s": 1.0}])
    report = ingest_paths(store, [path], path_template="{model}/*.jsonl")
    (error,) = report.errors
    assert isinstance(error, IngestError)
    assert error.field == "path_template"
    assert "own model column" in str(error)


def test_a_template_and_a_set_of_one_column_are_refused(store: Store, tmp_path: Path) -> None:
    """
    The template and ``sets`` both filling the model is a mistake, said before reading.
    """
    from tailkit.ingest import ScanOptions

    _write(tmp_path / "gpt-4o" / "a.jsonl", [{"total_s": 1.0}])
    with pytest.raises(MappingError, match="both fill 'model'"):
        ingest_paths(
            store, [tmp_path], options=ScanOptions(sets={"model": "x"}),
            path_template="{model}/*.jsonl",
        )  # fmt: skip


def test_parquet_files_read_together_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Parquet files are numbered by the reader: the same calls and rows, together or alone.
    """
    import duckdb

    jsonl = _tree(tmp_path / "json")
    parquet = []
    with duckdb.connect() as con:
        for path in jsonl:
            out = tmp_path / "pq" / (path.stem + ".parquet")
            out.parent.mkdir(exist_ok=True)
            con.execute(
                f"COPY (SELECT * FROM read_json('{path}', format='newline_delimited')) "
                f"TO '{out}' (FORMAT parquet)"
            )
            parquet.append(out)
    outcomes = []
    for together in (True, False):
        if not together:
            monkeypatch.setattr(_batch, "MAX_FILE_BYTES", 0)
        with Store.open(tmp_path / f"{together}.duckdb") as store:
            outcomes.append(_outcome(store, ingest_paths(store, parquet)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0][0][2] == 6  # a.parquet: six calls stored


def test_a_file_not_read_takes_nothing_from_the_template(store: Store) -> None:
    """
    The llmperf leaderboard under a template for its result files: the summaries are no error.

    They are read for model names and skipped; the provider is the file name's, as without it.
    """
    tree = ROOT / "data_samples" / "llmperf-leaderboard" / "raw_data"
    report = ingest_paths(store, [tree], path_template="individual/{provider}_*.json")
    assert report.ok
    assert report.totals()["stored"] == 2845
    assert store.fetchall("SELECT count(DISTINCT provider) FROM calls") == [(8,)]


def test_a_small_file_is_hashed_from_the_bytes_detection_read(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    A file detection read whole is not opened again for its hash; the hash is the same.

    A gzip file's head is its decompressed text, never its stored bytes: it is hashed as before.
    """
    import gzip

    import xxhash

    from tailkit.ingest import _ingest

    files = [_write(tmp_path / f"part-{i}.jsonl", _rows(3, "gpt-4o", start=10 * i)) for i in (1, 2)]
    packed = tmp_path / "part-3.jsonl.gz"
    packed.write_bytes(gzip.compress(files[0].read_bytes().replace(b'"c1', b'"c3')))
    hashed: list[Path] = []
    original = _ingest.content_hash

    def spy(path: Path) -> str:
        hashed.append(path)
        return original(path)

    monkeypatch.setattr(_ingest, "content_hash", spy)
    report = ingest_paths(store, [tmp_path])
    assert not report.errors
    assert hashed == [packed]
    stored = dict(store.fetchall("SELECT source_file, content_hash FROM ingests"))
    for path in [*files, packed]:
        assert stored[str(path)] == f"xxh3_128:{xxhash.xxh3_128(path.read_bytes()).hexdigest()}"
