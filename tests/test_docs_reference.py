"""
The command pages' option tables are what the commands generate, so undocumented options fail.

``python -m tailkit.cli._reference --write`` regenerates them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from pathlib import Path

import pytest

from tailkit.cli._reference import BLOCK, commands, documented, main, render, stale_pages


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_committed_tables_match_the_commands() -> None:
    """
    Every options block in docs/ is byte for byte what its command generates.
    """
    assert stale_pages(DOCS) == []


def test_every_command_has_exactly_one_options_block() -> None:
    """
    Each command's table is on one page, and no block names a command that does not exist.
    """
    names = [m["name"] for page in DOCS.glob("*.md") for m in BLOCK.finditer(page.read_text())]

    assert sorted(names) == sorted(commands())
    assert documented(DOCS) == set(commands())


def test_a_stale_block_is_found_and_rewritten(tmp_path: Path) -> None:
    """
    A page whose table lacks an option is named as stale, and --write puts the option back.
    """
    page = tmp_path / "stats.md"
    shutil.copy(DOCS / "stats.md", page)
    fresh = page.read_text()
    page.write_text("\n".join(line for line in fresh.splitlines() if "`--sketch`" not in line))

    assert stale_pages(tmp_path) == ["stats.md"]
    assert stale_pages(tmp_path, write=True) == ["stats.md"]
    assert "| `--sketch` |" in page.read_text()
    assert stale_pages(tmp_path) == []


def test_the_table_holds_flags_values_defaults_and_help() -> None:
    """
    One row per visible option: its flags, the word for its value, its default, its help.
    """
    table = render("calibrate")

    assert table.startswith("Usage: `tailkit calibrate [OPTIONS] ")
    assert "| `--out`, `-o` | `FILE` |  | Where to write the plan. |" in table
    assert "| `--runs` | `N` | `20000` | Simulated workflow runs. |" in table
    assert "`empirical\\|lognormal`" in table  # a pipe in a cell is escaped
    assert "--min-group" not in render("ingest")
    assert "--min-calls" not in render("stats")  # hidden: stats refuses it, naming --min-group


def test_check_exits_1_naming_the_stale_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """
    ``--check``: exit 0 on the committed pages; exit 1 naming a page whose table is stale.
    """
    for page in DOCS.glob("*.md"):
        shutil.copy(page, tmp_path / page.name)
    assert 0 == main(["--check"], tmp_path)
    page = tmp_path / "ingest.md"
    page.write_text(page.read_text().replace("Print JSON for scripts.", "Print JSON."))

    assert 1 == main(["--check"], tmp_path)
    assert capsys.readouterr().err == (
        "stale options tables in docs/: ingest.md; "
        "regenerate with: python -m tailkit.cli._reference --write\n"
    )


def test_the_module_runs_as_a_script() -> None:
    """
    ``python -m tailkit.cli._reference --check`` on the committed pages: exit 0, silent.
    """
    done = subprocess.run(
        [sys.executable, "-m", "tailkit.cli._reference", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert (0, "") == (done.returncode, done.stderr)
