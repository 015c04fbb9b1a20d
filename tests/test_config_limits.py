"""
Plan YAML is read in bounded memory: alias bombs and aliases inside themselves are refused at once.
"""

from __future__ import annotations

import tracemalloc

from pathlib import Path

import pytest

from tailkit.config import load_plan, parse_plan
from tailkit.errors import ConfigError


def _bomb(*, merge: bool) -> str:
    """
    Nine levels of nine aliases each: 9**9 values once written out, under 400 bytes of YAML.
    """
    if merge:
        lines = ["a: &a {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    else:
        lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        refs = ",".join([f"*{previous}"] * 9)
        lines.append(f"{name}: &{name} {{<<: [{refs}]}}" if merge else f"{name}: &{name} [{refs}]")
        previous = name
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("merge", [False, True], ids=["lists", "merge-keys"])
def test_an_alias_bomb_is_refused_at_once_in_little_memory(tmp_path: Path, merge: bool) -> None:
    """
    A 'billion laughs' plan fails with a ConfigError naming the alias's line, using under 4 MB.
    """
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(merge=merge), encoding="utf-8")
    assert path.stat().st_size < 400
    import yaml  # noqa: F401  # imported before measuring: its import is not the plan's memory

    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as caught:
            load_plan(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    message = str(caught.value)
    assert message.startswith(f"{path}:{5 if merge else 6}: the aliases up to this *")
    assert "more than the 100,000 a plan may take through aliases" in message
    assert peak < 4_000_000


@pytest.mark.parametrize(
    "text",
    ["a: &a [1, *a]\n", "a: &a {b: *a}\n", "x: 1\na: &a\n  <<: *a\n"],
    ids=["list", "mapping", "merge"],
)
def test_an_alias_inside_the_value_it_names_is_refused(text: str) -> None:
    """
    An alias to a value that contains it never ends: refused with its line, not a RecursionError.
    """
    with pytest.raises(ConfigError) as caught:
        parse_plan(text, source="p.yaml")

    line = text.count("\n")
    assert str(caught.value) == (
        f"p.yaml:{line}: the alias *a is inside the value it names, so it never ends: "
        "write the value out"
    )


def test_many_merge_keys_in_an_ordinary_plan_still_load() -> None:
    """
    500 steps that each merge a shared step (`<<: *shared`) load: the bound is far from them.
    """
    shared = (
        "  s0: &shared\n    route: r\n    expected_tokens: {input: 9000, output: 900}\n"
        "    cutoff_s: 28.0\n    on_cutoff: retry\n"
        "    basis: {calls: 5210, bucket: all, quantile: 0.95, censored: 0.031}\n"
    )
    steps = "".join(
        f"  s{i}:\n    <<: *shared\n    depends_on: [s{i - 1}]\n" for i in range(1, 500)
    )
    text = (
        "tailkit_plan: 1\nworkflow: w\ndeadline_s: 60\nroutes:\n  r: {provider: p, model: m}\n"
        "steps:\n" + shared + steps
    )

    plan = parse_plan(text)

    assert len(plan.steps) == 500
    assert plan.steps["s499"].cutoff_s == 28.0
    assert plan.steps["s499"].depends_on == ("s498",)


@pytest.mark.parametrize(("copies", "refused"), [(10_000, False), (10_001, True)])
def test_the_alias_bound_is_exact(copies: int, refused: bool) -> None:
    """
    Aliases may bring in 100,000 values (here 10,000 copies of a 10-value list), not one more.
    """
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [" + ", ".join(["*a"] * copies) + "]\n"

    with pytest.raises(ConfigError) as caught:
        parse_plan(text, source="p.yaml")

    assert ("through aliases" in str(caught.value)) is refused


def test_safe_load_bounded_refuses_a_bomb_and_reads_the_rest_as_safe_load() -> None:
    """
    The loader other YAML inputs can share: the same bound, else what yaml.safe_load gives.
    """
    import yaml

    from tailkit.config import safe_load_bounded

    with pytest.raises(ConfigError, match=r"^profile.yaml:5: the aliases up to this \*d "):
        safe_load_bounded(_bomb(merge=True), "profile.yaml")
    text = "d: &d {a: 1, b: [x, 2.5]}\nm: {<<: *d, b: 3}\nl: [*d, *d]\n"
    assert safe_load_bounded(text, "p.yaml") == yaml.safe_load(text)
