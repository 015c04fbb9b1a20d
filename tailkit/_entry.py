"""
The ``tailkit`` console script: checks for the ``analysis`` extra before loading the CLI.

Standard library only, so that a bare ``pip install tailkit`` gets a one-line answer instead of
a traceback.
"""

from __future__ import annotations

import importlib.util
import sys


_NEEDED = ("duckdb", "typer", "rich", "pyarrow", "xxhash")


def missing_modules() -> list[str]:
    """
    The modules of the ``analysis`` extra that cannot be imported here.
    """
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def main() -> int:
    """
    Run the CLI, or explain which extra to install.
    """
    missing = missing_modules()
    if missing:
        print(
            f"Error: the tailkit command needs the 'analysis' extra ({', '.join(missing)} "
            "not installed): pip install 'tailkit[analysis]'",
            file=sys.stderr,
        )
        return 1
    from tailkit.cli import app

    app()
    return 0


if __name__ == "__main__":
    sys.exit(main())
