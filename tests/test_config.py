"""
The plan file: the documented example parses, rules name line and fix, dump and parse agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tailkit.config import (
    Basis,
    Plan,
    PlanPrediction,
    Route,
    Step,
    StepPrediction,
    Tokens,
    load_plan,
    parse_plan,
)
from tailkit.errors import ConfigError


DOCUMENTED_EXAMPLE = """\
tailkit_plan: 1
workflow: account-brief
deadline_s: 120                 # end-to-end budget the caller gives us
hedge_budget: 0.05              # extra attempts / first attempts, all steps together
routes:                         # route name -> where its latency sample comes from
  openai/gpt-4.1:   {provider: openai,  model: gpt-4.1}
  bedrock/gpt-4.1:  {provider: bedrock, model: gpt-4.1}
  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}
steps:
  extract:
    depends_on: []
    required: true              # false: the run may succeed without it
    route: openai/gpt-4.1
    expected_tokens: {input: 9000, output: 900}   # picks the bucket
    idempotent: true            # false: never hedge or retry blindly
    # --- filled in by calibrate ---
    signal: total               # total | ttft: which clock the cutoff watches
    ttft_cutoff_s: 4.0          # no first token by then: stuck, hedge
    stall_cutoff_s: 6.0         # no chunk for this long mid-stream
    cutoff_s: 28.0              # total age at which the step acts
    on_cutoff: hedge            # hedge | retry | downgrade | fail | wait
    hedge_route: bedrock/gpt-4.1
    downgrade_route: openai/gpt-4.1-mini   # streaming but projected to overrun
    upgrade_route: null                   # output failed validation
    predicted: {p50_s: 11.8, p99_s: 26.1, hedge_rate: 0.05}
    basis: {calls: 5210, bucket: "in 4k-16k / out 600-1200", quantile: 0.95, censored: 0.031}
predicted: {p50_s: 45.0, p99_s: 92.0, miss_rate: 0.004, extra_attempts: 0.047}
"""
EXTRACT = Step(
    "extract", "openai/gpt-4.1", expected_tokens=Tokens(9000, 900), ttft_cutoff_s=4.0,
    stall_cutoff_s=6.0, cutoff_s=28.0, on_cutoff="hedge", hedge_route="bedrock/gpt-4.1",
    downgrade_route="openai/gpt-4.1-mini",
    predicted=StepPrediction(p50_s=11.8, p99_s=26.1, hedge_rate=0.05),
    basis=Basis(calls=5210, bucket="in 4k-16k / out 600-1200", quantile=0.95, censored=0.031),
)  # fmt: skip
ROUTES = {
    "openai/gpt-4.1": Route("openai", "gpt-4.1"),
    "bedrock/gpt-4.1": Route("bedrock", "gpt-4.1"),
    "openai/gpt-4.1-mini": Route("openai", "gpt-4.1-mini"),
}
PREDICTED = PlanPrediction(p50_s=45.0, p99_s=92.0, miss_rate=0.004, extra_attempts=0.047)

# A valid workflow to break one rule at a time; the line numbers below refer to it.
BASE = """\
tailkit_plan: 1
workflow: account-brief
deadline_s: 120
hedge_budget: 0.05
routes:
  openai/gpt-4.1: {provider: openai, model: gpt-4.1}
  bedrock/gpt-4.1: {provider: bedrock, model: gpt-4.1}
  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}
steps:
  extract:
    route: openai/gpt-4.1
    expected_tokens: {input: 9000, output: 900}
    cutoff_s: 28.0
    on_cutoff: hedge
    hedge_route: bedrock/gpt-4.1
  draft:
    depends_on: [extract]
    route: openai/gpt-4.1-mini
"""
_D = "    route: openai/gpt-4.1-mini\n"  # the last line: cases append fields of step draft to it
_PLAN_PRED = ("predicted: {p50_s: 50, p99_s: 90, miss_rate: 0.03, extra_attempts: 0.04, "
              "interval: {level: 0.95, p50_s: [49, 51], p99_s: [80, 99], ")  # fmt: skip
_ROUTES = "openai/gpt-4.1, bedrock/gpt-4.1, openai/gpt-4.1-mini"


def _problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_plan(text, source="plan.yaml")
    return str(caught.value)


def test_the_design_example_parses_to_the_dataclasses() -> None:
    """
    The documented example plan reads to exactly the documented values, routes in file order.
    """
    plan = parse_plan(DOCUMENTED_EXAMPLE)

    assert Plan("account-brief", 120.0, ROUTES, {"extract": EXTRACT}, predicted=PREDICTED) == plan
    assert list(ROUTES) == list(plan.routes)


def test_a_workflow_without_calibration_gets_the_defaults() -> None:
    """
    Only the user's fields given: the rest take their defaults; ints and 1e1 read as floats.
    """
    text = BASE.replace("hedge_budget: 0.05\n", "").replace("{input: 9000, output: 900}", "{}")
    plan = parse_plan(text.replace("cutoff_s: 28.0", "cutoff_s: 1e1\n    basis: null"))

    assert Step("draft", "openai/gpt-4.1-mini", depends_on=("extract",)) == plan.steps["draft"]
    assert (Tokens(), None, 10.0) == (
        plan.steps["extract"].expected_tokens, plan.steps["extract"].basis,
        plan.steps["extract"].cutoff_s,
    )  # fmt: skip
    assert (0.05, None, 120.0) == (plan.hedge_budget, plan.predicted, plan.deadline_s)
    assert isinstance(plan.deadline_s, float)


def test_merge_keys_share_fields_between_steps() -> None:
    """
    A `<<: *anchor` merge works, and a field given next to it overrides the merged one.
    """
    text = BASE.replace("  extract:\n", "  extract: &x\n")
    draft = parse_plan(text.replace("  draft:\n", "  draft:\n    <<: *x\n")).steps["draft"]

    assert ("openai/gpt-4.1-mini", 28.0, ("extract",)) == (
        draft.route, draft.cutoff_s, draft.depends_on
    )  # fmt: skip


def _dag(edges: dict[str, tuple[str, ...]]) -> Plan:
    steps = {n: Step(n, "r", depends_on=deps) for n, deps in edges.items()}
    return Plan("w", 10.0, {"r": Route("p", "m")}, steps)


def test_order_dependents_and_sinks_of_a_fan_out_and_join() -> None:
    """
    Dependencies come first, ties stay in file order; the last step and the loose one are sinks.
    """
    plan = _dag({"join": ("b", "a"), "b": ("root",), "tag": ("root",), "a": ("root",),
                 "root": (), "last": ("join",)})  # fmt: skip

    assert ("root", "b", "tag", "a", "join", "last") == plan.order()
    assert ("b", "tag", "a") == plan.dependents("root")
    assert ("tag", "last") == plan.sinks()
    with pytest.raises(KeyError):
        plan.dependents("nope")


def test_order_of_a_hand_built_cycle_is_refused() -> None:
    """
    A cyclic plan built without parse_plan cannot be ordered; the message names the steps.
    """
    with pytest.raises(ConfigError, match="steps a, b wait on each other in a cycle"):
        _dag({"a": ("b",), "b": ("a",)}).order()


# (line, text of BASE, replaced by, the message expected at that line)
_BROKEN = [
    (1, "tailkit_plan: 1\n", "", "tailkit_plan: missing: start the file with tailkit_plan: 1"),
    (1, "tailkit_plan: 1", "tailkit_plan: 2", "tailkit_plan = 2: the plan is newer than this "
     "tailkit (this tailkit reads plan version 1: upgrade tailkit)"),
    (1, "tailkit_plan: 1", "tailkit_plan: '1'", "tailkit_plan = '1': must be 1"),
    (1, "workflow: account-brief\n", "", "workflow: missing: name the workflow"),
    (1, "deadline_s: 120\n", "", "deadline_s: missing: give the run budget in seconds"),
    (1, BASE[BASE.index("routes:") : BASE.index("steps:")], "", "routes: missing: list the"),
    (1, BASE[BASE.index("steps:") :], "", "steps: missing: list the workflow's steps"),
    (9, BASE[BASE.index("steps:") :], "steps: {}", "steps = {}: must list at least one step"),
    (16, _D, "", f"steps.draft.route: missing: name the route of the step's first attempt (one "
     f"of the routes: {_ROUTES})"),
    (7, "{provider: bedrock, ", "{", "routes.bedrock/gpt-4.1.provider: missing"),
    (5, "hedge_budget: 0.05", "hedge_budget: 0.05\nhedge_budgt: 1",
     "hedge_budgt: unknown key (did you mean hedge_budget?)"),
    (6, "gpt-4.1}", "gpt-4.1, modle: x}", "routes.openai/gpt-4.1.modle: unknown key (did you "
     "mean model?)"),
    (13, "cutoff_s: 28.0", "cutof_s: 28.0", "steps.extract.cutof_s: unknown key (did you mean "
     "cutoff_s?)"),
    (12, "output: 900", "outptu: 900", "steps.extract.expected_tokens.outptu: unknown key (did "
     "you mean output?)"),
    (12, "input: 9000", "input: -1", "steps.extract.expected_tokens.input = -1: must be a whole "
     "number >= 0, or null"),
    (12, "output: 900", "output: 9.5", "steps.extract.expected_tokens.output = 9.5: must be a "),
    (3, "deadline_s: 120", "deadline_s: true", "deadline_s = true: must be a positive number"),
    (3, "deadline_s: 120", "deadline_s: 0", "deadline_s = 0: must be a positive number of "),
    (3, "deadline_s: 120", "deadline_s: .nan", "deadline_s = .nan: must be a positive number"),
    (2, "workflow: account-brief", "workflow: ''", "workflow = '': must be a non-empty string"),
    (4, "hedge_budget: 0.05", "hedge_budget: 1.5", "hedge_budget = 1.5: must be a share "
     "between 0 and 1"),
    (13, "cutoff_s: 28.0", "cutoff_s: -3.0", "steps.extract.cutoff_s = -3.0: must be a positive "
     "number of seconds, or null"),
    (14, "cutoff_s: 28.0", "cutoff_s: 28.0\n    ttft_cutoff_s: 28", "steps.extract.ttft_cutoff_s"
     " = 28: must be less than cutoff_s (28.0)"),
    (13, "cutoff_s: 28.0", "cutoff_s: 130", "steps.extract.cutoff_s = 130: must be less than "
     "deadline_s (120.0): a cutoff at or past the deadline never acts"),
    (14, "on_cutoff: hedge", "on_cutoff: hedgee", "steps.extract.on_cutoff = 'hedgee': must be "
     "one of the actions: hedge, retry, downgrade, fail, wait; did you mean hedge?"),
    (14, "    hedge_route: bedrock/gpt-4.1\n", "", "steps.extract.on_cutoff = 'hedge': hedge "
     "needs hedge_route"),
    (14, "on_cutoff: hedge", "on_cutoff: downgrade", "steps.extract.on_cutoff = 'downgrade': "
     "downgrade needs downgrade_route"),
    (15, "hedge_route: bedrock/", "hedge_route: bedrok/", "steps.extract.hedge_route = "
     f"'bedrok/gpt-4.1': must be one of the routes: {_ROUTES}, or null; did you mean "
     "bedrock/gpt-4.1?"),
    (15, "hedge_route: bedrock/", "hedge_route: openai/", "steps.extract.hedge_route = "
     "'openai/gpt-4.1': hedge routes go to an independent provider: pick another route"),
    (14, "gpt-4.1\n  draft:", "gpt-4.1\n    idempotent: false\n  draft:", "steps.extract."
     "on_cutoff = 'hedge': the step is not idempotent: a hedge could repeat its side effects"),
    (18, _D, "    route: openai/gpt-5\n", "steps.draft.route = 'openai/gpt-5': must be one of"),
    (17, "[extract]", "extract", "steps.draft.depends_on = 'extract': must be a list of step "
     "names ([] for none)"),
    (17, "[extract]", "[extract, 3]", "steps.draft.depends_on[1] = 3: must be a step name"),
    (17, "[extract]", "[extrac]", "steps.draft.depends_on[0] = 'extrac': no such step (did you "
     "mean extract?)"),
    (17, "[extract]", "[draft]", "steps.draft.depends_on[0] = 'draft': a step cannot depend on "),
    (17, "[extract]", "[extract, extract]", "steps.draft.depends_on[1] = 'extract': listed twice"),
    (12, "gpt-4.1\n    exp", "gpt-4.1\n    depends_on: [draft]\n    exp", "steps.extract."
     "depends_on: cycle extract -> draft -> extract: steps cannot wait on each other"),
    (16, "  draft:", "  '':", "steps.'': a name must not be blank"),
    (7, "  bedrock/gpt-4.1:", "  ' ':", "routes.' ': a name must not be blank"),
    (3, "workflow: account-brief", "workflow: a\nworkflow: b", "workflow: duplicate key (first "
     "at line 2): keep one"),
    (16, "  draft:", "  1:", "steps.1: a key must be a string: quote it ('1')"),
    (19, _D, _D + "    zzz: 1", "steps.draft.zzz: unknown key (known keys: route, depends_on, "),
    (19, _D, _D + "    predicted: {p50_s: 1, p99_s: 2, hedge_rate: 0, zz: 1}",
     "steps.draft.predicted.zz: unknown key (known keys: p50_s, p99_s, hedge_rate, interval)"),
    (19, _D, _D + "    basis: {calls: 1, bucket: b, quantile: null, censored: 0, n: 1}",
     "steps.draft.basis.n: unknown key"),
    (19, _D, _D + "    required: 'true'", "steps.draft.required = 'true': must be true or false"),
    (19, _D, _D + "    stall_cutoff_s: 120", "steps.draft.stall_cutoff_s = 120: must be less "
     "than deadline_s (120.0)"),
    (19, _D, _D + "    signal: ttfb", "steps.draft.signal = 'ttfb': must be one of the signals: "
     "total, ttft; did you mean ttft?"),
    (19, _D, _D + "    on_cutoff: fail", "steps.draft.on_cutoff = 'fail': fail needs cutoff_s: "
     "set it, or use on_cutoff: wait"),
    (19, _D, _D + "    signal: ttft", "steps.draft.signal = 'ttft': needs ttft_cutoff_s: set it, "
     "or watch signal: total"),
    (19, _D, _D + "    downgrade_route: x", "steps.draft.downgrade_route = 'x': must be one of"),
    (19, _D, _D + "    upgrade_route: x", "steps.draft.upgrade_route = 'x': must be one of the"),
    (21, _D, _D + "    idempotent: false\n    cutoff_s: 9\n    on_cutoff: retry",
     "steps.draft.on_cutoff = 'retry': the step is not idempotent: a retry could repeat"),
    (19, _D, _D + "    predicted: {p50_s: 5, p99_s: 4, hedge_rate: 1.5}",
     "steps.draft.predicted.p99_s = 4: must be at least p50_s (5.0)"),
    (19, _D, _D + "    predicted: {p50_s: -1, p99_s: 4, hedge_rate: 1.5}",
     "steps.draft.predicted.hedge_rate = 1.5: must be a share between 0 and 1"),
    (19, _D, _D + "    basis: {calls: -1, bucket: b, quantile: 2, censored: 0}",
     "steps.draft.basis.calls = -1: must be a whole number >= 0"),
    (19, _D, _D + "    basis: {calls: 1, bucket: b, quantile: 2, censored: 0}",
     "steps.draft.basis.quantile = 2: must be a share between 0 and 1, or null"),
    (19, _D, _D + "    basis: {calls: 1, bucket: b, quantile: 0.9}",
     "steps.draft.basis.censored: missing"),
    (19, _D, _D + "predicted: {p50_s: 1, p99_s: 2, miss_rate: 2, extra_attempts: 0}",
     "predicted.miss_rate = 2: must be a share between 0 and 1"),
    (19, _D, _D + _PLAN_PRED + "miss_rate: [0.05, 0.1], extra_attempts: [0, 0.1]}}",
     "predicted.interval.miss_rate = [0.05, 0.1]: must contain miss_rate (0.03): write [low, "
     "high] with low <= 0.03 <= high, or run tailkit calibrate again to write both"),
    (19, _D, _D + _PLAN_PRED + "miss_rate: [0.05, 0.01], extra_attempts: [0, 0.1]}}",
     "predicted.interval.miss_rate = [0.05, 0.01]: must be [low, high] with low <= high; swap "
     "them"),
    (19, _D, _D + _PLAN_PRED + "miss_rate: 0.03, extra_attempts: [0, 0.1]}}",
     "predicted.interval.miss_rate = 0.03: must be [low, high], two shares"),
    (19, _D, _D + _PLAN_PRED + "miss_rate: [0, 1.5], extra_attempts: [0, 0.1]}}",
     "predicted.interval.miss_rate = [0, 1.5]: must be [low, high], each a share between 0 and 1"),
    (19, _D, _D + _PLAN_PRED + "miss_rate: [0, 0.1]}}",
     "predicted.interval.extra_attempts: missing: add extra_attempts ([low, high])"),
    (19, _D, _D + _PLAN_PRED.replace("0.95", "95") + "miss_rate: [0, 0.1], "
     "extra_attempts: [0, 0.1]}}", "predicted.interval.level = 95: must be the intervals' "
     "coverage, between 0 and 1 (e.g. 0.95)"),
    (19, _D, _D + "    predicted: {p50_s: 1, p99_s: 2, hedge_rate: 0, interval: {level: 0.9, "
     "p50_s: [1, 1], p99_s: [-2, 3], hedge_rate: [0, 0]}}", "steps.draft.predicted.interval."
     "p99_s = [-2, 3]: must be [low, high], each a number of seconds >= 0 (.inf allowed)"),
    (19, _D, _D + "    predicted: {p50_s: 1, p99_s: 2, hedge_rate: 0, interval: {level: 0.9, "
     "p50_s: [1.5, 3], p99_s: [1, 3], hedge_rate: [0, 0]}}", "steps.draft.predicted.interval."
     "p50_s = [1.5, 3]: must contain p50_s (1.0): write [low, high] with low <= 1.0 <= high"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "old", "new", "message"), _BROKEN)
def test_each_rule_names_line_field_value_and_fix(
    line: int, old: str, new: str, message: str
) -> None:
    """
    Breaking one rule gives its message at the line of the field at fault.
    """
    assert old in BASE
    assert f"plan.yaml:{line}: {message}" in _problems(BASE.replace(old, new, 1))


def test_all_problems_are_reported_together_in_file_order() -> None:
    """
    Several broken fields give one message: a count, then one line each, sorted by line.
    """
    text = BASE.replace("deadline_s: 120", "deadline_s: -1").replace("cutoff_s: 28.0", "cutof: 1")
    text = text.replace("[extract]", "[nope]").replace("tailkit_plan: 1\n", "")

    assert (
        "plan.yaml: 5 problems in the plan:\n"
        "plan.yaml:1: tailkit_plan: missing: start the file with tailkit_plan: 1\n"
        "plan.yaml:2: deadline_s = -1: must be a positive number of seconds\n"
        "plan.yaml:12: steps.extract.cutof: unknown key (did you mean cutoff_s?)\n"
        "plan.yaml:13: steps.extract.on_cutoff = 'hedge': hedge needs cutoff_s: set it, or use "
        "on_cutoff: wait\n"
        "plan.yaml:16: steps.draft.depends_on[0] = 'nope': no such step (steps: extract)"
    ) == _problems(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workflow: [x\n", "plan.yaml:2: not valid YAML: expected ',' or ']', but got '<stream "
                           "end>' (while parsing a flow sequence at line 1)"),
        ("a:\n\tb: 1\n", "plan.yaml:2: not valid YAML: found character '\\t' that cannot start "
                          "any token: indent with spaces, not tabs"),
        ("a: 1\nb: \x07\n", "plan.yaml:2: not valid YAML: character '\\x07' is not allowed"),
        ("", "plan.yaml:1: (top): the plan is empty: it needs tailkit_plan, workflow, "),
        ("- 1\n", "plan.yaml:1: (top) = [1]: a plan is a mapping of tailkit_plan, workflow, "),
        ("- [1]\n", "plan.yaml:1: (top) = a list: a plan is a mapping of tailkit_plan, "),
        ("x: !!python/object:os.system {}\n", "plan.yaml:1: x: YAML tag !!python/object:os.system "
                                              "is not allowed in a plan: remove it"),
        ("x: !!python/name:os.system\n", "plan.yaml:1: cannot read value: could not determine a "
                                         "constructor for the tag"),
    ],
)  # fmt: skip
def test_text_that_is_not_a_plan_is_refused_with_its_line(text: str, message: str) -> None:
    """
    Invalid YAML, an empty document, a list or an unsafe tag: the message names the line.
    """
    assert message in _problems(text)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("plan.yaml", BASE.replace("deadline_s: 120", "deadline_s: 0").encode(),
         "plan.yaml:3: deadline_s = 0: must be a positive number of seconds"),
        ("missing.yaml", None, "missing.yaml: no such plan file: check the path"),
        ("broken.yaml", b"steps: [\n", "broken.yaml:2: not valid YAML: expected the node content"),
        ("binary.yaml", b"\xff\xfe", "binary.yaml: not a text file (byte 0 is not UTF-8)"),
        ("folder", b"", "folder: is a folder, not a plan file"),
    ],
)  # fmt: skip
def test_load_plan_names_the_file_in_every_problem(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    """
    A bad plan, a missing file, invalid YAML, a binary file or a folder: the path comes first.
    """
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)

    with pytest.raises(ConfigError) as caught:
        load_plan(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


def test_load_plan_reads_a_file(tmp_path: Path) -> None:
    """
    A plan file loads, from a Path or a str.
    """
    path = tmp_path / "plan.yaml"
    path.write_text(DOCUMENTED_EXAMPLE, encoding="utf-8")

    assert parse_plan(DOCUMENTED_EXAMPLE) == load_plan(path) == load_plan(str(path))
