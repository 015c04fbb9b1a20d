"""
What every figure module shares: the figure record, a matplotlib figure without pyplot, labels.

Numbers in titles and notes are written by `tailkit.text` (``seconds``, ``percent``, ``times``),
as every command writes them: a report and a terminal never spell one figure two ways.
"""

from __future__ import annotations

import io
import re
import textwrap
import warnings

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tailkit.text import printable


if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure


DPI = 100
PNG_PREFIX = "fig_"  # the report's own PNGs: only these are replaced in its folder
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Figure:
    """
    One figure of the report.

    Args:
        name: File stem of its PNG (``ccdf`` -> ``ccdf.png``).
        title: Its finding in words, computed from the data.
        caption: One sentence on how to read it.
        png: The PNG bytes.
    """

    name: str
    title: str
    caption: str
    png: bytes


@dataclass(frozen=True, slots=True)
class Section:
    """
    A heading, its figures, and a one-line note where it has no data (or something to add).

    ``table`` is a small table shown before the figures: its first row is the header.
    """

    title: str
    figures: tuple[Figure, ...] = ()
    note: str | None = None
    table: tuple[tuple[str, ...], ...] = ()


def new_figure(width_in: float, height_in: float) -> MplFigure:
    """
    A matplotlib figure drawn by Agg, without pyplot's global state.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def finish(fig: MplFigure, *, name: str, title: str, caption: str) -> Figure:
    """
    Put the title on the figure, render it to PNG and wrap it as a report `Figure`.
    """
    # wrap to the figure's width (~10 characters per inch at 12 pt bold): never clipped
    width = max(int(fig.get_figwidth() * 10), 40)
    fig.suptitle(textwrap.fill(title, width), fontsize=12, fontweight="bold")
    literal_text(fig)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # A name in a script the font lacks (漢字, an emoji) draws as boxes; the figure is still
        # right, and a warning per glyph on the user's terminal would say nothing they can fix.
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        fig.savefig(buf, format="png", dpi=DPI)
    return Figure(name=name, title=title, caption=caption, png=buf.getvalue())


def literal_text(fig: MplFigure) -> None:
    r"""
    Show every text of ``fig`` as written: a model named ``$\bad{x}$`` is a name, not math.

    Names come from the user's data, and matplotlib typesets text between two ``$`` as math
    (failing on unknown commands). Titles, labels, legends and annotations exist by now: math
    is turned off for each. Tick labels are written at draw time by the axis's formatter: the
    formatters that show given labels (``set_yticks(y, names)``, categories) or our own plain
    numbers are wrapped to escape ``$`` (``\$`` is a literal ``$`` outside math); the numeric
    ones are left alone, since the log axes' ``10^{-2}`` is math on purpose.
    """
    from matplotlib.axis import Axis, Tick
    from matplotlib.category import StrCategoryFormatter
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    texts = fig.findobj(Text)  # first: listing an axis's children makes its ticks
    by_formatters = {id(ax.offsetText) for ax in fig.findobj(Axis)}
    for tick in fig.findobj(Tick):
        by_formatters.update((id(tick.label1), id(tick.label2)))
    for axis in fig.findobj(Axis):
        major, minor = axis.get_major_formatter(), axis.get_minor_formatter()
        if isinstance(major, FixedFormatter | FuncFormatter | StrCategoryFormatter):
            axis.set_major_formatter(FuncFormatter(partial(_escaped, major)))
        if isinstance(minor, FixedFormatter | FuncFormatter | StrCategoryFormatter):
            axis.set_minor_formatter(FuncFormatter(partial(_escaped, minor)))
    for text in texts:
        if id(text) not in by_formatters:
            text.set_parse_math(False)


def _escaped(formatter: Callable[[float, int | None], str], x: float, pos: int | None) -> str:
    return str(formatter(x, pos)).replace("$", r"\$")


LABEL_CHARS = 40  # a key value longer than this is cut in the middle
_VERSION_HASH = re.compile(r":[0-9a-fA-F]{12,}$")  # replicate's model:sha256


def short(value: Any, width: int = LABEL_CHARS) -> str:
    """
    A readable label for one key value: the last path segment, no version hash, printable.

    A longer value is cut in the middle, never at its end: model ids differ at their end
    (``…-70b-chat`` and ``…-7b-chat``), and a value cut there reads as another
    (``llama-2-7…`` for a 70b). Only a trailing version hash (``:`` and 12 or more hex
    digits) goes; ``ft:gpt-4o-mini:acme::id`` keeps its parts.
    """
    text = "(none)" if value is None else printable(value)
    text = text.rsplit("/", 1)[-1] or text
    text = _VERSION_HASH.sub("", text) or text
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def label(key: tuple[Any, ...]) -> str:
    """
    A route (or group) label: its key values shortened, joined with ``/``.
    """
    return "/".join(short(v) for v in key)


def labels(keys: Iterable[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """
    A label per key, no two alike: keys whose `label` would read the same are written whole.
    """
    keys = list(dict.fromkeys(keys))
    first = {key: label(key) for key in keys}
    seen = Counter(first.values())
    return {
        key: text if seen[text] == 1 else "/".join(printable(v) for v in key)
        for key, text in first.items()
    }


def listing(names: list[str], limit: int = 3) -> str:
    """
    ``a``, ``a and b``, ``a, b and 2 more``.
    """
    if len(names) <= 1:
        return "".join(names)
    if len(names) > limit:
        return f"{', '.join(names[: limit - 1])} and {len(names) - limit + 1} more"
    return f"{', '.join(names[:-1])} and {names[-1]}"


def seconds_axis(axis: Any) -> None:
    """
    A log-scaled axis in seconds with plain tick labels (1, 2, 5, 10, …) instead of 2×10⁰.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())
