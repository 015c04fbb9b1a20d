"""
Streams are ingested like files: pipes, ``<(zcat ...)``, ``/dev/stdin`` and ``-``; devices are not.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading

from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import InputFileError
from tailkit.ingest import _streams, ingest_paths, open_in_place
from tailkit.store import Store


runner = CliRunner()


def _rows(n: int = 30, *, ids: bool = True) -> bytes:
    rows = [
        {**({"call_id": f"c{i}"} if ids else {}), "provider": "openai", "model": "gpt-4o",
         "total_s": 1 + i / 10}
        for i in range(n)
    ]  # fmt: skip
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _feed(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        with path.open("wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


@pytest.mark.parametrize("packed", ["plain", "gzip"])
def test_a_named_pipe_is_read_under_its_own_name(store: Store, tmp_path: Path, packed: str) -> None:
    """A FIFO (plain or gzip) is stored whole; results and source_file name the pipe."""
    path = tmp_path / "calls.jsonl"
    os.mkfifo(path)
    data = _rows()
    writer = _feed(path, gzip.compress(data) if packed == "gzip" else data)

    report = ingest_paths(store, [path])
    writer.join()

    assert report.ok, report.errors
    assert [path] == [f.path for f in report.files]
    assert ("jsonl", 30, 30) == (report.files[0].format, report.files[0].rows_in,
                                 report.totals()["stored"])  # fmt: skip
    assert [(str(path), 30)] == store.fetchall("SELECT source_file, count(*) FROM calls GROUP BY 1")
    assert [(str(path),)] == store.fetchall("SELECT source_file FROM ingests")
    assert not any(Path(p).name.endswith("-stream.jsonl") for (p,) in store.fetchall(
        "SELECT source_file FROM calls"
    ))  # fmt: skip


def test_a_pipe_of_parquet_is_detected_and_read(store: Store, tmp_path: Path) -> None:
    """Parquet through a pipe: detected by its footer (read from the spool) and stored."""
    parquet = tmp_path / "calls.parquet"
    store.execute(
        f"COPY (SELECT 'openai' AS provider, 'gpt-4o' AS model, 1.5 + i AS total_s "
        f"FROM range(12) t(i)) TO '{parquet}' (FORMAT parquet)"
    )
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = _feed(pipe, parquet.read_bytes())

    report = ingest_paths(store, [pipe])
    writer.join()

    assert report.ok, report.errors
    assert ("parquet", 12) == (report.files[0].format, report.totals()["stored"])


def test_a_pipe_takes_its_values_from_the_path_template(store: Store, tmp_path: Path) -> None:
    """--path-template matches the pipe's own path, not its spool's."""
    folder = tmp_path / "bench" / "llama-3-70b"
    folder.mkdir(parents=True)
    path = folder / "run1.jsonl"
    os.mkfifo(path)
    data = _rows().replace(b'"model": "gpt-4o", ', b"")
    writer = _feed(path, data)

    report = ingest_paths(store, [path], path_template="{model}/*.jsonl")
    writer.join()

    assert report.ok, report.errors
    assert [("llama-3-70b", 30)] == store.fetchall("SELECT model, count(*) FROM calls GROUP BY 1")


def test_the_same_content_piped_twice_is_ingested_once(store: Store, tmp_path: Path) -> None:
    """Dedup by content: a second pipe with the same bytes is the earlier ingest again."""
    data = _rows(ids=False)
    for name in ("one", "two"):
        path = tmp_path / name
        os.mkfifo(path)
        writer = _feed(path, data)
        report = ingest_paths(store, [path])
        writer.join()
        assert report.ok, report.errors

    assert 30 == report.totals()["duplicates"]
    assert report.files[0].already_ingested is not None
    assert 30 == store.fetchone("SELECT count(*) FROM calls")[0]


def test_standard_input_as_dash(tmp_path: Path) -> None:
    """`tailkit ingest -` reads standard input; a second run of the same bytes stores nothing."""
    db = str(tmp_path / "s.duckdb")

    first = runner.invoke(app, ["ingest", "-", "--db", db, "--quiet"], input=_rows())
    again = runner.invoke(app, ["ingest", "-", "--db", db, "--quiet"], input=_rows())

    assert 0 == first.exit_code, first.output
    assert "30 rows in = 30 stored" in first.output
    assert 0 == again.exit_code, again.output
    assert "30 rows in = 0 stored + 0 rejected + 30 duplicates" in again.output
    with Store.open(db, read_only=True) as store:
        assert [("-",)] == store.fetchall("SELECT DISTINCT source_file FROM calls")


def test_empty_standard_input_is_one_error(tmp_path: Path) -> None:
    """An empty stream is refused like an empty file, by name."""
    result = runner.invoke(app, ["ingest", "-", "--db", str(tmp_path / "s.duckdb")], input=b"")

    assert 1 == result.exit_code
    assert "Error: -: empty stream (0 bytes), nothing to ingest" in result.output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_endless_binary_devices_are_refused_at_once(store: Store) -> None:
    """/dev/zero is refused from its first bytes (no hang, no spool to the disk's end)."""
    report = ingest_paths(store, ["/dev/zero", "/dev/null"])

    assert [] == report.files
    assert [
        "/dev/zero: binary stream, not JSON, CSV, Parquet or gzip; give a log file or pipe one in",
        "/dev/null: empty stream (0 bytes), nothing to ingest",
    ] == [str(e) for e in report.errors]


def test_a_stream_beyond_the_spool_limit_is_refused(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endless text stream stops at the spool limit with an error that names the fix."""
    monkeypatch.setattr(_streams, "spool_limit", lambda folder: 3 << 20)
    monkeypatch.setattr(_streams, "_CHUNK_BYTES", 1 << 16)
    path = tmp_path / "endless"
    os.mkfifo(path)
    line = b'{"provider": "openai", "model": "m", "total_s": 1}\n'
    stop = threading.Event()

    def write() -> None:
        try:
            with path.open("wb") as fh:
                while not stop.is_set():
                    fh.write(line * 1000)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    report = ingest_paths(store, [path, tmp_path / "other.jsonl"])
    stop.set()

    assert [] == report.files
    assert str(report.errors[0]).startswith(f"{tmp_path / 'other.jsonl'}: no such file")
    message = str(report.errors[1])
    assert message.startswith(f"{path}: stream larger than 3,145,728 bytes")
    assert "save it to a file and ingest that" in message
    assert not list(tmp_path.glob("**/*-stream*"))


def test_a_pipe_inside_a_folder_is_not_read(store: Store, tmp_path: Path) -> None:
    """A folder's FIFO is skipped (nobody may write to it): the folder's files are read."""
    (tmp_path / "a.jsonl").write_bytes(_rows())
    os.mkfifo(tmp_path / "b.jsonl")

    report = ingest_paths(store, [tmp_path])

    assert report.ok, report.errors
    assert [tmp_path / "a.jsonl"] == [f.path for f in report.files]


def test_process_substitution_through_the_shell(tmp_path: Path) -> None:
    """The real thing: `tailkit ingest <(zcat calls.jsonl.gz)` in bash stores the calls."""
    packed = tmp_path / "calls.jsonl.gz"
    packed.write_bytes(gzip.compress(_rows()))
    db = tmp_path / "s.duckdb"
    command = f'"{sys.executable}" -m tailkit ingest <(zcat "{packed}") --db "{db}" --json'

    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "-c", command], capture_output=True, text=True, check=False, timeout=120
    )

    assert 0 == done.returncode, done.stderr
    files = json.loads(done.stdout)["files"]
    assert [(30, 30)] == [(f["rows_in"], f["stored"]) for f in files]
    assert files[0]["path"].startswith("/dev/fd/")


def test_a_stream_is_not_read_in_place(tmp_path: Path) -> None:
    """A view (stats --source) reads its files at every query: a stream is refused by name."""
    path = tmp_path / "pipe"
    os.mkfifo(path)

    for name in ("-", str(path)):
        with pytest.raises(InputFileError, match="cannot be read in place") as caught:
            open_in_place([name])
        assert str(caught.value).startswith(f"{name}: a pipe or standard input")


def test_a_terminal_or_closed_standard_input_is_refused(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-` on a terminal would wait for typing, and a closed one has nothing: both refused."""
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tailkit", "ingest", "-", "--db", str(tmp_path / "s.duckdb")],
            stdin=follower, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
    finally:
        os.close(leader)
        os.close(follower)
    assert 1 == done.returncode
    assert "Error: -: standard input is a terminal; pipe a log into it" in done.stderr

    monkeypatch.setattr(sys, "stdin", None)
    report = ingest_paths(store, ["-"])
    assert ["-: standard input is closed; pipe a log into it (zcat log.gz | ...)"] == [
        str(e) for e in report.errors
    ]


def test_a_named_pipe_scopes_rows_without_ids_by_its_path(store: Store, tmp_path: Path) -> None:
    """A log that grew, piped again through the same named pipe, stores only its new rows."""
    path = tmp_path / "bench.jsonl"
    os.mkfifo(path)
    rows = _rows(40, ids=False).splitlines(keepends=True)
    for part in (rows[:25], rows):
        writer = _feed(path, b"".join(part))
        report = ingest_paths(store, [path])
        writer.join()
        assert report.ok, report.errors

    assert (40, 15, 25) == (report.files[0].rows_in, report.totals()["stored"],
                            report.totals()["duplicates"])  # fmt: skip


def test_nameless_streams_scope_rows_without_ids_by_their_content(tmp_path: Path) -> None:
    """`-` names every stream: two runs' equal rows (no id, no time) are both kept."""
    db = str(tmp_path / "s.duckdb")
    one = _rows(10, ids=False)
    two = one + _rows(1, ids=False).replace(b"1.0", b"9.0")

    for data in (one, two):
        result = runner.invoke(app, ["ingest", "-", "--db", db, "--quiet"], input=data)
        assert 0 == result.exit_code, result.output

    with Store.open(db, read_only=True) as store:
        assert 21 == store.fetchone("SELECT count(*) FROM calls")[0]
