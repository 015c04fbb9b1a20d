"""
File names as DuckDB's readers take them, and back.

DuckDB's readers expand ``*``, ``?`` and ``[…]`` in a path (``x*.jsonl`` also reads
``xy.jsonl``). Formats build their SQL from the path they are given, so ingest gives them the
name with each such character in a character class of its own, which matches only itself; a
format that opens the file from Python turns it back with `real_path`.
"""

from __future__ import annotations

import re


_GLOB_CHARS = {"*": "[*]", "?": "[?]", "[": "[[]"}
_ESCAPED = re.compile(r"\[([*?[])\]")


def sql_path(path: str) -> str:
    """
    ``path`` as DuckDB's readers must be given it to read that one file and no other.
    """
    return "".join(_GLOB_CHARS.get(ch, ch) for ch in path)


def real_path(path: str) -> str:
    """
    The file name `sql_path` was made from (``real_path(sql_path(p)) == p``).
    """
    return _ESCAPED.sub(r"\1", path)
