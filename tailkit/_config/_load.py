"""
Read a plan from a file or a string: YAML, then every rule of the plan schema (`tailkit.config`).
"""

from __future__ import annotations

import os

from tailkit._config._model import Plan
from tailkit._config._report import Report
from tailkit._config._validate import build_plan
from tailkit._config._yaml import read
from tailkit.errors import ConfigError


def parse_plan(text: str, *, source: str = "<plan>") -> Plan:
    """
    Read and check a plan from YAML text.

    Args:
        text: The YAML plan document.
        source: What to call the document in messages, usually its path.

    Returns:
        The plan, valid in every field and across fields.

    Raises:
        ConfigError: The text is not valid YAML, or not a valid plan. The message has one line
            per problem, in file order, each with its line number, field, value and fix, e.g.
            ``plan.yaml:14: steps.extract.cutoff_s = -3.0: must be a positive number of
            seconds``.
    """
    report = Report(source)
    plan = build_plan(read(text, report), report)
    if plan is None or report.bad():
        raise ConfigError(report.message())
    return plan


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """
    Read and check a plan file.

    Args:
        path: The YAML file (UTF-8).

    Returns:
        The plan, valid in every field and across fields.

    Raises:
        ConfigError: The file cannot be read, is not valid YAML, or is not a valid plan; the
            message names the file and the line (see `parse_plan`).
    """
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        msg = f"{source}: no such plan file: check the path (tailkit calibrate writes one)"
        raise ConfigError(msg) from None
    except IsADirectoryError:
        msg = f"{source}: is a folder, not a plan file: give the path of the YAML file"
        raise ConfigError(msg) from None
    except UnicodeDecodeError as exc:
        msg = f"{source}: not a text file (byte {exc.start} is not UTF-8): save the plan as UTF-8"
        raise ConfigError(msg) from None
    except OSError as exc:
        msg = f"{source}: cannot read the plan file: {exc.strerror or exc}"
        raise ConfigError(msg) from None
    return parse_plan(text, source=source)
