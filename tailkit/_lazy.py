"""
Lazy re-exports: a package names its public objects without importing the modules behind them.

`tailkit` and `tailkit.adapters` re-export names whose modules are costly (DuckDB behind
`tailkit.Store`) or need an extra (httpx behind `tailkit.adapters.chat_attempt`). PEP 562's
module ``__getattr__`` loads the module on the first access to such a name, so ``import
tailkit`` stays cheap and works without the extras.
"""

from __future__ import annotations

import importlib

from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """
    A module ``__getattr__`` that imports ``where[name]`` and returns its attribute ``name``.

    Args:
        package: The package's name, for the `AttributeError` of any other name.
        where: Each re-exported name and the module that defines it.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 - it is the module's __getattr__
        module = where.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        return getattr(importlib.import_module(module), name)

    return __getattr__
