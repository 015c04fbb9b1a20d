"""
Hostile stores and filters, each refused with one `Error:` line naming the fix.

A --db that is no file, a --where that reaches for files, a store that is damaged, edited or on
a full disk.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import FilterError, StoreError, StoreFileError, StoreVersionError
from tailkit.ingest import ingest_paths
from tailkit.store import Store, summarize_store
from tailkit.store.lowlevel import WHERE_COLUMNS, checked_where
from tailkit.tails import TableQuery
from tests.conftest import PRODUCTION


SECRET = "tk-secret-4f1c9a"  # noqa: S105 - the content a filter must not show


def _tailkit(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """
    ``tailkit ARGS`` in a child process (a hang fails the test instead of stalling it).
    """
    return subprocess.run(
        [sys.executable, "-m", "tailkit", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    2,000 production calls as a Parquet file.
    """
    path = tmp_path_factory.mktemp("small") / "small.parquet"
    duckdb.sql(
        f"COPY (SELECT * FROM '{PRODUCTION / 'calls.parquet'}' ORDER BY call_id LIMIT 2000) "
        f"TO '{path}'"
    )
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, small: Path) -> Path:
    """
    A store of those calls (read-only in the tests).
    """
    path = tmp_path_factory.mktemp("store") / "s.duckdb"
    with Store.open(path) as store:
        assert ingest_paths(store, [small]).ok
    return path


# -- --db names something that is not a file ------------------------------------------------


@pytest.fixture
def non_files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """
    A FIFO, a folder, a socket, a device, and links to them.
    """
    fifo, folder, sock = tmp_path / "fifo", tmp_path / "folder", tmp_path / "sock"
    os.mkfifo(fifo)
    folder.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    paths = {"fifo": fifo, "folder": folder, "socket": sock, "device": Path("/dev/zero")}
    for name, target in list(paths.items()):
        link = tmp_path / f"link-to-{name}"
        link.symlink_to(target)
        paths[f"link to {name}"] = link
    yield paths
    listener.close()


def test_a_store_path_that_is_not_a_regular_file_is_refused(non_files: dict[str, Path]) -> None:
    """
    Store.open refuses a FIFO, folder, socket, device or a link to one, read-only or not.
    """
    for name, path in non_files.items():
        for read_only in (True, False):
            with pytest.raises(StoreFileError, match=r"is a .*, not a store file") as caught:
                Store.open(path, read_only=read_only)
            assert caught.value.field == "db", name


def test_commands_on_a_fifo_store_end_with_one_error_line(
    non_files: dict[str, Path], small: Path
) -> None:
    """
    summary, stats and ingest with --db naming a FIFO (or a link to one) stop with one line.
    """
    runs = [
        ("summary", "--db", non_files["fifo"]),
        ("stats", "--db", non_files["link to fifo"]),
        ("ingest", small, "--db", non_files["fifo"]),
    ]
    for args in runs:
        result = _tailkit(*args)
        line = _one_error_line(result.stderr)
        assert 1 == result.returncode
        assert "is a named pipe (FIFO), not a store file: give --db the path" in line


def test_a_write_ahead_log_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    """
    The store's ``.wal`` beside it is a file DuckDB opens too: a FIFO there is refused.
    """
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    os.mkfifo(tmp_path / "s.duckdb.wal")

    with pytest.raises(StoreFileError, match=r"write-ahead log .*s\.duckdb\.wal is a named pipe"):
        Store.open(path, read_only=True)


# -- --where reads only the calls ---------------------------------------------------------


HOSTILE_FILTERS = {
    "a subquery over a file": "provider = (SELECT string_agg(column0, ',') FROM "
    "read_csv('{secret}', header = false))",
    "a scalar file reader": "read_text('{secret}') IS NOT NULL",
    "a folder listing": "EXISTS (SELECT * FROM glob('/*'))",
    "an IN subquery": "model IN (SELECT content FROM read_text('{secret}'))",
    "the environment": "getenv('HOME') = 'x'",
    "a setting": "current_setting('temp_directory') = 'x'",
    "a second statement": "TRUE); SELECT * FROM read_text('{secret}'); SELECT (1",
    "a union": "TRUE) UNION ALL SELECT * FROM read_csv('{secret}') WHERE (TRUE",
    "a comment eating the query": "TRUE) OR TRUE --",
    "an attach": "TRUE); ATTACH '{secret}' AS x; SELECT (1",
    "a table function": "query_table('calls') IS NULL",
    "another table's column": "calls.provider = 'x'",
    "a column that is not the call record's": "secret_column = 1",
    "an aggregate": "count(*) > 0",
    "a window": "row_number() OVER () = 1",
    "a lambda": "list_filter([1], x -> x > 0) = [1]",
    "a parameter": "provider = ?",
    "a cast to a table type": "total_s::calls IS NULL",
    "a schema-qualified function": "main.lower(model) = 'x'",
}


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(f"{SECRET}\n")
    return path


@pytest.mark.parametrize("kind", HOSTILE_FILTERS)
def test_a_filter_reaching_beyond_the_calls_is_refused(kind: str, secret_file: Path) -> None:
    """
    A subquery, table or file function, setting, second statement, ... is refused unrun.
    """
    where = HOSTILE_FILTERS[kind].format(secret=secret_file)

    with pytest.raises(FilterError) as caught:
        checked_where(where)

    message = str(caught.value)
    assert message.startswith(f"where {where!r}"[:60]) or "where '" in message, message
    assert "is not a valid filter: " in message
    assert SECRET not in message
    assert caught.value.field == "where"


@pytest.mark.parametrize(
    "where",
    [
        "step = 'extract'",
        "provider = 'openai' AND total_s > 1.5",
        "status IN ('ok', 'error') AND NOT abandoned",
        "model LIKE 'gpt-%' OR model ILIKE '%CLAUDE%'",
        "http_status BETWEEN 500 AND 599",
        "coalesce(ttft_s, 0) < 1 AND input_tokens IS NOT NULL",
        "started_at >= TIMESTAMP '2024-01-01' AND started_at < now() - INTERVAL 1 DAY",
        "lower(model) = 'x' OR regexp_matches(model, '^llama')",
        "attrs->>'region' = 'eu' OR json_extract_string(attrs, '$.k') = 'v'",
        "CASE WHEN step = 'a' THEN total_s > 1 ELSE TRUE END",
        "total_s::INTEGER = 1 OR TRY_CAST(error_type AS INTEGER) = 2",
        "provider = 'x' /* a comment that ends */ OR provider = '--'",
        "date_trunc('day', started_at) = DATE '2024-01-01' OR extract(hour FROM started_at) = 3",
    ],
)
def test_filters_over_the_call_columns_pass(where: str) -> None:
    """
    Columns, constants, operators, IN lists, LIKE, CASE, casts and pure functions pass as given.
    """
    assert where == checked_where(where)


def test_a_refusal_names_the_columns_and_what_was_refused() -> None:
    """
    The message lists the call columns and names the refused function.
    """
    with pytest.raises(FilterError) as caught:
        checked_where("read_text('/etc/passwd') = 'x'")

    message = str(caught.value)
    assert f"only expressions over the call columns ({', '.join(WHERE_COLUMNS)}) are " in message
    assert message.endswith("allowed; refused function read_text()")


def test_a_filter_nested_past_pythons_recursion_is_refused() -> None:
    """
    A chain of a thousand operators is refused as too deep, not a RecursionError.
    """
    for where in ("+".join(["total_s"] * 990) + " > 1", "NOT " * 990 + "abandoned"):
        with pytest.raises(FilterError, match="it nests too deeply"):
            checked_where(where)


def test_the_library_entries_check_the_filter(db: Path, secret_file: Path) -> None:
    """
    TableQuery, tailkit.stats(where=) and Store.calls_with_buckets(where=) refuse before SQL.
    """
    import tailkit

    where = f"model = (SELECT content FROM read_text('{secret_file}'))"
    with pytest.raises(FilterError):
        TableQuery(where=where)
    with pytest.raises(FilterError):
        tailkit.stats(db, where=where)
    with Store.open(db, read_only=True) as store, pytest.raises(FilterError):
        store.calls_with_buckets(where=where)


def test_stats_where_reading_a_file_never_shows_it(db: Path, secret_file: Path) -> None:
    """
    The probe of the issue: the file's content came back in DuckDB's conversion error.
    """
    where = f"total_s = (SELECT content FROM read_text('{secret_file}'))::DOUBLE"
    result = CliRunner().invoke(app, ["stats", "--db", str(db), "--where", where])

    line = _one_error_line(result.stderr)
    assert 1 == result.exit_code
    assert SECRET not in result.output
    assert line.startswith("Error: --where ")
    assert line.endswith("are allowed; refused a subquery")


def test_report_where_listing_a_folder_is_refused(db: Path, tmp_path: Path) -> None:
    """
    The report's --where with glob('/') is one line naming the flag; no report is written.
    """
    where = "EXISTS (SELECT * FROM glob('/*'))"
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["report", "--db", str(db), "--out", str(out), "--where", where]
    )

    line = _one_error_line(result.stderr)
    assert 1 == result.exit_code
    assert line.startswith("Error: --where ")
    assert "refused a subquery" in line
    assert not (out / "index.html").exists()


def test_a_filter_still_filters(db: Path) -> None:
    """
    A checked filter selects the calls it says (the count matches DuckDB's own).
    """
    import tailkit

    where = "status = 'ok' AND total_s > 2"
    table = tailkit.stats(db, by=("provider",), bucket=(), where=where)
    with Store.open(db, read_only=True) as store:
        row = store.fetchone(f"SELECT count(*) FROM calls WHERE {where}")

    assert row is not None
    assert row[0] == table["n"].sum()


# -- a store that is edited, damaged, or cannot be written ------------------------------------


def test_a_non_numeric_schema_version_is_one_error_line(tmp_path: Path) -> None:
    """
    A schema_version 'two' in meta is a StoreVersionError naming the file, not a ValueError.
    """
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
    con.close()

    with pytest.raises(StoreVersionError, match=r"schema version 'two' in its meta table"):
        Store.open(path, read_only=True)
    result = CliRunner().invoke(app, ["summary", "--db", str(path)])
    line = _one_error_line(result.stderr)
    assert 1 == result.exit_code
    assert str(path) in line
    assert "not a number" in line


def _damaged_copy(db: Path, tmp_path: Path) -> Path:
    """
    A copy of ``db`` with garbage over one data block: it opens, but summarizing it fails.
    """
    size, block, header = db.stat().st_size, 262144, 3 * 4096
    for start in range(header, size, block):
        for inside in (block // 2, 64):
            copy = tmp_path / f"damaged-{start}-{inside}.duckdb"
            shutil.copyfile(db, copy)
            with copy.open("r+b") as f:
                f.seek(start + inside)
                f.write(bytes(range(256)) * 16)
            try:
                with Store.open(copy, read_only=True) as store:
                    summarize_store(store)
            except StoreError as exc:
                if "cannot open" not in str(exc):
                    return copy
            except duckdb.Error:
                return copy  # the old store's unwrapped error: the test below says so
            copy.unlink()
    pytest.fail("no data block of the store was read by summary")


def test_a_damaged_block_in_summary_is_one_error_line(db: Path, tmp_path: Path) -> None:
    """
    The summary of a store with a corrupted block: one line naming the file and the fix.
    """
    damaged = _damaged_copy(db, tmp_path)

    result = CliRunner().invoke(app, ["summary", "--db", str(damaged)])

    line = _one_error_line(result.stderr)
    assert 1 == result.exit_code
    assert f"store {damaged}: " in line
    assert "the store file is damaged: ingest the logs again into a new store (give --db" in line


def test_a_file_that_is_not_duckdb_is_one_error_line(tmp_path: Path) -> None:
    """
    A text file given as --db says it is not a DuckDB file, and is left as it was.
    """
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")

    result = CliRunner().invoke(app, ["summary", "--db", str(path)])

    line = _one_error_line(result.stderr)
    assert "it is not a DuckDB file: give --db a tailkit store" in line
    assert "hello\n" == path.read_text()


class _FailingCommit:
    """
    A DuckDB connection whose COMMIT fails as on a full disk (the statement is not run).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        self._con, self._path = con, path

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().upper() == "COMMIT":
            msg = f'Could not write file "{self._path}.wal": No space left on device'
            raise duckdb.IOException(msg)
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def test_a_failed_commit_is_a_store_error_and_stores_nothing(tmp_path: Path, small: Path) -> None:
    """
    A commit that cannot write raises StoreFileError naming the file; nothing is half-stored.
    """
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        store._con = _FailingCommit(store._con, path)  # type: ignore[assignment]
        with pytest.raises(StoreFileError) as caught, store.transaction():
            store.execute("INSERT INTO meta VALUES ('probe', 'x')")

    assert f"store {path}: " in str(caught.value)
    assert "No space left on device; free disk space" in str(caught.value)
    with Store.open(path, read_only=True) as store:
        assert store.fetchone("SELECT count(*) FROM meta WHERE key = 'probe'") == (0,)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as on Linux")
def test_ingest_on_a_full_disk_keeps_the_store(tmp_path: Path, small: Path) -> None:
    """
    Writes fail past a file-size limit (as on a full disk): one line, the store as it was.
    """
    path = tmp_path / "s.duckdb"
    first = tmp_path / "first.parquet"
    duckdb.sql(f"COPY (SELECT * FROM '{small}' LIMIT 10) TO '{first}'")
    big = tmp_path / "big.parquet"
    duckdb.sql(f"COPY (SELECT * FROM '{PRODUCTION / 'calls.parquet'}' LIMIT 60000) TO '{big}'")
    with Store.open(path) as store:
        assert ingest_paths(store, [first]).ok
    limit = path.stat().st_size + 65536

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, "-m", "tailkit", "ingest", str(big), "--db", str(path), "-q"],
        capture_output=True, text=True, timeout=300, check=False, preexec_fn=full_disk,
    )  # fmt: skip

    assert 1 == result.returncode
    line = _one_error_line(result.stderr)
    assert f"store {path}: " in line
    assert "free disk space" in line
    with Store.open(path, read_only=True) as store:
        assert store.counts()["calls"] == 10
    with Store.open(path) as store:  # and the disk, freed, takes the file
        assert ingest_paths(store, [big]).ok


def test_a_store_another_process_writes_is_one_error_line(db: Path, tmp_path: Path) -> None:
    """
    A store locked by a writer elsewhere: one line saying another process has it open.
    """
    path = tmp_path / "locked.duckdb"
    shutil.copyfile(db, path)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import duckdb, sys; c = duckdb.connect({str(path)!r}); print('held', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert "held" == holder.stdout.readline().strip()
        result = CliRunner().invoke(app, ["ingest", str(db), "--db", str(path)])
    finally:
        holder.communicate("", timeout=60)

    line = _one_error_line(result.stderr)
    assert 1 == result.exit_code
    assert f"cannot open {path} as a DuckDB store: " in line
    assert line.endswith(
        "another process has it open for writing: wait for it to finish, or stop it"
    )


def test_a_store_path_with_control_characters_is_printed_inert(tmp_path: Path) -> None:
    """
    A --db path holding an escape sequence is spelt out in the error, not sent to the terminal.
    """
    path = tmp_path / "a\x1b[31mb.duckdb"

    with pytest.raises(StoreError) as caught:
        Store.open(path, read_only=True)

    assert "\x1b" not in str(caught.value)
    assert "a\\x1b[31mb.duckdb" in str(caught.value)
