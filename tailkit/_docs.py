"""
The reference pages (``docs/``), wherever tailkit is installed.

A wheel ships them as package data; a clone reads its own ``docs/``. Standard library only.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from pathlib import Path

from tailkit.errors import TailkitError


PACKAGED = Path(__file__).resolve().parent / "docs"  # in a wheel: see pyproject's force-include
CLONE = Path(__file__).resolve().parents[1] / "docs"  # in a clone of the repository
# - [Title](page.md): what it covers, up to the next item, a blank line or the end.
_ITEM = re.compile(r"^- \[(?P<title>[^\]]+)\]\((?P<page>[\w-]+)\.md\): (?P<what>.*?)(?=^- |^$|\Z)",
                   flags=re.MULTILINE | re.DOTALL)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Page:
    """
    One reference page.

    Args:
        name: Its name for ``tailkit docs NAME`` (the file name less ``.md``).
        title: Its title in the index.
        summary: What it covers, one line.
        path: The Markdown file.
    """

    name: str
    title: str
    summary: str
    path: Path


def docs_dir() -> Path:
    """
    The folder that holds the reference pages.

    Raises:
        TailkitError: Neither the package data nor a clone's ``docs/`` is there.
    """
    for folder in (PACKAGED, CLONE):
        if (folder / "README.md").is_file():
            return folder
    msg = f"the reference pages are missing (looked in {PACKAGED} and {CLONE}): reinstall tailkit"
    raise TailkitError(msg)


def pages() -> list[Page]:
    """
    The reference pages in the order of the index (``docs/README.md``).
    """
    folder = docs_dir()
    index = (folder / "README.md").read_text(encoding="utf-8")
    return [
        Page(
            name=m["page"],
            title=m["title"],
            summary=" ".join(m["what"].split()),
            path=folder / f"{m['page']}.md",
        )
        for m in _ITEM.finditer(index)
    ]


def page(name: str) -> Page:
    """
    The page called ``name`` (``plan``, ``plan.md`` and ``docs/plan.md`` all name one page).

    Raises:
        TailkitError: No such page: the error lists the names.
    """
    wanted = Path(name).name.removesuffix(".md")
    known = pages()
    for found in known:
        if found.name == wanted:
            return found
    names = ", ".join(p.name for p in known)
    msg = f"no reference page {name!r}: the pages are {names} (tailkit docs lists them)"
    raise TailkitError(msg)
