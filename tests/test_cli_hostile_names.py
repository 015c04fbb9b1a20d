"""
Names from the data print as text in every command: no markup read, no control character sent.

Behind a gateway, whoever sends requests chooses the model string; a step, a route, a file and a
workflow are named by whoever writes them. One small store holds calls whose provider and model
names are rich markup (``[/]``, ``[link=…]``), escape sequences, C1 controls, a bidi override, a
newline, a carriage return, an emoji code, a flag, format placeholders, wide characters and 500
characters; every command that prints names runs on it as a user would (piped, ``COLUMNS=80``)
and must exit cleanly, send no control character, draw no link, and show each name whole.
"""

from __future__ import annotations

import dataclasses
import io
import json
import unicodedata

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rich.console import Console
from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.ledger import AttemptRecord, JsonlSink, Ledger
from tailkit.text import printable
from tests import test_races


WIDE = "漢字モデル-70b"  # two terminal cells a character
MODELS = (
    "[/]",
    "[link=https://evil.example]click[/link]",
    "a\x1b[31mred\x1b]0;title\x07b\x1b]8;;https://evil.example\x1b\\",
    "x\u202eevil\nforged row\rcr\x9b31m\x85",
    "--x",
    "%s{}{0}",
    ":fire:",
    "tag\U000e0041x\xad",  # invisible: would print as "tagx"
    WIDE,
    "meta-llama/Llama-2-70b-chat-hf-" + "x" * 460 + "-70b",  # 500 characters
)
PROVIDERS = ("[b]prov[/b]", "openai")
STEPS = {"first": "[/]", "second": "s\x1b[2Jtep\u202e\x07", "third": "--x", "fourth": ":fire:"}
WORKFLOW = "[bold]wf[/] \x1b]8;;https://evil.example\x1b\\"
FILE = "calls [b] \x1b[2J\x07\nx.jsonl"  # a file name is data too ("/" cannot be in one)
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "xterm-256color"}

# What must never reach the terminal: a control (C0 but the line break, DEL, C1), a format
# character (bidi overrides, zero-width, tags), a line or paragraph separator, a surrogate.
HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
runner = CliRunner()


def _route(n: int) -> tuple[str, str]:
    return PROVIDERS[n % 2], MODELS[n]


def _calls(path: Path) -> Path:
    """
    250 calls per hostile route (lognormal, with TTFT and tokens), and one row to reject.
    """
    import numpy as np

    rng = np.random.default_rng(32)
    rows: list[dict[str, Any]] = []
    for n in range(len(MODELS)):
        provider, model = _route(n)
        for i in range(250):
            total = float(rng.lognormal(0.0, 0.5))
            rows.append({
                "call_id": f"c{n}-{i}", "provider": provider, "model": model, "total_s": total,
                "ttft_s": total / 4, "input_tokens": 500, "output_tokens": 100,
                "started_at": (T0 + timedelta(seconds=i)).isoformat(),
            })  # fmt: skip
    rows.append({"call_id": "bad", "provider": PROVIDERS[0], "model": MODELS[2], "total_s": -1})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _workflow(path: Path) -> Path:
    """
    A workflow whose name, routes and steps are hostile, over the store's hostile routes.
    """
    routes = {f"route {MODELS[n]}": {"provider": p, "model": m}
              for n, (p, m) in enumerate(map(_route, range(4)))}  # fmt: skip
    names = list(routes)
    steps: dict[str, Any] = {
        STEPS["first"]: {"route": names[0], "hedge_route": names[1]},
        STEPS["second"]: {"route": names[2], "depends_on": [STEPS["first"]]},
        STEPS["third"]: {"route": names[3], "depends_on": [STEPS["first"]]},
        STEPS["fourth"]: {"route": names[1], "depends_on": [STEPS["second"]], "required": False},
    }
    for step in steps.values():
        step["expected_tokens"] = {"input": 500, "output": 100}
    document = {"tailkit_plan": 1, "workflow": WORKFLOW, "deadline_s": 30, "hedge_budget": 0.05,
                "routes": routes, "steps": steps}  # fmt: skip
    path.write_text(json.dumps(document), encoding="utf-8")  # JSON is YAML
    return path


def run(*args: object) -> Any:
    """
    Run a command as a pipe would (stdout not a terminal, ``COLUMNS=80``); its result.
    """
    return runner.invoke(app, [str(a) for a in args], env=ENV)


def assert_safe(output: str) -> None:
    """
    No control character, no live link, no rich markup error in ``output``.
    """
    bad = sorted({f"U+{ord(c):04X}" for c in set(output) - {"\n"}
                  if unicodedata.category(c) in HIDDEN})  # fmt: skip
    assert not bad, f"control characters reach the terminal: {bad}\n{output}"
    assert "MarkupError" not in output
    assert "Traceback" not in output


def assert_named(output: str, *names: str) -> None:
    """
    Each name shows whole, as `printable` spells it, on one line, and nothing is cut with "…".
    """
    for name in names:
        assert printable(name) in output, f"{printable(name)!r} not shown whole in:\n{output}"
    assert "…" not in output, output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """
    The store with the hostile calls (ingested by the command), its workflow and its plan.
    """
    where = tmp_path_factory.mktemp("hostile")
    folder = where / "logs"
    folder.mkdir()
    source = _calls(folder / FILE)
    db = where / "calls.duckdb"
    ingested = run("ingest", folder, "--db", db)
    plan = where / "plan.yaml"
    calibrated = run(
        "calibrate", _workflow(where / "workflow.yaml"), "--out", plan, "--db", db,
        "--runs", 300, "--check-runs", 600, "--replicates", 0, "--min-calls", 100,
    )  # fmt: skip
    return SimpleNamespace(
        where=where, source=source, db=db, plan=plan, ingested=ingested, calibrated=calibrated
    )


def test_ingest_prints_file_and_route_names_as_text(world: SimpleNamespace) -> None:
    """`ingest`: the file's name and every route show whole and inert; the bad row is counted."""
    result = world.ingested
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, FILE, *(f"{p}/{m}" for p, m in map(_route, range(len(MODELS)))))
    # A newline in a name cannot forge a row: one line per route, as many as routes.
    assert sum(line.startswith(PROVIDERS) for line in result.output.splitlines()) == len(MODELS)


def test_summary_piped_shows_names_whole_and_inert(world: SimpleNamespace) -> None:
    """`summary` piped: names whole (never cut in the middle or at the end), no escape codes."""
    result = run("summary", "--db", world.db)
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, *MODELS)


def test_summary_aligns_wide_characters_by_cells(world: SimpleNamespace) -> None:
    """A CJK model id fills two cells a character: its row's numbers line up with the header."""
    lines = run("summary", "--db", world.db).output.splitlines()
    from rich.cells import cell_len

    header = next(line for line in lines if line.startswith("route"))
    wide = next(line for line in lines if WIDE in line)
    assert cell_len(wide) == cell_len(header)


def test_summary_json_keeps_names_exact(world: SimpleNamespace) -> None:
    """`summary --json` carries each name as it was sent: JSON escapes control characters."""
    result = run("summary", "--db", world.db, "--json")
    assert result.exit_code == 0, result.output
    assert {r["model"] for r in json.loads(result.output)["routes"]} == set(MODELS)


def test_rejects_shows_the_raw_row_inert(world: SimpleNamespace) -> None:
    """`rejects`: the file, reason and raw text of a hostile row, with escapes spelt out."""
    result = run("rejects", "--db", world.db)
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert printable(FILE) in result.output


@pytest.mark.parametrize("fits", [False, True], ids=["table", "fits"])
def test_stats_prints_every_group_whole(world: SimpleNamespace, *, fits: bool) -> None:
    """`stats` (and `--fits`): no markup crash, every model whole on one line, nothing cut."""
    result = run("stats", "--db", world.db, "--bucket", "none", *(["--fits"] if fits else []))
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, *MODELS, *PROVIDERS)


def test_stats_json_keeps_names_exact(world: SimpleNamespace) -> None:
    """`stats --json`: the table's and the verdicts' names are the data's, byte for byte."""
    result = run("stats", "--db", world.db, "--bucket", "none", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {r["model"] for r in doc["table"]} == set(MODELS)
    assert {r["model"] for r in doc["verdicts"]} == set(MODELS)


def test_calibrate_prints_steps_routes_and_warnings_as_text(world: SimpleNamespace) -> None:
    """`calibrate`: the plan table, notes, warnings and the path show hostile names inert."""
    result = world.calibrated
    assert result.exit_code == 0, result.output
    assert world.plan.exists()
    assert_safe(result.output)
    assert_named(result.output, WORKFLOW, *STEPS.values(), *(f"route {m}" for m in MODELS[:4]))


def test_simulate_prints_the_workflow_name_as_text(world: SimpleNamespace) -> None:
    """`simulate`: the policy table's title holds the workflow's name, inert."""
    result = run("simulate", world.plan, "--db", world.db, "--runs", 500, "--min-calls", 100)
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, WORKFLOW)


def test_check_prints_step_names_as_text(world: SimpleNamespace) -> None:
    """`check` on a ledger of the hostile plan's steps: a verdict, names inert."""
    ledger = world.where / "ledger.jsonl"
    with Ledger(JsonlSink(ledger)) as sink:
        for run_no in range(30):
            start = T0 + timedelta(minutes=run_no)
            for n, step in enumerate(STEPS.values()):
                provider, model = _route((0, 2, 3, 1)[n])  # each step's route in _workflow
                sink.write(AttemptRecord(
                    call_id=f"r{run_no}-{n}", step=step, attempt=0, role="primary",
                    provider=provider, model=model, run_id=f"r{run_no}",
                    idempotency_key=f"r{run_no}-{n}", started_at=start + timedelta(seconds=2 * n),
                    status="ok", total_s=1.0, winner=True,
                ))  # fmt: skip
    result = run("check", world.plan, ledger)
    assert result.exit_code in (0, 1), result.output
    assert_safe(result.output)
    if not result.output.startswith("Error:"):
        assert_named(result.output, *STEPS.values())


# The figures draw names with matplotlib: control characters spelt out, and a glyph the font
# lacks (the wide model's) is no warning on the user's terminal (an error here, were it raised).
@pytest.mark.filterwarnings("error:Glyph:UserWarning")
def test_report_console_lines_are_inert(world: SimpleNamespace) -> None:
    """`report`: the findings on stderr and the path on stdout quote names inert."""
    out = world.where / "report [/] \x1b]0;t\x07"
    result = run("report", "-o", out, "--db", world.db)
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert printable(out / "index.html") in result.output


def test_races_tables_show_keys_and_steps_as_text(tmp_path: Path) -> None:
    """`races`: the abandoned, duplicate and re-plan tables hold hostile keys and steps inert."""
    hostile = {"k3": "[/]\x1b[2J", "k5": "[link=https://evil.example]k[/link]"}
    calls = [dataclasses.replace(c, key=hostile.get(c.key, c.key),
                                 step=STEPS["first"] if c.step == "pay" else c.step)
             for c in test_races.CALLS]  # fmt: skip
    harness = [test_races._harness(c, n) for n, c in enumerate(calls)]
    tool = [test_races._tool(c, n) for n, c in enumerate(calls)]
    harness_log = test_races._write(tmp_path / "harness.jsonl", harness)
    tool_log = test_races._write(tmp_path / "tool.jsonl", tool)
    result = run("races", harness_log, tool_log, "--side-effecting", STEPS["first"])
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, *hostile.values(), STEPS["first"])


def test_replay_table_shows_the_workflow_side_and_notes_as_text() -> None:
    """`replay`'s table: a hostile workflow, side label, note and sentence print inert."""
    from tailkit.cli._replay import render_replay

    figure = SimpleNamespace(value=0.1, low=0.05, high=0.2)
    side = SimpleNamespace(
        label="with [/] plan \x1b[2J",
        runs=10,
        predicted=dict.fromkeys(_FIGURES, 0.1),
        observed=dict.fromkeys(_FIGURES, figure),
        agrees=dict.fromkeys(_FIGURES, True),
        borderline=(),
        ledger=Path("x"),
    )
    result = SimpleNamespace(
        plan=SimpleNamespace(workflow=WORKFLOW, deadline_s=30.0),
        sides=[side, side],
        verdict="agrees",
        notes=["note [/] \x9b2J"],
        fidelity=SimpleNamespace(describe=lambda: "timing [link=https://e.example]x[/link]"),
        effect=SimpleNamespace(sentence=lambda: "the plan [/] helps \x07"),
    )
    buffer = io.StringIO()
    render_replay(result, Console(file=buffer, width=80))  # type: ignore[arg-type]
    assert_safe(buffer.getvalue())
    assert_named(buffer.getvalue(), WORKFLOW, "note [/] \x9b2J", "the plan [/] helps \x07")
    assert "timing [link=https://e.example]x[/link]" in buffer.getvalue()


_FIGURES = ("miss_rate", "p50_s", "p99_s", "extra_attempts")


def test_error_lines_quote_paths_inert(world: SimpleNamespace) -> None:
    """`Error:` lines that quote a file are one line, its escapes and newline spelt out."""
    missing = world.where / "nope [/] \x1b]0;t\x07\n.jsonl"
    for args in (
        ("ingest", missing, "--db", world.where / "other.duckdb"),
        ("report", "-o", world.where / "r", "--db", world.db, "--replay", missing),
        ("calibrate", missing, "--out", world.where / "p.yaml", "--db", world.db),
    ):
        result = run(*args)
        assert result.exit_code == 1, result.output
        assert_safe(result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, result.output
        assert printable(missing) in errors[0]


def test_a_filter_quoting_a_hostile_name_selects_it(world: SimpleNamespace) -> None:
    """`stats --where` with a name holding escapes and markup: its group, printed inert."""
    result = run("stats", "--db", world.db, "--where", f"model = '{MODELS[2]}'", "--bucket", "none")
    assert result.exit_code == 0, result.output
    assert_safe(result.output)
    assert_named(result.output, MODELS[2])


def test_tables_fold_long_names_on_a_narrow_terminal(world: SimpleNamespace) -> None:
    """On an 80-column terminal a long model id folds onto more lines; nothing ends in "…"."""
    from tailkit.cli._stats_view import render_table
    from tailkit.cli._workflow import _plan_table
    from tailkit.config import load_plan
    from tailkit.store import Store
    from tailkit.tails import TableQuery, tail_report

    with Store.open(world.db, read_only=True) as store:
        report = tail_report(store, TableQuery(by=("model",), bucket=()), fits=False)
    buffer = io.StringIO()
    render_table(report, ["model"], Console(file=buffer, width=80))
    _plan_table(load_plan(world.plan), Console(file=buffer, width=80))
    assert "…" not in buffer.getvalue()
    cells = [line.split("│")[1].strip() for line in buffer.getvalue().splitlines()
             if line.startswith("│")]  # fmt: skip
    assert printable(MODELS[-1]) in "".join(cells)


def test_a_pipe_gets_whole_lines_whatever_the_columns() -> None:
    """The console of a pipe does not wrap: a 500-character line is one line at COLUMNS=80."""
    from tailkit.cli._common import new_console

    console = new_console()
    with console.capture() as captured:
        console.print("x" * 500)
    assert captured.get() == "x" * 500 + "\n"


def test_emoji_codes_and_markup_in_names_print_as_typed() -> None:
    """`shown`: ``:fire:`` stays text, ``[/]``, ``[link=…]`` and a final backslash too."""
    from tailkit.cli._common import new_console, shown

    console = new_console()
    names = [":fire:", "[/]", "[link=https://e.example]x[/link]", "\\[b]x", "[b]x\\[/b]", "x\\"]
    with console.capture() as captured:
        for name in names:
            console.print(shown(name))
    assert captured.get().splitlines() == names


@pytest.mark.slow
def test_replay_runs_the_hostile_plan_and_prints_it_inert(world: SimpleNamespace) -> None:
    """`replay` serves and runs the hostile routes and steps, and prints them inert."""
    result = run(
        "replay", world.plan, "--db", world.db, "--runs", 5, "--min-calls", 100,
        "--out", world.where / "replay",
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # 1: it differs or can't tell (busy machine)
    assert_safe(result.output)
    assert_named(result.output, STEPS["first"], STEPS["second"])


def test_progress_labels_are_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bar's label (a file's name, a replay phase) and a phase line draw as text."""
    from tailkit.cli import _progress

    def terminal(*, stderr: bool = False) -> Console:
        del stderr
        return Console(file=io.StringIO(), force_terminal=True, width=300, emoji=False)

    monkeypatch.setattr(_progress, "new_console", terminal)
    name = "logs/[/]x \x1b]0;t\x07 :fire:.jsonl"
    ingest = _progress.IngestProgress(None, 100 * 1024 * 1024, enabled=True)
    ingest.start(Path(name), 10)
    replay = _progress.ReplayProgress(enabled=True)
    replay("probe [/] \x9b2J", 1, 2)
    buffer = io.StringIO()
    drawn = Console(file=buffer, width=300, emoji=False)
    drawn.print(ingest._bar.get_renderable())
    drawn.print(replay._bar.get_renderable())
    _progress.phase_lines(drawn)("route [/] \x1b[2J")
    assert_safe(buffer.getvalue())
    for shown_name in (Path(name).name, "probe [/] \x9b2J", "route [/] \x1b[2J"):
        assert printable(shown_name) in buffer.getvalue()


def test_printable_spells_every_control_and_invisible_format_character() -> None:
    """Every character of categories Cc, Cf, Zl, Zp and Cs is spelt as an escape."""
    import sys

    hidden = [chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")]  # fmt: skip
    assert [c for c in hidden if printable(c) == c] == []
    assert all(printable(c).startswith("\\") for c in hidden)


def test_printable_keeps_names_that_differ_by_an_invisible_character_apart() -> None:
    """A tag character or a soft hyphen shows: ``tagx`` and ``tag<U+E0041>x`` print apart."""
    assert printable("tag\U000e0041x") == "tag\\U000e0041x"
    assert printable("gpt\xad4") == "gpt\\xad4"
    assert printable("a\u061cb") == "a\\u061cb"
    assert printable("漢字 é ❤ 😀 [/]") == "漢字 é ❤ 😀 [/]"  # what a terminal shows stays
