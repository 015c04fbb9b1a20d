"""
The project's own reference: every citation points at a shipped file, and docs/ stays true.
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from tailkit.config import dump_plan, parse_plan
from tailkit.executor import DEADLINE_HEADER, REMAINING_HEADER
from tailkit.ledger import LEDGER_FIELDS
from tailkit.record import CALL_COLUMNS, SOURCE_COLUMNS, STATUSES


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SCANNED = ("tailkit", "tests", "docs", "notebooks", "data_samples")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".txt", ".json", ".jsonl",
                 ".csv", ".html", ".cfg"}  # fmt: skip
# [text](target): the target up to a space, a closing parenthesis or a fragment.
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
# The design notes the repository does not ship, spelled so this file does not match itself.
UNSHIPPED = ("DESIGN" + ".md", "reference" + " §")
# Code is not prose: fenced blocks and inline spans hold no links.
CODE = re.compile(r"```.*?```|`[^`\n]*`", flags=re.DOTALL)


def _text_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            if parts & {"__pycache__", ".ipynb_checkpoints"}:
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                files.append(path)
    return files


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_nothing_cites_the_unshipped_design_notes() -> None:
    """
    No file in the package, tests, docs, notebooks or samples cites a design document.
    """
    citing = [
        str(path.relative_to(ROOT))
        for path in _text_files()
        if any(u in path.read_text(encoding="utf-8", errors="replace") for u in UNSHIPPED)
    ]

    assert citing == []


@pytest.mark.parametrize(
    "page", ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))], ids=str
)
def test_every_relative_link_points_at_a_file(page: str) -> None:
    """
    Each relative link in the README and docs/*.md names a file or folder that exists.
    """
    source = ROOT / page
    targets = LINK.findall(CODE.sub("", source.read_text(encoding="utf-8")))
    local = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # not http: etc.

    assert [t for t in local if not (source.parent / t).exists()] == []


def test_docs_index_lists_every_page() -> None:
    """
    docs/README.md links every page of docs/, and the README links the index.
    """
    index = _doc("README.md")
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}

    assert {page for page in pages if f"]({page})" in index} == pages
    assert "](docs/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_call_record_page_lists_every_column_and_status() -> None:
    """
    docs/call-record.md has a row for every stored column with its type, and every status.
    """
    text = _doc("call-record.md")
    rows = dict(re.findall(r"^\| `(\w+)` \| (\w+)", text, flags=re.MULTILINE))

    assert {c.name: c.sql_type for c in CALL_COLUMNS}.items() <= rows.items()
    mappable = set(re.findall(r"^\| `(\w+)` \| [^|]+\| [^|]*\| yes \|", text, flags=re.MULTILINE))
    assert mappable == {c.name for c in SOURCE_COLUMNS}
    assert all(f"`{status}`" in text for status in STATUSES)


def test_plan_page_example_is_what_dump_plan_writes() -> None:
    """
    The example plan in docs/plan.md is byte for byte what dump_plan writes for it.
    """
    example = re.findall(r"```yaml\n(.*?)```", _doc("plan.md"), flags=re.DOTALL)[0]

    assert dump_plan(parse_plan(example)) == example


def test_plan_header_points_at_a_shipped_page() -> None:
    """
    The header of every written plan names docs/plan.md, which exists.
    """
    header = dump_plan(parse_plan(re.findall(r"```yaml\n(.*?)```", _doc("plan.md"),
                                             flags=re.DOTALL)[0])).splitlines()[0]  # fmt: skip

    assert header == "# tailkit plan — written by tailkit; fields: docs/plan.md"
    assert (ROOT / "docs" / "plan.md").is_file()


def test_ledger_and_deadline_pages_name_the_real_fields() -> None:
    """
    docs/ledger.md lists every ledger key in order; docs/deadline.md names both headers.
    """
    keys = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", _doc("ledger.md"), flags=re.MULTILINE)
    listed = [name for pair in keys for name in pair if name]
    deadline = _doc("deadline.md")

    assert [k for k in listed if k in LEDGER_FIELDS] == list(LEDGER_FIELDS)
    assert f"`{DEADLINE_HEADER}`" in deadline
    assert f"`{REMAINING_HEADER}`" in deadline


def test_formats_page_covers_every_format() -> None:
    """
    docs/formats.md has a row for every format that ingest --list-formats shows.
    """
    from tailkit.formats import FORMATS

    rows = re.findall(r"^\| `([\w-]+)` \|", _doc("formats.md"), flags=re.MULTILINE)

    assert rows[: len(FORMATS)] == list(FORMATS)


def test_every_command_has_its_page_linked_from_the_readme() -> None:
    """
    docs/NAME.md is the page of command NAME (its title says so), and the README links it.
    """
    from tailkit.cli._reference import commands

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    titled = {name: _doc(f"{name}.md").startswith(f"# `tailkit {name}`") for name in commands()}

    assert [name for name, ok in titled.items() if not ok] == []
    assert [name for name in commands() if f"](docs/{name}.md)" not in readme] == []


def test_the_readme_is_a_tour() -> None:
    """
    The README stays short: the reference lives in docs/, not in option tables here.
    """
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    assert len(readme.splitlines()) <= 300
    assert "| option |" not in readme


def _resolves(dotted: str) -> bool:
    """
    Whether ``tailkit.a.b`` names a module, or an attribute reached from the longest module.
    """
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


@pytest.mark.parametrize(
    "page", ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))], ids=str
)
def test_every_name_the_docs_import_exists(page: str) -> None:
    """
    Each ``from tailkit.x import a, b`` and each `tailkit.x.y` the pages show resolves.
    """
    text = (ROOT / page).read_text(encoding="utf-8")
    imported = [
        f"{m[1]}.{name.strip()}"
        for m in re.finditer(r"^from (tailkit[\w.]*) import ([\w, ]+)$", text, flags=re.MULTILINE)
        for name in m[2].split(",")
    ]
    named = re.findall(r"`(tailkit(?:\.\w+)+)", text)
    dotted = sorted({*imported, *named} - {"tailkit.duckdb"})  # the store file, not a module

    assert [d for d in dotted if not _resolves(d)] == []
