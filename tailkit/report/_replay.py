"""
The replay section: the rehearsal's observed figures beside the simulation's predictions.

It reads the replay's JSON document (``ReplayResult.to_json()``), so the report
needs neither the executor nor the server: the numbers the terminal printed are the numbers
the page shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailkit import text
from tailkit.report._common import Figure, Section, finish, new_figure


__all__ = ["replay_section"]

_TITLE = "Replay against the simulation"
_SHARES = ("miss_rate", "extra_attempts")
_NAMES = {
    "miss_rate": "miss rate",
    "p50_s": "p50 s",
    "p99_s": "p99 s",
    "extra_attempts": "extra attempts",
}


def _text(key: str, value: float | None, *, none: str = text.ABSENT) -> str:
    """
    A figure of the replay document: a share as ``6.5%``, seconds as ``56.3``.

    The document holds JSON, where an infinite number is ``null``: ``none`` says what a
    ``null`` means where it stands (`text.INFINITE` for an interval's upper end, which only
    an unbounded end leaves empty).
    """
    if value is None:
        return none
    return text.percent(value) if key in _SHARES else text.number(value, 1)


def _table(sides: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, ...], ...]:
    rows: list[tuple[str, ...]] = [
        ("side", "figure", "simulated", "replayed", "95% interval", "verdict")
    ]
    for side in sides:
        for i, (key, name) in enumerate(_NAMES.items()):
            low, high = side["observed_interval"][key]
            seen = side["observed"][key]
            shown = _text(key, seen) if seen is not None else f"more than {_text(key, low)}"
            rows.append(
                (
                    str(side["label"]) if i == 0 else "",
                    name,
                    _text(key, side["predicted"][key]),
                    shown,
                    f"{_text(key, low)} – {_text(key, high, none=text.INFINITE)}",
                    "borderline"
                    if key in side.get("borderline", ())
                    else "agrees"
                    if side["agrees"][key]
                    else "differs",
                )
            )
    return tuple(rows)


def _figure(sides: Sequence[Mapping[str, Any]], verdict: str) -> Figure:
    fig = new_figure(9.0, 3.2)
    ax = fig.add_subplot()
    labels = [str(side["label"]) for side in sides]
    y = list(range(len(sides)))
    predicted = [100 * side["predicted"]["miss_rate"] for side in sides]
    observed = [100 * side["observed"]["miss_rate"] for side in sides]
    low = [100 * (side["observed_interval"]["miss_rate"][0] or 0.0) for side in sides]
    high = [100 * (side["observed_interval"]["miss_rate"][1] or 1.0) for side in sides]
    errors = [[o - lo for o, lo in zip(observed, low, strict=True)],
              [hi - o for o, hi in zip(observed, high, strict=True)]]  # fmt: skip
    ax.errorbar(observed, [v + 0.1 for v in y], xerr=errors, fmt="o", color="#1f77b4",
                capsize=4, label="replayed (95% interval)")  # fmt: skip
    ax.plot(predicted, [v - 0.1 for v in y], "D", color="#d62728", label="simulated")
    ax.set_yticks(y, labels)
    ax.set_xlabel("runs that miss the deadline (%)")
    ax.set_xlim(left=0)
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=9)
    before, after = sides[0]["observed"]["miss_rate"], sides[-1]["observed"]["miss_rate"]
    change = "cut" if after < before else "did not cut"
    agreement = {
        "agrees": "the simulation agrees",
        "differs": "the simulation does not agree",
    }.get(verdict, "too busy a machine to compare with the simulation")
    title = (
        f"Replayed, the plan {change} misses ({text.percent(before)} to {text.percent(after)}); "
        f"{agreement}"
    )
    return finish(
        fig,
        name="replay",
        title=title,
        caption="Each side's miss rate as the simulation predicted it (diamond) and as the "
        "replay through the executor observed it (dot, with its 95% interval).",
    )


def replay_section(replay: Mapping[str, Any] | None) -> Section:
    """
    The section for a ``ReplayResult.to_json()`` document (``None``: a note that there is none).
    """
    if replay is None:
        return Section(_TITLE, note="No replay given (tailkit replay, or tailkit demo).")
    sides = replay["sides"]
    fidelity = replay.get("fidelity") or {}
    note = (
        f"{sides[0]['runs']} runs per side through the executor and the HTTP adapter, served "
        f"from the calls the plan was calibrated on; verdict: {replay['verdict']}. Timing "
        f"error {1000 * (fidelity.get('error_s') or 0.0):.1f} ms (profile seconds) at time "
        f"scale {fidelity.get('time_scale', float('nan')):g}."
    )
    notes = [note, *(str(n) for n in replay.get("notes", []))]
    return Section(
        _TITLE,
        figures=(_figure(sides, str(replay["verdict"])),),
        note=" ".join(notes),
        table=_table(sides),
    )
