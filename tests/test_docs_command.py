"""
``tailkit docs``: the reference pages, listed and printed, from wherever tailkit is installed.
"""

from __future__ import annotations

import json

from pathlib import Path

from typer.testing import CliRunner

from tailkit.cli import app


ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_docs_lists_every_page_of_the_index() -> None:
    """
    One line per page, named as `tailkit docs NAME` takes it, then where they are.
    """
    result = runner.invoke(app, ["docs"])

    assert 0 == result.exit_code, result.output
    names = [line.split()[0] for line in result.output.splitlines()[:-1]]
    assert sorted(p.stem for p in (ROOT / "docs").glob("*.md") if p.stem != "README") == sorted(
        names
    )
    assert result.output.splitlines()[-1] == (
        f"in {ROOT / 'docs'}; print one with: tailkit docs NAME"
    )


def test_docs_prints_a_page_by_any_of_its_names() -> None:
    """
    `plan`, `plan.md` and `docs/plan.md` print the same page, as it is on disk.
    """
    text = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")

    for name in ("plan", "plan.md", "docs/plan.md"):
        result = runner.invoke(app, ["docs", name])
        assert 0 == result.exit_code, result.output
        assert text == result.output


def test_docs_path_and_json() -> None:
    """
    `--path` prints the file; `--json` the list with paths that exist.
    """
    path = runner.invoke(app, ["docs", "ledger", "--path"])
    listed = json.loads(runner.invoke(app, ["docs", "--json"]).output)

    assert str(ROOT / "docs" / "ledger.md") + "\n" == path.output
    assert all(Path(p["path"]).is_file() for p in listed["pages"])
    assert "ingest" == listed["pages"][0]["name"]


def test_docs_unknown_page_names_the_pages() -> None:
    """
    A page that does not exist: one error line listing the names, exit 1.
    """
    result = runner.invoke(app, ["docs", "nope"])

    assert 1 == result.exit_code
    assert (
        "no reference page 'nope': the pages are ingest, summary, rejects, stats, calibrate, "
        "simulate, demo, serve, report, races, replay, check, refresh, docs, executor, "
        "call-record, plan, deadline, ledger, formats, sdk, operations, package "
        "(tailkit docs lists them)"
    ) in result.output


def test_every_command_has_a_page_by_its_name() -> None:
    """
    `tailkit docs NAME` prints the reference of command NAME, its options table included.
    """
    from tailkit.cli._reference import commands, render

    for name in commands():
        result = runner.invoke(app, ["docs", name])
        assert 0 == result.exit_code, result.output
        assert result.output.startswith(f"# `tailkit {name}`")
        assert render(name) in result.output


def test_the_index_summaries_stop_at_their_section() -> None:
    """
    The last item of a section of the index does not run on into the next heading.
    """
    listed = json.loads(runner.invoke(app, ["docs", "--json"]).output)

    assert [p["name"] for p in listed["pages"] if "#" in p["summary"]] == []
