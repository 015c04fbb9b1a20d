"""
One bad line, one reject: the rest of the file is stored, and the bad line is found at its place.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from pathlib import Path

import pytest

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


def _good(i: int, **extra: object) -> str:
    row = {"call_id": f"c{i}", "provider": "openai", "model": "gpt-4o", "total_s": 1.0 + i / 1000}
    return json.dumps({**row, **extra})


def _write(path: Path, lines: list[bytes | str]) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def _ingest(store: Store, *paths: Path, fmt: str = "auto") -> tuple[dict[str, int], list[str]]:
    report = ingest_paths(store, list(paths), format=fmt)
    return {k: v for k, v in report.totals().items() if k != "inferred_provider"}, [
        str(e) for e in report.errors
    ]


def _rejects(store: Store) -> list[tuple[int, str]]:
    return [(int(r), str(why)) for r, why in store.fetchall(
        "SELECT source_row, reason FROM rejects ORDER BY source_row"
    )]  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (_good(2).replace("gpt-4o", "gpt\x01-4o").encode(), "malformed_json"),
        (_good(2).replace("gpt-4o", "gpt\x1f-4o").encode(), "malformed_json"),
        (_good(2).replace("gpt-4o", "café").encode("latin-1"), "malformed_json"),
        (b'{"call_id": "c2", "model": ', "malformed_json"),
        (b"[1, 2]", "malformed_json"),
    ],
    ids=["control-0x01", "control-0x1f", "latin-1", "torn", "array"],
)
def test_one_bad_line_is_one_reject(store: Store, tmp_path: Path, bad: bytes, reason: str) -> None:
    """A control byte, Latin-1, a torn line or an array: that line rejected, the rest stored."""
    path = _write(tmp_path / "x.jsonl", [_good(1), bad, _good(3)])

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 3, "stored": 2, "rejected": 1, "duplicates": 0} == totals
    assert [(2, reason)] == _rejects(store)
    detail = store.fetchone("SELECT detail FROM rejects")
    assert detail is not None
    assert "CSV" not in detail[0]


def test_a_bare_carriage_return_is_whitespace(store: Store, tmp_path: Path) -> None:
    """A CR between two keys is JSON whitespace: no line is split or lost."""
    path = _write(tmp_path / "x.jsonl", [_good(1), _good(2).replace(', "model"', ',\r"model"'),
                                         b"{torn", _good(4)])  # fmt: skip

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 4, "stored": 3, "rejected": 1, "duplicates": 0} == totals
    assert [(3, "malformed_json")] == _rejects(store)


def test_a_latin1_line_after_12000_good_ones(store: Store, tmp_path: Path) -> None:
    """One line that is not UTF-8 deep in a file is rejected at its line; the others stored."""
    bad = json.dumps({"call_id": "x", "provider": "p", "model": "café", "total_s": 1},
                     ensure_ascii=False).encode("latin-1")  # fmt: skip
    path = _write(tmp_path / "x.jsonl", [*(_good(i) for i in range(12_000)), bad, _good(12_001)])

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 12_002, "stored": 12_001, "rejected": 1, "duplicates": 0} == totals
    assert [(12_001, "malformed_json")] == _rejects(store)
    raw = store.fetchone("SELECT raw FROM rejects")
    assert raw is not None
    assert '"call_id": "x"' in raw[0]


def test_keys_with_quotes_and_backslashes_survive_the_forgiving_path(
    store: Store, tmp_path: Path
) -> None:
    """Keys holding a quote or a backslash are quoted properly: the forgiving read still runs."""
    odd = {'we"ird': 1, "back\\slash": 2}
    path = _write(tmp_path / "x.jsonl", [_good(1, **odd), "{torn", _good(3, **odd)])

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 3, "stored": 2, "rejected": 1, "duplicates": 0} == totals
    attrs = store.fetchone("SELECT attrs FROM calls WHERE call_id = 'c1'")
    assert attrs is not None
    assert {'we"ird': 1, "back\\slash": 2} == json.loads(attrs[0])


def test_a_long_line_near_the_start_does_not_stop_the_sniff(store: Store, tmp_path: Path) -> None:
    """A 5 MB line second in the file is read like any other."""
    path = _write(tmp_path / "x.jsonl", [_good(1), _good(2, blob="a" * 5_000_000), _good(3)])

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 3, "stored": 3, "rejected": 0, "duplicates": 0} == totals


@pytest.mark.parametrize("first", [True, False], ids=["first-line", "second-line"])
def test_deep_nesting_is_no_traceback_and_the_next_file_loads(
    store: Store, tmp_path: Path, first: bool
) -> None:
    """Values nested 1,000 and 100,000 deep: no RecursionError, and the next file loads."""
    deep = [_good(10, x=0)[:-1] + ', "y": ' + "[" * n + "]" * n + "}" for n in (1_000, 100_000)]
    lines = [*deep, _good(1)] if first else [_good(1), *deep]
    path = _write(tmp_path / "deep.jsonl", lines)
    after = _write(tmp_path / "after.jsonl", [_good(100), _good(101)])

    totals, errors = _ingest(store, path, after)

    assert [] == errors
    assert 5 == totals["rows_in"]
    assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
    assert (2,) == store.fetchone("SELECT count(*) FROM calls WHERE call_id IN ('c100', 'c101')")


def test_a_json_array_with_a_non_object_item(store: Store, tmp_path: Path) -> None:
    """`[{…}, 42, {…}]`: the 42 is rejected as item 2, the objects stored."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps([json.loads(_good(1)), 42, json.loads(_good(3))]))

    totals, errors = _ingest(store, path)

    assert [] == errors
    assert {"rows_in": 3, "stored": 2, "rejected": 1, "duplicates": 0} == totals
    assert [(2, "not_an_object")] == _rejects(store)


_RSS = """
import json, resource, sys
from tailkit.ingest import ingest_paths
from tailkit.store import Store
strict = sys.argv[1] == "strict"
with Store.open(sys.argv[2]) as store:
    report = ingest_paths(store, sys.argv[3:], strict=strict)
    rejects = store.fetchall("SELECT source_row, reason, detail FROM rejects")
    print(json.dumps([report.totals(), [str(e) for e in report.errors], rejects]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True], ids=["forgiving", "strict"])
def test_a_gzip_whose_last_line_is_1_gib_is_one_counted_reject(
    tmp_path: Path, strict: bool
) -> None:
    """
    A 1 GiB line is counted and rejected with its length, the rest stored, in bounded memory.
    """
    huge = tmp_path / "huge.jsonl.gz"
    with gzip.open(huge, "wb", compresslevel=1) as fh:
        fh.write((_good(1) + "\n\n").encode())  # a blank line is not a record
        fh.write(b'{"call_id": "h", "provider": "p", "model": "m", "total_s": 1, "x": "')
        chunk = b" " * (1 << 24)
        for _ in range(64):
            fh.write(chunk)
        fh.write(b'"}\n')
        fh.write(_good(2).encode())  # the last line, without a newline
    after = _write(tmp_path / "after.jsonl", [_good(100)])

    mode = "strict" if strict else "forgiving"
    out = subprocess.run(
        [sys.executable, "-c", _RSS, mode, str(tmp_path / "t.duckdb"), str(huge), str(after)],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip

    totals, errors, rejects = json.loads(out[0])
    peak_kib = int(out[1])
    print(f"peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 1024 * 1024  # less than the line itself
    if strict:
        assert 1 == totals["stored"]  # the next file loads; the huge one is refused
        assert 1 == len(errors)
        assert (
            "huge.jsonl.gz: 1 bad row(s), nothing stored (strict); first: row 2: the line is"
            in errors[0]
        )
        return
    assert (3, 1, 4, []) == (totals["stored"], totals["rejected"], totals["rows_in"], errors)
    ((row, reason, detail),) = rejects
    assert (2, "line_too_long") == (row, reason)
    assert detail.startswith("the line is 1,073,741,")
    assert "64 MiB" in detail


# --- Hypothesis: random bad lines in good files of every line-based format ------------------


def _stored_lines(path: Path, fmt: str, tmp: Path) -> list[str]:
    """The lines of a corpus file that are stored on their own (no reject, no duplicate)."""
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    with Store.open(tmp / f"{fmt}-sample.duckdb") as store:
        ingest_paths(store, [path], format=fmt)
        stored = {int(r) for (r,) in store.fetchall("SELECT source_row FROM calls")}
    return [line for i, line in enumerate(lines, 1) if i in stored]


_SAMPLES = {
    "jsonl": None,
    "litellm": CORPUS / "litellm" / "standard_logging_payload.jsonl",
    "helicone": CORPUS / "helicone" / "export.jsonl",
    "aiperf": CORPUS / "aiperf" / "profile_export.jsonl",
    "langfuse": CORPUS / "langfuse" / "observations.jsonl",
}
_BAD = st.sampled_from([
    b'{"call_id": "torn", "model": ',
    b"42",
    b"[1, 2]",
    b'"just a string"',
    b"null",
    b"{not json at all}",
    b'{"a": 1} {"b": 2}',
    b'{"call_id": "ctl\x01", "model": "m"}',
    b'{"call_id": "ctl\x02\x1b", "model": "m"}',
    '{"call_id": "latin", "model": "caf\u00e9"}'.encode("latin-1"),
    b'{"call_id": "bad-utf8", "model": "\xff\xfe"}',
])  # fmt: skip


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Good lines of each line-based format (the generic one made up, the rest from the corpus)."""
    tmp = tmp_path_factory.mktemp("samples")
    out = {"jsonl": [_good(i) for i in range(6)]}
    out["jsonl"].append(_good(6, blob="x" * 200_000))  # long, but well under the limit
    for fmt, path in _SAMPLES.items():
        if path is not None:
            out[fmt] = _stored_lines(path, fmt, tmp)
    return out


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(sorted(_SAMPLES)),
    inserts=st.lists(st.tuples(st.integers(0, 50), _BAD), min_size=1, max_size=4),
)
def test_random_bad_lines_are_rejected_at_their_place(
    samples: dict[str, list[str]],
    tmp_path_factory: pytest.TempPathFactory,
    fmt: str,
    inserts: list[tuple[int, bytes]],
) -> None:
    """Every good line stored at its line, every bad line rejected at its line, counts add up."""
    # A Langfuse line may hold an array of observations, each a record of its own.
    assume(fmt != "langfuse" or not any(bad.startswith(b"[") for _, bad in inserts))
    lines: list[bytes] = [x.encode() for x in samples[fmt]]
    bad_at: set[int] = set()
    for where, bad in inserts:
        i = where % (len(lines) + 1)
        lines.insert(i, bad)
        bad_at = {b + 1 if b >= i else b for b in bad_at} | {i}
    tmp = tmp_path_factory.mktemp("bad")
    path = _write(tmp / "x.jsonl", list(lines))

    with Store.open(tmp / "t.duckdb") as store:
        report = ingest_paths(store, [path], format=fmt)
        assert report.ok, report.errors
        totals = report.totals()
        stored = sorted(int(r) for (r,) in store.fetchall("SELECT source_row FROM calls"))
        rejected = sorted(int(r) for (r,) in store.fetchall("SELECT source_row FROM rejects"))

    assert len(lines) == totals["rows_in"]
    assert (len(lines) - len(bad_at), len(bad_at), 0) == (
        totals["stored"], totals["rejected"], totals["duplicates"]
    )  # fmt: skip
    assert sorted(b + 1 for b in bad_at) == rejected
    assert sorted(set(range(1, len(lines) + 1)) - {b + 1 for b in bad_at}) == stored


_BAD_CSV = st.sampled_from([
    b"x1,openai,gpt-4o,1.5,one too many",
    b"x2,openai",
    b"x3,openai,gpt-4o,not a number",
    b"x4,openai,gpt-4o,-2",
    b"x5,openai,caf\xe9,1.5",
])  # fmt: skip


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(inserts=st.lists(st.tuples(st.integers(0, 50), _BAD_CSV), min_size=1, max_size=4))
def test_random_bad_csv_rows_are_rejected_at_their_place(
    tmp_path_factory: pytest.TempPathFactory, inserts: list[tuple[int, bytes]]
) -> None:
    """CSV too: every good row stored at its row, every bad one rejected at its row."""
    rows = [f"c{i},openai,gpt-4o,{1 + i / 10}".encode() for i in range(8)]
    bad_at: set[int] = set()
    for where, bad in inserts:
        i = where % (len(rows) + 1)
        rows.insert(i, bad)
        bad_at = {b + 1 if b >= i else b for b in bad_at} | {i}
    tmp = tmp_path_factory.mktemp("csv")
    path = _write(tmp / "x.csv", [b"call_id,provider,model,total_s", *rows])

    with Store.open(tmp / "t.duckdb") as store:
        report = ingest_paths(store, [path], format="csv")
        assert report.ok, report.errors
        stored = sorted(int(r) for (r,) in store.fetchall("SELECT source_row FROM calls"))
        rejected = sorted(int(r) for (r,) in store.fetchall("SELECT source_row FROM rejects"))

    assert sorted(b + 1 for b in bad_at) == rejected
    assert sorted(set(range(1, len(rows) + 1)) - {b + 1 for b in bad_at}) == stored
