"""
check, replay and report speak tailkit's one vocabulary.

One interval type at one default level, one quantile, one way of writing a number, and
parameters rather than flags.
"""

from __future__ import annotations

import ast
import math
import re

from pathlib import Path

import pytest

from tailkit import estimate
from tailkit.check import observe
from tailkit.check.lowlevel import figure_text, observed_text, rate, ratio
from tailkit.errors import ConfigError
from tailkit.fit import quantile
from tailkit.replay._fidelity import fidelity
from tests._source import string_constants


PACKAGES = [Path(__file__).resolve().parent.parent / "tailkit" / name
            for name in ("check", "replay", "report")]  # fmt: skip
FLAG = re.compile(r"(?<![\w-])--[a-z]")
ARGUMENT = re.compile(r"--[a-z][a-z-]*")  # a string that is one flag: a subprocess's argv


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in package.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_library_string_names_a_flag(path: Path) -> None:
    """Messages, notes and advice name parameters; the command line spells them as flags."""
    strings = [text for _, text in string_constants(path)]
    named = [s for s in strings if FLAG.search(s) and not ARGUMENT.fullmatch(s)]
    assert [] == named


@pytest.mark.parametrize("path", _modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_default_level_is_defined_once_in_tailkit_estimate(path: Path) -> None:
    """No module of check, replay or report assigns its own LEVEL."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assigned = [
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id == "LEVEL"
    ]
    assert [] == assigned


def test_observed_figures_are_the_one_estimate_at_their_level() -> None:
    """A rate or a ratio read at 99 % is a `tailkit.estimate.Estimate` that says 99 %."""
    share, per = rate(3, 40, level=0.99), ratio(5, 100)

    assert isinstance(share, estimate.Estimate)
    assert (0.99, estimate.LEVEL) == (share.level, per.level)
    assert share.value in share


def test_replay_timing_quantiles_are_type_7() -> None:
    """The replay's median and p95 timing errors are `tailkit.fit.quantile`'s "linear" ones."""
    errors = [0.004, -0.002, 0.010, 0.001, 0.030, 0.002, 0.003]
    found = fidelity(time_scale=0.5, smallest_cutoff_s=2.0, lead_s=0.0, errors_s=errors,
                     loop_lag_s=[0.0, 0.001, 0.02])  # fmt: skip

    assert found.bias_s == pytest.approx(quantile(errors, 0.5) / 0.5)
    assert found.p95_s == pytest.approx(quantile([abs(e) for e in errors], 0.95) / 0.5)
    assert found.loop_lag_s == pytest.approx(quantile([0.0, 0.001, 0.02], 0.99) / 0.5)


def test_infinite_is_written_as_infinity_and_missing_as_a_dash() -> None:
    """∞ for an unbounded figure, - for none, in check's lines and the replay's timing line."""
    unbounded = estimate.Estimate(math.inf, 88.0, math.inf, 50, "Kaplan-Meier")
    no_cutoff = fidelity(time_scale=1.0, smallest_cutoff_s=math.inf, lead_s=0.0,
                         errors_s=[0.001], loop_lag_s=[0.0])  # fmt: skip

    assert ("∞", "-") == (figure_text("p99_s", math.inf), figure_text("miss_rate", math.nan))
    assert "more than 88.00 s" == observed_text("p99_s", unbounded)
    assert "= - of the smallest cutoff (∞; allowed 2.0%)" in no_cutoff.describe()


def test_a_bad_level_is_an_error_about_the_level_parameter() -> None:
    """The error carries the parameter; the command line renders it as its flag."""
    with pytest.raises(ConfigError) as caught:
        observe("plan.yaml", ["ledger.jsonl"], level=95.0)

    assert ("level", 95.0) == (caught.value.field, caught.value.value)
    assert str(caught.value).startswith("level must be a confidence level in (0, 1)")
    assert caught.value.render(lambda f: f"--{f}").startswith("--level must be")
