"""
The races section: what `tailkit races` found between a harness's log and its tool's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tailkit.report._common import Section, finish, new_figure


class RaceFindings(Protocol):
    """
    What the section needs of a `tailkit.races.RaceReport`.
    """

    @property
    def abandoned(self) -> Sequence[object]: ...
    @property
    def duplicates(self) -> Sequence[object]: ...
    @property
    def replans(self) -> Sequence[object]: ...
    @property
    def deadline_carried(self) -> int: ...
    @property
    def deadline_honoured(self) -> int: ...
    def findings(self) -> list[str]: ...


def races_section(report: RaceFindings | None) -> Section:
    """
    The section: one bar per kind of race, titled with the first finding; the rest as a note.
    """
    title = "Races between the harness and its tool"
    if report is None:
        note = "No harness and tool logs given: no races section (pass both logs)."
        return Section(title, note=note)
    counts = {
        "finished after the\nharness gave up": len(report.abandoned),
        "executed more\nthan once": len(report.duplicates),
        "re-planned with\na new call": len(report.replans),
        "ran past the\ndeadline it carried": report.deadline_carried - report.deadline_honoured,
    }
    fig = new_figure(9.0, 3.2)
    ax = fig.add_subplot()
    bars = ax.barh(list(counts), list(counts.values()), color="#c0392b")
    ax.bar_label(bars, padding=3)
    ax.set_xlabel("calls (count)")
    ax.invert_yaxis()
    findings = report.findings()
    figure = finish(
        fig,
        name="races",
        title=findings[0] if findings else "No races found",
        caption="Each bar counts one kind of race between the two clocks; all zero is the goal.",
    )
    return Section(title, figures=(figure,), note="; ".join(findings[1:]) or None)
