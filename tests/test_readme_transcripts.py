"""
The transcripts of the README and the docs pages stay true: each command prints what they show.

Run as written on the bundled samples, up to the numbers.
A transcript line and an output line match when they read the same once table borders are
dropped, every number is replaced by ``#`` and runs of spaces are one space. A page may
leave lines out (``…``), never show a line the command does not print, nor show them in
another order. Each command runs once, and every page that shows it is checked against that
one output.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
BORDERS = re.compile(r"[┏┳┓┃┡╇┩│└┴┘━─╭╮╰╯┗┻┛┣╋┫]")
NUMBER = re.compile(r"\d[\d,.]*")
SPACES = re.compile(r"\s+")


def skeleton(line: str) -> str:
    """
    A line as this test compares it: no borders, numbers as ``#``, single spaces.
    """
    return SPACES.sub(" ", NUMBER.sub("#", BORDERS.sub(" ", line))).strip()


def transcript(command: str, page: str) -> list[str]:
    """
    The lines ``page`` shows after ``$ COMMAND`` in a console block (up to the next prompt).
    """
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    start = lines.index(f"$ {command}")
    shown: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith(("$ ", "```")):
            break
        shown.append(line)
    return shown


def missing_lines(shown: list[str], printed: str) -> list[str]:
    """
    The shown lines that the output does not print in the shown order (none when true).
    """
    real = [skeleton(line) for line in printed.splitlines()]
    missing: list[str] = []
    at = 0
    for line in shown:
        wanted = skeleton(line)
        if not wanted or wanted == "…":
            continue
        try:
            at = real.index(wanted, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def test_skeleton_ignores_numbers_and_borders_only() -> None:
    """
    Numbers and borders differ between runs; words do not.
    """
    assert skeleton("│ gpt-4.1 │  2,425 │ 0.0% │") == skeleton("gpt-4.1   99 1.5%")
    assert skeleton("searched 478 candidates") != skeleton("searched 478 plans")


def test_missing_lines_keeps_the_readme_order() -> None:
    """
    A line shown before another must come first in the output too.
    """
    assert missing_lines(["a 1", "…", "b 2"], "a 5\nx\nb 7\n") == []
    assert missing_lines(["b 2", "a 1"], "a 5\nb 7\n") == ["a 1"]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    A folder like the quick start's: the bundled samples, ingested into ./tailkit.duckdb.
    """
    where = tmp_path_factory.mktemp("readme")
    (where / "data_samples").symlink_to(ROOT / "data_samples")
    return where


def _run(command: str, where: Path, width: int) -> str:
    """
    Run a documented ``python3 -m tailkit …`` command in ``where``; its stdout.
    """
    argv = [sys.executable, *shlex.split(command)[1:]]
    env = {**os.environ, "COLUMNS": str(width), "TERM": "dumb", "NO_COLOR": "1"}
    done = subprocess.run(
        argv, cwd=where, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# Each documented command, run in this order, and the pages that show its transcript.
DOCUMENTED = {
    "python3 -m tailkit ingest data_samples/": ["docs/ingest.md"],
    "python3 -m tailkit stats --by model --bucket output --where "
    "\"provider = 'openai' AND model = 'gpt-4.1'\"": ["docs/stats.md"],
    "python3 -m tailkit calibrate data_samples/workflow.yaml --out plan.yaml": [
        "README.md",
        "docs/calibrate.md",
    ],
}


def test_every_documented_transcript_is_on_its_pages() -> None:
    """
    Each page still shows the transcript this file re-runs, so none is checked by accident.
    """
    for command, pages in DOCUMENTED.items():
        for page in pages:
            assert transcript(command, page), f"{page}: no transcript of {command}"


@pytest.mark.slow
def test_documented_commands_print_what_the_pages_show(samples: Path) -> None:
    """
    Ingest, stats and calibrate, as the README and docs run them, print the pages' lines in order.
    """
    for command, pages in DOCUMENTED.items():
        shown = {page: transcript(command, page) for page in pages}
        width = max(len(line) for lines in shown.values() for line in lines)
        printed = _run(command, samples, width)

        for page, lines in shown.items():
            assert missing_lines(lines, printed) == [], f"{page}: {command}\n{printed}"
