"""
The analysis packages speak one vocabulary.

One interval type, one LEVEL, parameters not flags, and a public surface with its building
blocks apart.
"""

from __future__ import annotations

import ast
import importlib
import math
import re

from pathlib import Path

import pytest

from tailkit.config import Plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.estimate import Estimate
from tailkit.fit import empirical_quantiles, fit_lognormal
from tailkit.simulation.lowlevel import with_overrides
from tailkit.text import Advice, name_parameters
from tests._source import string_constants

from .conftest import ROOT


PACKAGES = ("fit", "simulation", "calibration", "tails")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / "tailkit" / package).glob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_library_string_names_a_command_line_flag(package: str) -> None:
    """Messages, warnings and notes name parameters; the CLI spells them as flags."""
    found = [
        f"{path.name}:{line}: {text!r}"
        for path in _sources(package)
        for line, text in string_constants(path)
        if re.search(r"(^|[\s(])--[a-z]", text)
    ]
    assert [] == found


def test_one_interval_type_and_one_level() -> None:
    """No analysis module defines its own interval class or its own LEVEL."""
    defined = []
    for package in PACKAGES:
        for path in _sources(package):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name in ("Estimate", "Interval"):
                    defined.append(f"{path.name}: class {node.name}")
                targets = node.targets if isinstance(node, ast.Assign) else []
                if any(isinstance(t, ast.Name) and t.id == "LEVEL" for t in targets):
                    defined.append(f"{path.name}: LEVEL")
    assert [] == defined


def test_fits_carry_the_estimate_with_its_value_and_size() -> None:
    """A fit's interval is an Estimate: the value it bounds, the calls and the method."""
    (p90,) = empirical_quantiles([float(i) for i in range(1, 101)], qs=(0.9,))
    fit = fit_lognormal([math.exp(0.1 * i) for i in range(1, 60)])

    assert isinstance(p90.interval, Estimate)
    assert (p90.value, 100, "order statistics") == (
        p90.interval.value, p90.interval.n, p90.interval.method,
    )  # fmt: skip
    assert p90.value in p90.interval
    assert (fit.mu, fit.sigma) == (fit.mu_interval.value, fit.sigma_interval.value)
    assert fit.quantile(0.99) == fit.quantile_interval(0.99).value


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_and_building_blocks_are_apart(package: str) -> None:
    """Each package's __all__ and its low-level module's are disjoint, and every name loads."""
    public = importlib.import_module(f"tailkit.{package}")
    low = importlib.import_module(f"tailkit.{package}.lowlevel")

    assert set() == set(public.__all__) & set(low.__all__)
    assert "may change" in (low.__doc__ or "")
    for module in (public, low):
        assert sorted(set(module.__all__)) == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_no_other_package_imports_an_analysis_private_module() -> None:
    """Other packages, benchmarks and notebooks import the public or the low-level names."""
    private = re.compile(r"(from|import) tailkit\.(fit|simulation|calibration|tails)\._\w+")
    found = []
    for path in [
        *(ROOT / "tailkit").rglob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "notebooks").glob("*.ipynb"),
    ]:
        inside = path.relative_to(ROOT / "tailkit").parts[0] if "tailkit" in path.parts else ""
        for match in private.finditer(path.read_text(encoding="utf-8")):
            if match[2] != inside:
                found.append(f"{path.relative_to(ROOT)}: {match[0]}")
    assert [] == found


def test_an_error_names_the_parameter_and_the_cli_its_flag() -> None:
    """`with_overrides(budget=2.0)` names budget; rendered for the CLI it names --budget."""
    with pytest.raises(ConfigError) as err:
        with_overrides(_plan(), deadline_s=None, budget=2.0)

    assert ("budget", 2.0) == (err.value.field, err.value.value)
    assert str(err.value).startswith("budget must be between 0 and 1")
    assert err.value.render(_flag).startswith("--budget must be between 0 and 1")
    assert err.value.fix is not None
    assert err.value.fix in str(err.value)


def test_advice_reads_parameters_and_renders_flags() -> None:
    """An Advice is the str with parameter names; render spells them; braces of YAML stay."""
    advice = Advice("lower {min_calls}, or set {input_edges} ({input: 100} stays)")

    assert "lower min_calls, or set input_edges ({input: 100} stays)" == advice
    assert "lower --min-calls, or set --input-edges ({input: 100} stays)" == advice.render(_flag)
    assert advice.render(_flag) == name_parameters(advice.template, _flag)
    assert isinstance(advice, str)


def _plan() -> Plan:
    return parse_plan(
        "tailkit_plan: 1\nworkflow: w\ndeadline_s: 60\nhedge_budget: 0.05\n"
        "routes:\n  a/m: {provider: a, model: m}\nsteps:\n  s:\n    route: a/m\n"
    )
