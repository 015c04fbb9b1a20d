"""
Values a folder layout carries: ``--path-template '{model}/{provider}/*.jsonl'``.

A benchmark tree often names the model (or the provider, the run) in its folders and leaves it
out of the rows. A path template says where: it is matched against the end of each file's path,
one ``/``-separated part against one part, and each ``{column}`` gives that call-record column
one value for every row of the file, as ``--set column=VALUE`` would for a single file. So a
tree with one folder per model is one command, not one ``--set model=…`` per folder.

Syntax: ``{name}`` is a call-record column and matches one or more characters within a path
part (``{provider}_{size}.json`` splits ``groq_70b.json`` at the first ``_``); ``*`` matches any
characters within a part, ``?`` one character, and ``**`` any number of whole parts; anything
else matches itself. The template matches the last parts of the path, so
``{model}/*.jsonl`` reads ``bench/gpt-4o/run1.jsonl`` as model ``gpt-4o`` wherever ``bench``
is. A file that does not match is an error naming the file; the other files are read.

The same pattern is compiled once for Python (the value of a file read alone) and once for
DuckDB's RE2 (the value of each row when many files are read in one scan, from the file name
the reader gives); the expression uses only what both engines read alike (literal characters,
``[^/]`` classes, lazy repeats, named groups).
"""

from __future__ import annotations

import difflib
import re

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tailkit.errors import InputFileError, MappingError
from tailkit.formats.lowlevel import literal
from tailkit.record import SOURCE_COLUMNS


_FIELD = re.compile(r"\{([^{}]*)\}")
_COLUMNS = tuple(c.name for c in SOURCE_COLUMNS)


@dataclass(frozen=True, slots=True)
class PathTemplate:
    """
    A parsed ``--path-template``: the columns it fills and the pattern that finds them.

    Args:
        text: The template as given.
        fields: The call-record columns it names, in order.
        pattern: The regular expression matched against the end of a file's path.
    """

    text: str
    fields: tuple[str, ...]
    pattern: str

    @classmethod
    def parse(cls, text: str, *, taken: Mapping[str, str] | None = None) -> PathTemplate:
        """
        Check and compile a template.

        Messages do not quote the template: its ``{column}`` fields would read as parameter
        tokens (`tailkit.text.name_parameters`).

        Args:
            text: The template.
            taken: Columns other options already fill (``mapping`` / ``sets``), to the
                option's name.

        Raises:
            MappingError: No column in it, a name that is no call-record column, a column
                named twice or already filled by another option, or an unpaired brace.
        """
        fields: list[str] = []
        out: list[str] = []
        pos = 0
        body = text.strip("/")
        for match in _FIELD.finditer(body):
            out.append(_glob(body[pos : match.start()]))
            name = match.group(1)
            if name not in _COLUMNS:
                msg = (
                    f"{{field}} names {name!r}, which is not a call-record column"
                    f"{_suggest(name)}; valid: {', '.join(_COLUMNS)}"
                )
                raise MappingError(msg, field="path_template", value=text)
            if name in fields:
                msg = f"{{field}} names {name!r} twice; keep one"
                raise MappingError(msg, field="path_template", value=text)
            if taken and name in taken:
                msg = f"{{field}} and {{{taken[name]}}} both fill {name!r}; keep one"
                raise MappingError(msg, field="path_template", value=text)
            fields.append(name)
            out.append(f"(?P<{name}>[^/]+?)")
            pos = match.end()
        out.append(_glob(body[pos:]))
        if not fields:
            msg = (
                "{field} names no column: put in braces the call-record column that a folder "
                "or file name gives (one folder per model: the word model in braces, then "
                "/*.jsonl)"
            )
            raise MappingError(msg, field="path_template", value=text)
        return cls(text, tuple(fields), "(?:^|/)" + "".join(out) + "$")

    def values(self, path: Path) -> dict[str, str]:
        """
        The column values the template reads from ``path``.

        Raises:
            InputFileError: The path does not match the template.
        """
        match = re.search(self.pattern, path.as_posix())
        if match is None:
            msg = (
                f"{path}: its path does not match {{field}} (matched against the last parts "
                "of the path); leave the file out of the paths, or change the template"
            )
            raise InputFileError(msg, field="path_template", value=self.text)
        return {name: match.group(name) for name in self.fields}

    def value_sql(self, file_column: str, name: str) -> str:
        """
        SQL for the value of column ``name`` in the file named by ``file_column``.
        """
        group = re.compile(self.pattern).groupindex[name]
        return f"regexp_extract({file_column}, {literal(self.pattern)}, {group})"


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, _COLUMNS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _glob(part: str) -> str:
    """
    The regular expression of a template's text between two ``{column}`` fields.
    """
    if "{" in part or "}" in part:
        msg = "{field} has a brace without its pair; write each column in braces"
        raise MappingError(msg, field="path_template", value=part)
    out = []
    i = 0
    while i < len(part):
        if part.startswith("**/", i):
            out.append("(?:[^/]+/)*?")
            i += 3
        elif part.startswith("**", i):
            out.append(".*?")
            i += 2
        elif part[i] == "*":
            out.append("[^/]*?")
            i += 1
        elif part[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(part[i]))
            i += 1
    return "".join(out)
