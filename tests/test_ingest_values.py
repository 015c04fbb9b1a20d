"""
Values: statuses, latency, ranges, --set over a column, and providers (issue 16, items 5-9).

Status vocabularies, calls without latency, out-of-range numbers, --set over a file's column,
and the provider a model name implies.
"""

from __future__ import annotations

import json

from pathlib import Path

import duckdb
import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import MappingError
from tailkit.formats._providers import infer_provider_sql
from tailkit.formats._sql import RawColumn, normalize_sql
from tailkit.formats.lowlevel import check_options
from tailkit.ingest import ScanOptions, ingest_paths
from tailkit.store import Store
from tailkit.store import summarize_store as summarize
from tailkit.tails import TableQuery, tail_report


runner = CliRunner()


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rejects(store: Store) -> list[tuple[int, str]]:
    return [(int(r), str(w)) for r, w in store.fetchall(
        "SELECT source_row, reason FROM rejects ORDER BY source_row"
    )]  # fmt: skip


# ----------------------------------------------------------------------- 5. status vocabularies


@pytest.mark.parametrize(
    ("good", "bad"), [("True", "False"), ("true", "FALSE"), ("1", "0"), ("Yes", "no")]
)
def test_a_boolean_success_column_maps_to_ok_and_error(
    store: Store, tmp_path: Path, good: str, bad: str
) -> None:
    """--map status=success reads true/false, 1/0 and yes/no (any case) as ok/error."""
    path = tmp_path / "calls.csv"
    path.write_text(f"model,provider,total_s,success\nm,p,1.5,{good}\nm,p,2.5,{bad}\n")

    report = ingest_paths(store, [path], options=ScanOptions(mapping={"status": "success"}))

    assert 0 == report.totals()["rejected"], report.reasons()
    assert [(1.5, "ok"), (2.5, "error")] == store.fetchall(
        "SELECT total_s, status FROM calls ORDER BY total_s"
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_boolean_typed_success_column_maps_to_ok_and_error(
    store: Store, tmp_path: Path, fmt: str
) -> None:
    """A JSON or Parquet BOOLEAN success column maps to ok/error too."""
    rows: list[dict[str, object]] = [
        {"model": "m", "provider": "p", "total_s": 1.5, "success": True},
        {"model": "m", "provider": "p", "total_s": 2.5, "success": False},
    ]
    path = _jsonl(tmp_path / "calls.jsonl", rows)
    if fmt == "parquet":
        out = tmp_path / "calls.parquet"
        duckdb.connect().execute(f"COPY (SELECT * FROM read_json('{path}')) TO '{out}'")
        path = out

    ingest_paths(store, [path], options=ScanOptions(mapping={"status": "success"}))

    assert [(1.5, "ok"), (2.5, "error")] == store.fetchall(
        "SELECT total_s, status FROM calls ORDER BY total_s"
    )


def test_status_map_names_another_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--status-map VALUE=STATUS maps values case-insensitively, before the built-in synonyms."""
    monkeypatch.chdir(tmp_path)
    Path("calls.csv").write_text(
        "model,total_s,outcome\nm,1.5,Good\nm,2.5,429\nm,3.5,boom\nm,4.5,success\n"
    )

    result = runner.invoke(
        app,
        ["ingest", "calls.csv", "--db", "s.duckdb", "--map", "status=outcome", "--quiet",
         "--status-map", "good=ok", "--status-map", "BOOM=error"],
    )  # fmt: skip

    assert 0 == result.exit_code, result.output
    with Store.open(Path("s.duckdb"), read_only=True) as store:
        assert [(1.5, "ok"), (2.5, "rate_limited"), (3.5, "error"), (4.5, "ok")] == (
            store.fetchall("SELECT total_s, status FROM calls ORDER BY total_s")
        )


def test_status_map_refuses_a_status_that_does_not_exist() -> None:
    """A --status-map target outside the statuses is a clear error naming the valid ones."""
    with pytest.raises(MappingError, match=r"'erro' is not a status \(did you mean 'error'\?\)"):
        check_options(ScanOptions(status_map={"boom": "erro"}))
    with pytest.raises(MappingError, match="both ok and error"):
        check_options(ScanOptions(status_map={"Yes": "ok", "yes ": "error"}))


def test_a_bad_status_names_the_status_map_option(store: Store, tmp_path: Path) -> None:
    """An unknown status value is rejected with a detail that names --status-map."""
    path = _jsonl(tmp_path / "c.jsonl", [{"model": "m", "total_s": 1.0, "status": "meh"}])

    ingest_paths(store, [path])

    (detail,) = store.fetchone("SELECT detail FROM rejects") or ("",)
    assert "status 'meh' is not one of" in detail
    assert "--status-map VALUE=STATUS" in detail


def test_ingest_that_stores_nothing_because_all_rows_were_rejected_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row rejected: exit 1 and one stderr line naming the commonest reason and the fix."""
    monkeypatch.chdir(tmp_path)
    Path("calls.csv").write_text("model,total_s,outcome\nm,1.5,fine\nm,2.5,fine\nm,-1,ok\n")

    result = runner.invoke(
        app, ["ingest", "calls.csv", "--db", "s.duckdb", "--map", "status=outcome", "--quiet"]
    )

    assert 1 == result.exit_code
    assert (
        "Error: nothing stored: all 3 row(s) read were rejected, most often bad_status (2); "
        "map the file's status values with --status-map VALUE=STATUS, or see why with: "
        "tailkit rejects --db s.duckdb --reason bad_status\n"
    ) == result.stderr


def test_ingest_that_stores_some_rows_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some rows stored and some rejected: exit 0, as before."""
    monkeypatch.chdir(tmp_path)
    Path("calls.csv").write_text("model,total_s\nm,1.5\nm,-1\n")

    result = runner.invoke(app, ["ingest", "calls.csv", "--db", "s.duckdb", "--quiet"])

    assert 0 == result.exit_code, result.output
    assert "" == result.stderr


# --------------------------------------------------------------- 6. failures logged with total 0


def _fifty_one(tmp_path: Path) -> Path:
    rows: list[dict[str, object]] = [
        {"id": f"c{i}", "model": "gpt-4o", "provider": "openai",
         "latency": 0.0 if i < 9 else 1.0 + i / 10}
        for i in range(51)
    ]  # fmt: skip
    return _jsonl(tmp_path / "calls.jsonl", rows)


def test_a_call_with_no_latency_and_no_status_is_a_failure(store: Store, tmp_path: Path) -> None:
    """Total 0 without a status: stored as error with its total kept, never as ok."""
    options = ScanOptions(mapping={"total_s": "latency", "call_id": "id"})

    report = ingest_paths(store, [_fifty_one(tmp_path)], options=options)

    assert (51, 0) == (report.totals()["stored"], report.totals()["rejected"])
    assert [("error", 0.0, 9), ("ok", None, 42)] == store.fetchall(
        "SELECT status, max(total_s) FILTER (total_s = 0), count(*) FROM calls "
        "GROUP BY status ORDER BY status"
    )


def test_summary_and_stats_count_the_same_ok_calls(store: Store, tmp_path: Path) -> None:
    """51 calls, 9 failed with total 0: summary's ok count is stats' n_ok, and 9 are failed."""
    options = ScanOptions(mapping={"total_s": "latency", "call_id": "id"})
    ingest_paths(store, [_fifty_one(tmp_path)], options=options)

    (route,) = summarize(store).routes
    (row,) = tail_report(store, TableQuery(bucket=())).table.to_dicts()

    assert (42, 9) == (route.ok, route.failed)
    assert route.ok == row["n_ok"]
    assert pytest.approx(9 / 51) == row["failed_share"]


def test_summary_counts_an_old_ok_row_with_total_0_as_stats_does(store: Store) -> None:
    """A store written before the fix (ok with total 0): summary agrees with stats anyway."""
    store.execute(
        "INSERT INTO calls (call_id, provider, model, total_s, status, attempt, abandoned) "
        "VALUES ('a', 'p', 'm', 0.0, 'ok', 0, false), ('b', 'p', 'm', 1.0, 'ok', 0, false)"
    )

    (route,) = summarize(store).routes
    (row,) = tail_report(store, TableQuery(bucket=())).table.to_dicts()

    assert (1, 1, 1) == (route.ok, route.failed, row["n_ok"])


def test_an_ok_call_with_total_0_is_rejected(store: Store, tmp_path: Path) -> None:
    """Status ok with total 0 contradicts itself: rejected, with the reason and the fix."""
    path = _jsonl(
        tmp_path / "c.jsonl",
        [{"model": "m", "total_s": 0, "status": "ok"}, {"model": "m", "total_s": 1.0}],
    )

    ingest_paths(store, [path])

    assert [(1, "ok_with_zero_total")] == _rejects(store)
    (detail,) = store.fetchone("SELECT detail FROM rejects") or ("",)
    assert detail.startswith("status is ok but total_s is 0")


def test_an_ok_call_without_total_is_rejected_even_when_cut(store: Store, tmp_path: Path) -> None:
    """An explicit ok with no total_s is rejected even if the row also has a cut age."""
    path = _jsonl(
        tmp_path / "c.jsonl",
        [{"model": "m", "status": "ok", "censored_at_s": 5}, {"model": "m", "total_s": 1.0}],
    )

    ingest_paths(store, [path])

    assert [(1, "ok_without_total")] == _rejects(store)


# ----------------------------------------------------------------------- 7. out-of-range numbers


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"attempt": 3e9}, "attempt_out_of_range"),
        ({"input_tokens": 1e30}, "input_tokens_out_of_range"),
        ({"output_tokens": 2**63}, "output_tokens_out_of_range"),
        ({"http_status": 99999999999}, "http_status_out_of_range"),
        ({"http_status": 42}, "http_status_out_of_range"),
        ({"started_at": "294247-01-01T00:00:00Z"}, "started_at_out_of_range"),
        ({"started_at": "1969-12-31T23:59:59Z"}, "started_at_out_of_range"),
        ({"started_at": 1e10}, "started_at_out_of_range"),
        ({"started_at": "2026-01-01T00:00:00+99:00"}, "started_at_bad_offset"),
        ({"started_at": "2026-01-01T00:00:00-1430"}, "started_at_bad_offset"),
        ({"total_s": 1e308}, "total_s_out_of_range"),
        ({"total_s": 2.0, "ttft_s": 1e9}, "ttft_s_out_of_range"),
    ],
)
def test_an_out_of_range_value_is_rejected_not_changed(
    store: Store, tmp_path: Path, extra: dict[str, object], reason: str
) -> None:
    """A value beyond its column or beyond reason is rejected with its reason, never stored."""
    row: dict[str, object] = {"model": "m", "provider": "p", "total_s": 1.0, **extra}
    path = _jsonl(tmp_path / "c.jsonl", [row, {"model": "m", "provider": "p", "total_s": 2.0}])

    report = ingest_paths(store, [path])

    assert {reason: 1} == report.reasons()
    assert [(1, reason)] == _rejects(store)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_out_of_range_integers_are_rejected_from_typed_sources(
    store: Store, tmp_path: Path, fmt: str
) -> None:
    """From text (CSV) or a BIGINT Parquet column alike: 3e9 attempts are not attempt 0."""
    jsonl = _jsonl(
        tmp_path / "c.jsonl",
        [{"model": "m", "total_s": 1.0, "attempt": 3_000_000_000, "http_status": 200},
         {"model": "m", "total_s": 1.0, "attempt": 2, "http_status": 99_999_999_999}],
    )  # fmt: skip
    path = tmp_path / f"c.{fmt}"
    duckdb.connect().execute(f"COPY (SELECT * FROM read_json('{jsonl}')) TO '{path}'")

    ingest_paths(store, [path])

    assert [(1, "attempt_out_of_range"), (2, "http_status_out_of_range")] == _rejects(store)


def test_values_at_the_edges_of_their_range_are_stored(store: Store, tmp_path: Path) -> None:
    """The largest attempt, a +14:00 offset, a week's latency and 1970 itself are kept."""
    path = _jsonl(
        tmp_path / "c.jsonl",
        [{"model": "m", "total_s": 604800, "attempt": 2**31 - 1, "http_status": 599,
          "started_at": "2026-01-01T00:00:00+14:00"},
         {"model": "m", "total_s": 1.0, "http_status": 100, "started_at": "1970-01-01T00:00:00Z",
          "input_tokens": 2**53}],
    )  # fmt: skip

    report = ingest_paths(store, [path], options=ScanOptions(unit="s"))

    assert (2, 0) == (report.totals()["stored"], report.totals()["rejected"]), report.reasons()
    assert (2**31 - 1, 2**53) == store.fetchone("SELECT max(attempt), max(input_tokens) FROM calls")


# ---------------------------------------------------------------- 8. --set over a file's column


def _with_provider(tmp_path: Path) -> Path:
    return _jsonl(
        tmp_path / "c.jsonl",
        [{"provider": "azure", "model": "gpt-4o", "total_s": 1.0},
         {"provider": "openai", "model": "gpt-4o", "total_s": 2.0}],
    )  # fmt: skip


def test_set_over_a_column_the_file_has_is_refused(store: Store, tmp_path: Path) -> None:
    """--set provider=… on a file with a provider column is an error naming --set-over."""
    report = ingest_paths(
        store, [_with_provider(tmp_path)], options=ScanOptions(sets={"provider": "openai"})
    )

    assert not report.ok
    message = str(report.errors[0])
    assert "setting provider=openai would replace the file's own column 'provider'" in message
    assert "overrides provider=openai" in message
    assert (0,) == store.fetchone("SELECT count(*) FROM calls")


def test_set_over_replaces_the_column_and_keeps_the_original_in_attrs(
    store: Store, tmp_path: Path
) -> None:
    """--set-over (overrides) replaces the file's column; the file's value stays in attrs."""
    options = ScanOptions(sets={"provider": "openai"}, overrides=frozenset({"provider"}))

    report = ingest_paths(store, [_with_provider(tmp_path)], options=options)

    assert report.ok
    assert [("openai", "azure"), ("openai", "openai")] == store.fetchall(
        "SELECT provider, attrs->>'provider' FROM calls ORDER BY total_s"
    )


def test_set_for_a_column_the_file_lacks_works_as_before(store: Store, tmp_path: Path) -> None:
    """--set step=… fills a column the file does not have, without --set-over."""
    options = ScanOptions(sets={"step": "draft"})

    report = ingest_paths(store, [_with_provider(tmp_path)], options=options)

    assert report.ok
    assert [("draft",)] == store.fetchall("SELECT DISTINCT step FROM calls")


def test_set_over_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI: --set refused with the fix, --set-over accepted, both at once refused."""
    monkeypatch.chdir(tmp_path)
    _with_provider(tmp_path)
    base = ["ingest", "c.jsonl", "--db", "s.duckdb", "--quiet"]

    refused = runner.invoke(app, [*base, "--set", "provider=x"])
    both = runner.invoke(app, [*base, "--set", "provider=x", "--set-over", "provider=y"])
    over = runner.invoke(app, [*base, "--set-over", "provider=x"])

    assert 1 == refused.exit_code
    assert "use --set-over provider=x to replace it" in refused.stderr
    assert "Error: --set provider and --set-over provider both given; keep one\n" == both.stderr
    assert 0 == over.exit_code, over.output


def test_set_over_needs_a_set() -> None:
    """An override without its value is refused by check_options."""
    with pytest.raises(MappingError, match="overrides provider=VALUE"):
        check_options(ScanOptions(overrides=frozenset({"provider"})))


# ---------------------------------------------------------------------------------- 9. provider


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("gpt-4o", "openai"), ("GPT-4o-mini", "openai"), ("o1", "openai"), ("o3-mini", "openai"),
        ("o4-mini", "openai"), ("chatgpt-4o-latest", "openai"),
        ("text-embedding-3-small", "openai"), ("ft:gpt-4o-mini:acme::x1", "openai"),
        ("claude-3-5-sonnet-20241022", "anthropic"), ("gemini-1.5-pro", "gemini"),
        ("mistral-large-latest", "mistral"), ("codestral-latest", "mistral"),
        ("command-r-plus", "cohere"), ("deepseek-chat", "deepseek"), ("grok-2", "xai"),
        ("openai/gpt-4o", "openai"), ("anthropic/claude-3-opus", "anthropic"),
        ("azure/gpt-4o", "azure"), ("bedrock/anthropic.claude-3", "bedrock"),
        ("anthropic.claude-3-sonnet-20240229-v1:0", "bedrock"),
        ("claude-3-5-sonnet@20240620", "vertex_ai"),
        ("openrouter/anthropic/claude-3.5-sonnet", "openrouter"),
        # Open weights, served by anyone: unknown.
        ("llama-3.1-70b", "unknown"), ("meta-llama/Llama-3.1-8B-Instruct", "unknown"),
        ("qwen2.5-72b", "unknown"), ("Qwen/Qwen2.5-7B", "unknown"), ("gemma-2-9b", "unknown"),
        ("mixtral-8x7b-32768", "unknown"), ("gpt-oss-120b", "unknown"),
        ("openai/gpt-oss-120b", "unknown"), ("openai/Qwen2.5-7B", "unknown"),
        ("deepseek-r1-distill-llama-70b", "unknown"), ("llama3:8b", "unknown"),
        ("o1x", "unknown"), ("my-model", "unknown"),
    ],
)  # fmt: skip
def test_the_provider_a_model_name_implies(model: str, provider: str) -> None:
    """One table: the maker's API where the name says so, a platform's prefix, else unknown."""
    sql = f"SELECT {infer_provider_sql('m')} FROM (SELECT ?::VARCHAR AS m)"
    assert (provider,) == duckdb.connect().execute(sql, [model]).fetchone()


def test_a_missing_provider_is_inferred_and_flagged(store: Store, tmp_path: Path) -> None:
    """No provider column: nothing rejected; inferred rows say so in attrs, given ones do not."""
    path = _jsonl(
        tmp_path / "c.jsonl",
        [{"model": "gpt-4o", "total_s": 1.0}, {"model": "llama-3-8b", "total_s": 2.0},
         {"model": "claude-3-haiku", "total_s": 3.0, "provider": "bedrock"},
         {"model": "claude-3-haiku", "total_s": 4.0, "provider": ""}],
    )  # fmt: skip

    report = ingest_paths(store, [path])

    assert (4, 0) == (report.totals()["stored"], report.totals()["rejected"]), report.reasons()
    assert [
        ("openai", "true"), ("unknown", "true"), ("bedrock", None), ("anthropic", "true"),
    ] == store.fetchall(
        "SELECT provider, attrs->>'provider_inferred' FROM calls ORDER BY total_s"
    )  # fmt: skip


def test_a_file_without_a_provider_column_needs_no_set(store: Store, tmp_path: Path) -> None:
    """A CSV with model and latency only is stored (provider was a required column)."""
    path = tmp_path / "c.csv"
    path.write_text("model,latency\ngpt-4o,1.5\n")

    report = ingest_paths(store, [path], options=ScanOptions(mapping={"total_s": "latency"}))

    assert report.ok, report.errors
    assert [("openai",)] == store.fetchall("SELECT provider FROM calls")


def test_the_missing_model_hint_names_only_what_the_format_accepts() -> None:
    """normalize_sql's model_hint replaces the generic --map/--set hint in missing_model."""
    raw = {"total_s": RawColumn("1.0", "DOUBLE", "a constant")}
    con = duckdb.connect()

    def detail(hint: str | None = None) -> str:
        scan = "(SELECT 1 AS x)"
        sql = (
            normalize_sql(scan, raw) if hint is None else normalize_sql(scan, raw, model_hint=hint)
        )
        (attrs,) = con.execute(f"SELECT attrs FROM ({sql})").fetchone() or ("{}",)
        return str(json.loads(attrs)["detail"])

    assert "model is missing (fill it with --map model=COLUMN or --set model=VALUE)" == detail()
    assert "model is missing (fill it with --set model=VALUE)" == detail("--set model=VALUE")
    assert "model is missing" == detail("")
