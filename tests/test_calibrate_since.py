"""
``calibrate(since=...)`` / ``--since``: calibrate on recent calls only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.calibration import parse_since
from tailkit.calibration._since import since_instant
from tailkit.cli import app
from tailkit.errors import ConfigError
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .test_calibrate_routes import ONE_STEP, START_S, run, workflow, write_calls


NEWEST = datetime.fromtimestamp(START_S + 48 * 3600, UTC)  # about: the log's last call


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6h", 6 * 3600), ("2d", 2 * 86400), ("90m", 5400), ("45s", 45), ("1w", 604800),
     ("1.5h", 5400), (" 2D ", 2 * 86400)],
)  # fmt: skip
def test_durations_parse(text: str, seconds: float) -> None:
    """A number and a unit (s, m, h, d, w) is a duration."""
    assert parse_since(text) == timedelta(seconds=seconds)


def test_instants_parse_as_utc_unless_they_name_a_zone() -> None:
    """ISO-8601 instants; one without a zone is UTC."""
    assert parse_since("2026-12-06T06:00:00Z") == datetime(2026, 12, 6, 6, tzinfo=UTC)
    assert parse_since("2026-12-06T06:00") == datetime(2026, 12, 6, 6, tzinfo=UTC)
    eastern = parse_since("2026-12-06T01:00:00-05:00")
    assert eastern == datetime(2026, 12, 6, 6, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "6 hours", "0h", "-2d", ""])
def test_anything_else_is_refused_with_the_forms_it_takes(text: str) -> None:
    """Not a duration nor an instant: the error names the parameter and both forms."""
    with pytest.raises(ConfigError) as err:
        parse_since(text)
    assert err.value.field == "since"
    assert "6h, 2d or 90m" in str(err.value)


@pytest.fixture(scope="module")
def drift(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    Two days of calls: a/m at 2 s for 36 h, then at 5 s for 12 h; b/n at 3.6 s throughout.
    """
    folder = tmp_path_factory.mktemp("drift")
    write_calls(folder / "before.jsonl", {"a/m": {"to_h": 36.0}}, hours=48.0, n=6000)
    write_calls(
        folder / "after.jsonl", {"a/m": {"from_h": 36.0, "median": 5.0}}, hours=48.0, n=1000,
        tag="late-",
    )  # fmt: skip
    write_calls(folder / "b.jsonl", {"b/n": {"median": 3.6}}, hours=48.0, n=6000, seed=5)
    db = folder / "calls.duckdb"
    with Store.open(db) as store:
        files = [folder / f for f in ("before.jsonl", "after.jsonl", "b.jsonl")]
        assert ingest_paths(store, files).ok
    return db


def test_a_duration_counts_back_from_the_newest_call(drift: Path) -> None:
    """6h is six hours before the store's newest call, not before now."""
    with Store.open(drift, read_only=True) as store:
        (newest,) = store.fetchone("SELECT max(started_at) FROM calls")  # type: ignore[misc]
        assert since_instant(store, timedelta(hours=6)) == newest - timedelta(hours=6)
        given = datetime(2026, 9, 22, 12, tzinfo=UTC)
        assert since_instant(store, given) == given


def test_an_instant_after_the_newest_call_is_refused_naming_it(drift: Path) -> None:
    """No call that recent: the error names the newest call's time."""
    with Store.open(drift, read_only=True) as store:
        (newest,) = store.fetchone("SELECT max(started_at) FROM calls")  # type: ignore[misc]
        with pytest.raises(ConfigError) as err:
            since_instant(store, datetime(2027, 1, 1, tzinfo=UTC))
    shown = newest.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    assert str(err.value) == (
        f"no calls since 2027-01-01T00:00:00Z for since: the newest call in the store started "
        f"at {shown}. Pass an earlier instant, or a duration."
    )


def test_cli_since_errors_name_the_flag(drift: Path, tmp_path: Path) -> None:
    """A bad --since, or one past the newest call, is one Error: line naming --since."""
    source = tmp_path / "workflow.yaml"
    source.write_text(workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/n")))
    out = tmp_path / "plan.yaml"
    runner = CliRunner()
    cases = [
        ("soon", "--since must be a duration or an ISO-8601 instant"),
        ("2030-01-01", "no calls since 2030-01-01T00:00:00Z for --since"),
    ]
    for since, needle in cases:
        result = runner.invoke(
            app, ["calibrate", str(source), "--out", str(out), "--db", str(drift),
                  "--since", since],
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        assert result.output.startswith("Error: ")
        assert needle in result.output
        assert not out.exists()


def test_recent_calls_move_the_first_route(drift: Path) -> None:
    """On all calls a/m misses less; on the last 12 h (a/m slowed down) b/n goes first."""
    # no budget: the first route alone decides (deadline 5 s: b/n misses 9.5 %, a/m 7 % over
    # two days but 50 % in the last 12 hours)
    text = workflow(ONE_STEP.format(route="a/m", candidates="a/m, b/n"), deadline=5.0, budget=0)

    everything = run(drift, text)
    recent = run(drift, text, since=timedelta(hours=12))

    assert everything.plan.steps["ask"].route == "a/m"
    assert everything.since is None
    assert recent.plan.steps["ask"].route == "b/n"
    assert recent.since is not None
    assert recent.plan.steps["ask"].basis.calls < 6000  # type: ignore[union-attr]
    before, _ = everything.route_choices["ask"].candidates
    after, _ = recent.route_choices["ask"].candidates
    assert after.calls is not None
    assert 990 <= after.calls <= 1010  # a/m's last 12 hours: its 1,000 slow calls
    assert after.miss_rate > 3 * before.miss_rate  # type: ignore[operator]
