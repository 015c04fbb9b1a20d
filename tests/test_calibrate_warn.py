"""
Calibrate's warnings about what a plan's repeat attempts rest on (`evidence_warnings`).

A hedge or retry assumes a fresh attempt escapes its route's tail: unconfirmed by repeat
attempts or paired calls, that is said before the plan is trusted; and a retry on the provider
of a route whose slow calls come in spells meets the same spell.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tailkit.calibration._warn import CONFIRM, evidence_warnings
from tailkit.config import Plan, Route, Step, Tokens
from tailkit.fit import TailKind, tail_kind
from tailkit.fit.lowlevel import hedge_evidence
from tailkit.text import name_parameters


ROUTES = {
    "openai/gpt-4.1": Route("openai", "gpt-4.1"),
    "openai/gpt-4.1-mini": Route("openai", "gpt-4.1-mini"),
    "azure/gpt-4.1": Route("azure", "gpt-4.1"),
}


def _plan(on_cutoff: str, **step: str) -> Plan:
    """
    One step on openai/gpt-4.1 that does ``on_cutoff`` at 20 s.
    """
    return Plan(
        workflow="w",
        deadline_s=60.0,
        routes=ROUTES,
        steps={
            "draft": Step(
                name="draft", route="openai/gpt-4.1", expected_tokens=Tokens(1000, 500),
                cutoff_s=20.0, on_cutoff=on_cutoff, **step,  # type: ignore[arg-type]
            )
        },
    )  # fmt: skip


def _stalls(*, spell: bool, seed: int = 0, **evidence: object) -> TailKind:
    """
    A route with 3 % independent 5x stalls, or a 2-hour slow spell in a day.
    """
    rng = np.random.default_rng(seed)
    n = 6000
    started = np.sort(rng.uniform(0, 24 * 3600, n))
    latency = rng.lognormal(np.log(5), 0.3, n)
    if spell:
        latency[(started > 10 * 3600) & (started < 12 * 3600)] *= 4
    else:
        latency[rng.random(n) < 0.03] *= 5
    return tail_kind(
        latency, output_tokens=rng.integers(50, 1000, n), started_at_s=started,
        **evidence,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_an_unconfirmed_escape_is_named_with_what_would_confirm_it(seed: int) -> None:
    """A hedge on a route that only looks transient: the route and the evidence to get."""
    kinds = {"openai/gpt-4.1": _stalls(spell=False, seed=seed)}

    (warning,) = evidence_warnings(_plan("hedge", hedge_route="azure/gpt-4.1"), kinds)

    assert warning.startswith(
        "step 'draft': the plan's hedge to azure/gpt-4.1 assumes a fresh attempt escapes the "
        "tail of route openai/gpt-4.1, but single calls only show that it looks transient"
    )
    assert warning.endswith(f"{name_parameters(CONFIRM)} would confirm it")
    assert "--" not in warning  # the library names parameters; the CLI renders flags
    flag = warning.render(lambda field: "--" + field.replace("_", "-"))  # type: ignore[attr-defined]
    assert flag.endswith("--map job_key=<your prompt id field>) would confirm it")


@pytest.mark.parametrize("name", ["hedges", "paired"])
def test_a_confirmed_escape_needs_no_warning(name: str) -> None:
    """Repeat attempts or paired calls that say transient: nothing to warn about."""
    kinds = {"openai/gpt-4.1": _stalls(spell=False, **{name: hedge_evidence(60, 45)})}

    assert () == evidence_warnings(_plan("hedge", hedge_route="azure/gpt-4.1"), kinds)


def test_a_plan_that_waits_rests_on_nothing() -> None:
    """No hedge, retry or downgrade: no warning, whatever the tail."""
    kinds = {"openai/gpt-4.1": _stalls(spell=True)}

    assert () == evidence_warnings(_plan("wait"), kinds)
    assert () == evidence_warnings(_plan("fail"), kinds)


@pytest.mark.parametrize("seed", range(3))
def test_a_retry_into_a_slow_spell_names_another_provider(seed: int) -> None:
    """Spells on openai: a retry there meets them; the warning names azure's route."""
    spells = _stalls(spell=True, seed=seed, hedges=hedge_evidence(60, 45))
    assert spells.spells
    kinds = {"openai/gpt-4.1": spells}

    (retry,) = evidence_warnings(_plan("retry"), kinds)
    (mini,) = evidence_warnings(_plan("downgrade", downgrade_route="openai/gpt-4.1-mini"), kinds)
    elsewhere = evidence_warnings(_plan("hedge", hedge_route="azure/gpt-4.1"), kinds)

    assert retry == (
        "step 'draft': route openai/gpt-4.1's slow calls come in spells, and the plan's retry "
        "goes to the same provider (openai): a retry on the same provider does not escape a "
        "spell; hedge or fail over to another provider (azure/gpt-4.1: set hedge_route)"
    )
    assert "plan's downgrade to openai/gpt-4.1-mini goes to the same provider" in mini
    assert () == elsewhere


def test_spells_and_no_evidence_give_both_warnings() -> None:
    """An unconfirmed escape and a same-provider retry into spells: two findings."""
    kinds = {"openai/gpt-4.1": _stalls(spell=True)}
    only = dataclasses.replace(_plan("retry"), routes={"openai/gpt-4.1": ROUTES["openai/gpt-4.1"]})

    unconfirmed, spell = evidence_warnings(only, kinds)

    assert "single calls only show that it looks transient" in unconfirmed
    assert spell.endswith("add a route of another provider serving gpt-4.1")


def test_routes_without_a_verdict_are_not_judged() -> None:
    """A route the kinds do not cover gives no warning (calibrate's own warnings cover it)."""
    assert () == evidence_warnings(_plan("retry"), {})
