"""
Every command is one library call, and the library names parameters where the CLI names flags.
"""

from __future__ import annotations

import re
import stat

from pathlib import Path

import pytest

from tailkit.cli._common import error_text, flag_of
from tailkit.config import load_plan, write_plan
from tailkit.engines import SourceStats, stats_from
from tailkit.errors import ConfigError, MappingError, UnitError
from tailkit.ingest import ScanOptions, ingest_paths
from tailkit.races import find_races
from tailkit.store import Store, rejected_rows
from tailkit.tails import TableQuery
from tests._source import string_constants

from .conftest import CORPUS, ROOT
from .test_stats_source import _rows, _write_jsonl


WORKFLOW = ROOT / "data_samples" / "workflow.yaml"


def test_flags_follow_one_rule_with_named_exceptions() -> None:
    """Dashes for underscores, a table of exceptions, and races' two logs by command."""
    assert "--min-calls" == flag_of("min_calls")
    assert "--map" == flag_of("mapping")
    assert "--set-over" == flag_of("overrides")
    assert "--deadline" == flag_of("deadline_s")
    assert "--out" == flag_of("path", "calibrate")
    assert "--tool-unit" == flag_of("callee_options.unit", "races")
    assert "--unit" == flag_of("callee_options.unit")


def test_rejected_rows_are_a_library_call(store: Store) -> None:
    """The rows `tailkit rejects` lists come from `rejected_rows`, filtered and in file order."""
    ingest_paths(store, [CORPUS / "bad_rows.jsonl"])

    every = rejected_rows(store, limit=100)
    two = rejected_rows(store, limit=2)
    negative = rejected_rows(store, reason="total_s_negative")

    assert len(every) == store.counts()["rejects"] > 2
    assert [r.source_row for r in every] == sorted(r.source_row or 0 for r in every)
    assert two == every[:2]
    assert negative == [r for r in every if r.reason == "total_s_negative"]
    assert negative
    assert set(negative[0].as_dict()) == {"source_file", "source_row", "reason", "detail", "raw"}


def test_ingest_advice_names_the_option_by_its_field(tmp_path: Path, store: Store) -> None:
    """Every row rejected: the advice names status_map; the CLI spells it --status-map."""
    path = tmp_path / "calls.csv"
    path.write_text("model,total_s,outcome\nm,1.5,fine\nm,2.5,fine\nm,-1,ok\n")

    report = ingest_paths(store, [path], options=ScanOptions(mapping={"status": "outcome"}))
    advice = report.advice()

    assert advice is not None
    assert (advice.rejected, advice.reason, advice.count) == (3, "bad_status", 2)
    assert str(advice).endswith("map the file's status values with status_map VALUE=STATUS")
    assert advice.render(flag_of).endswith("with --status-map VALUE=STATUS")


def test_write_plan_replaces_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    """`write_plan` writes what `load_plan` reads back, keeping a replaced file's mode."""
    plan = load_plan(WORKFLOW)
    path = tmp_path / "plan.yaml"
    path.write_text("old\n", encoding="utf-8")
    path.chmod(0o664)

    write_plan(plan, path)

    assert load_plan(path) == plan
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_write_plan_errors_name_the_path_as_their_field(tmp_path: Path) -> None:
    """A plan under a file, not a folder: a ConfigError whose field the CLI shows as --out."""
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        write_plan(load_plan(WORKFLOW), tmp_path / "file" / "plan.yaml")

    assert caught.value.field == "path"
    assert error_text(caught.value, "calibrate").endswith(": choose another --out")


def test_stats_from_files_is_one_call(tmp_path: Path) -> None:
    """Files read in place, exactly or from sketches: one call, the same counts, rejects kept."""
    rows = _rows(600, seed=21)
    rows[0]["total_s"] = -1.0
    path = _write_jsonl(tmp_path / "a.jsonl", rows)
    query = TableQuery(by=("provider",), bucket=())

    exact = stats_from(source=[path], query=query)
    sketch = stats_from(source=[path], query=query, sketch=True)

    assert isinstance(exact, SourceStats)
    assert exact.read is not None
    assert (exact.read.rows_in, exact.read.rejected) == (600, 1)
    assert exact.engine() == {"name": "duckdb", "workers": 1, "exact": True}
    assert exact.report.table["n"].to_list() == sketch.report.table["n"].to_list()
    assert sketch.engine()["partitions"] == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"engine": "spark"}, "engine"),
        ({"engine": "dask"}, "engine"),
        ({"workers": 2, "source": ["x"]}, "workers"),
        ({"sketch": True, "approx": True, "source": ["x"]}, "approx"),
    ],
)
def test_stats_from_refuses_engine_options_by_field(kwargs: dict[str, object], field: str) -> None:
    """Options that cannot work together are ConfigErrors naming the parameter, not a flag."""
    with pytest.raises(ConfigError) as caught:
        stats_from(**kwargs)  # type: ignore[arg-type]

    assert caught.value.field == field
    assert "--" not in str(caught.value)


def test_races_unit_errors_name_the_side(tmp_path: Path) -> None:
    """A bad unit for the callee's log is callee_options.unit (races' CLI: --tool-unit)."""
    log = _write_jsonl(tmp_path / "a.jsonl", _rows(10, seed=1))
    with pytest.raises(MappingError) as caught:
        find_races(log, log, callee_options=ScanOptions(unit="h"))

    assert caught.value.field == "callee_options.unit"
    assert error_text(caught.value, "races").startswith("--tool-unit must be s or ms")


def test_ingest_unit_advice_is_a_field(tmp_path: Path, store: Store) -> None:
    """Durations that look like milliseconds: a UnitError on the field unit."""
    rows = [{**r, "total_s": r["total_s"] * 1000} for r in _rows(300, seed=8)]
    report = ingest_paths(store, [_write_jsonl(tmp_path / "ms.jsonl", rows)])

    (error,) = report.errors
    assert isinstance(error, UnitError)
    assert error.field == "unit"
    assert error_text(error).endswith("pass --unit ms, or --unit s if they really are seconds")


_LIBRARY = ("ingest", "store", "engines", "_config", "races", "demo", "formats")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
_NOT_OURS = {"--force-reinstall", "--save-detailed"}  # pip's and vllm's own options
_STORED = {"--map", "--set", "--status-map", "--unit"}  # reject details kept in the store


def test_library_strings_name_no_flag() -> None:
    """Messages of ingest, store, engines, config, races, demo and formats name parameters."""
    package = ROOT / "tailkit"
    files = [package / "config.py"]
    for name in _LIBRARY:
        files.extend(sorted((package / name).rglob("*.py")))
    found = {
        f"{path.relative_to(package)}: {flag}"
        for path in files
        for _, text in string_constants(path)
        for flag in _FLAG.findall(text)
        if flag not in _NOT_OURS
        and not (path.name == "_sql.py" and flag in _STORED)
        and not (path.name == "_mapping.py" and text == "--set model=VALUE")
    }
    assert len(files) > 40  # the scan ran over the packages' modules
    assert set() == found


def test_an_error_spells_every_parameter_it_names() -> None:
    """Besides its own {field}, an error's message and fix may name other parameters."""
    error = ConfigError(
        "{field} is for {engine} dask.", field="workers", value=2, fix="Drop {workers}."
    )
    assert str(error) == "workers is for engine dask. Drop workers."
    flags = error.render(lambda name: "--" + name)
    assert flags == "--workers is for --engine dask. Drop --workers."
