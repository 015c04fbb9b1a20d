"""
`--help` at 80 columns: prose wrapped once, examples whole, values named by words.
"""

from __future__ import annotations

import itertools
import re

import pytest
import typer

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.cli._help import HelpGroup, HelpTyper, fit_example, reflow


WIDTH = 80
TEXT = WIDTH - 2  # typer pads the help text by a column on each side
ENV = {"COLUMNS": str(WIDTH), "TERM": "dumb"}
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env=ENV)
    assert 0 == result.exit_code, result.output
    return result.stdout


def _prose(output: str) -> list[list[str]]:
    """
    The paragraphs of the help text between the usage line and the first panel.
    """
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" Usage:"))
    start = next(i for i in range(start, len(lines)) if not lines[i].strip())
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.startswith("╭"):
            break
        if re.match(r" \S", line):
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _flat(text: str) -> str:
    """
    Text with shell continuations joined and whitespace normalized.
    """
    return " ".join(re.sub(r" \\ *\n", " ", text).split())


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_fits_80_columns_and_names_values_by_words(command: str) -> None:
    """
    No line is wider than 80 columns and no option shows a type label such as <list[str]>.
    """
    output = _help(*([command] if command else []))

    assert [] == [line for line in output.splitlines() if len(line) > WIDTH]
    assert [] == re.findall(r"<[a-z][^>]*>", output)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_wraps_prose_only_where_the_next_word_would_not_fit(command: str) -> None:
    """
    Each prose line is filled: no docstring line break survives as a break in mid-sentence.
    """
    for paragraph in _prose(_help(command)):
        for line, following in itertools.pairwise(paragraph):
            word = following.split()[0]
            assert len(line[1:].rstrip()) + 1 + len(word) > TEXT, (line, following)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_shows_the_docstring_and_every_example_whole(command: str) -> None:
    """
    The first paragraph and each example of the command's docstring appear unbroken.
    """
    doc = reflow(COMMANDS[command].callback.__doc__ or "")
    output = _flat(_help(command))

    assert _flat(doc.split("\n\n")[0]) in output
    examples = [line.strip() for line in doc.splitlines() if line[:1].isspace()]
    assert examples, f"{command}'s docstring has no example"
    for example in examples:
        assert _flat(example) in output


def test_every_option_with_a_value_names_it_and_flags_name_none() -> None:
    """
    Options taking a value have a metavar word; flags and hidden options show none.
    """
    missing = []
    for name, command in COMMANDS.items():
        for param in command.params:
            flag = getattr(param, "is_flag", False)
            word = param.metavar
            if word is None or (flag and word) or (not flag and not word):
                missing.append((name, param.name, word))

    assert [] == missing


def test_help_keeps_brackets_and_markup_words_as_written() -> None:
    """
    Bracketed text such as "[9.2–21.3 %]" or "[note]" is printed, not read as rich markup.
    """
    demo = HelpTyper(cls=HelpGroup)

    @demo.command()
    def first() -> None:
        """
        Share of calls [9.2–21.3 %], see [note] and [bold]this[/bold].

        Example:

            tool first
        """

    @demo.command()
    def second() -> None:
        """
        Another [default] command.
        """

    result = CliRunner().invoke(demo, ["first", "--help"], env=ENV)
    listing = CliRunner().invoke(demo, ["--help"], env=ENV)

    assert 0 == result.exit_code, result.output
    assert "Share of calls [9.2–21.3 %], see [note] and [bold]this[/bold]." in result.stdout
    assert "Another [default] command." in listing.stdout


def test_reflow_joins_prose_and_keeps_examples_and_list_items() -> None:
    """
    Prose paragraphs become one line each; indented lines and list items keep their lines.
    """
    text = """
        First line
        goes on.

        Second paragraph,
        also two lines:
        - an item
          indented
        - another

        Example:

            tool run --flag
            tool other
        \f
        hidden
    """

    assert (
        "First line goes on.\n"
        "\n"
        "Second paragraph, also two lines:\n"
        "- an item\n"
        "  indented\n"
        "- another\n"
        "\n"
        "Example:\n"
        "\n"
        "    tool run --flag\n"
        "    tool other"
    ) == reflow(text)


def test_fit_example_continues_with_a_backslash_keeping_options_and_quotes_whole() -> None:
    """
    A wide example is split between arguments, never inside quotes or an option's value.
    """
    line = "    tailkit stats --by provider,model --bucket output --where \"step = 'draft'\""

    lines = fit_example(line, 40)

    assert [
        "    tailkit stats --by provider,model \\",
        "        --bucket output \\",
        "        --where \"step = 'draft'\"",
    ] == lines
    assert [line] == fit_example(line, len(line))
