"""
How tailkit writes numbers for people: one spelling of a duration, a share, a ratio and a range.

Every command, report and message formats its figures here, so that the same number reads the
same everywhere: an unbounded value is ``∞`` (an upper bound nothing limits, a ratio over zero),
an absent one is ``-`` (no calls, not measured). Standard library only: the executor and serve
may use it too.
"""

from __future__ import annotations

import math
import re

from collections.abc import Callable


__all__ = [
    "ABSENT",
    "INFINITE",
    "Advice",
    "count",
    "name_parameters",
    "number",
    "percent",
    "percent_span",
    "printable",
    "seconds",
    "times",
]

INFINITE = "∞"
"""How an infinite value is written."""

ABSENT = "-"
"""How a missing value (``None`` or NaN) is written."""


def _special(value: float | None) -> str:
    if value is None or math.isnan(value):
        return ABSENT
    return INFINITE if value > 0 else f"-{INFINITE}"


def number(value: float | None, digits: int = 2) -> str:
    """
    ``3.14`` with a fixed number of decimals; ``∞`` and ``-`` for infinite and missing values.
    """
    if value is None or not math.isfinite(value):
        return _special(value)
    return f"{value:.{digits}f}"


def seconds(value: float | None, *, unit: bool = True) -> str:
    """
    ``0.42 s``, ``3.1 s``, ``42 s``, ``1,234 s``: as many digits as a reader needs.

    Args:
        value: Seconds.
        unit: Append `` s`` (a table whose header names the unit passes ``False``).
    """
    if value is None or not math.isfinite(value):
        return _special(value)
    size = abs(value)
    text = f"{value:.2f}" if size < 1 else f"{value:.1f}" if size < 10 else f"{value:,.0f}"
    return f"{text} s" if unit else text


def percent(share: float | None) -> str:
    """
    A share as a percentage: ``41%``, ``4.1%``, ``0.25%``, ``0%``.
    """
    if share is None or not math.isfinite(share):
        return _special(share)
    if share == 0:
        return "0%"
    size = abs(share)
    return f"{share:.0%}" if size >= 0.1 else f"{share:.1%}" if size >= 0.001 else f"{share:.2%}"


def percent_span(low: float, high: float) -> str:
    """
    An interval of shares with the digits its upper end needs: ``1.2–3.4%``, ``0.05–0.20%``.
    """
    if math.isnan(low) or math.isnan(high):
        return ABSENT
    digits = 2 if high < 0.01 else 1 if high < 0.1 else 0
    return f"{low * 100:.{digits}f}–{high * 100:.{digits}f}%"


def times(ratio: float | None) -> str:
    """
    A ratio: ``34×``, ``1.8×``, ``∞×``.
    """
    if ratio is None or not math.isfinite(ratio):
        special = _special(ratio)
        return special if special == ABSENT else f"{special}×"
    return f"{ratio:.0f}×" if abs(ratio) >= 10 else f"{ratio:.1f}×"


def count(n: int | None) -> str:
    """
    A count with thousands separators: ``12,345``.
    """
    return ABSENT if n is None else f"{n:,}"


_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff\U000110bd"
    "\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f]"
)
"""Characters a terminal acts on, or draws as nothing, instead of showing: every control (C0,
C1, DEL), format character (the soft hyphen, zero-width characters, direction marks,
bidirectional overrides and isolates, invisible operators, the tag characters U+E0000-E007F:
invisible text that would make two names print alike), line and paragraph separator, and lone
surrogate (Unicode categories Cc, Cf, Zl, Zp and Cs)."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    r"""
    ``value`` as text a terminal shows as it is: every control character spelt as an escape.

    Names in call logs are data, chosen by whoever sent the request (behind a gateway, any
    client): an escape sequence in a model id must not move the cursor, retitle the window or
    hide the rest of a line, a newline in a step name must not forge a table row, and invisible
    characters must not make two names print alike. Each such character becomes ``\x1b``-style
    text (``\u202e`` above U+00FF, ``\U000e0041`` above U+FFFF), so the name stays
    recognisable. Rich markup is a second, separate matter: the CLI escapes it where it prints
    (``tailkit.cli._common.shown``).
    """
    return _UNPRINTABLE.sub(_escaped, str(value))


_PARAMETER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


def name_parameters(template: str, name: Callable[[str], str] | None = None) -> str:
    """
    ``template`` with each ``{parameter}`` token spelt by ``name`` (default: the bare name).

    The library speaks in parameters, the command line in flags: a message that advises a
    parameter writes it as ``{min_calls}``; a notebook reads ``min_calls``, the CLI passes
    its field-to-flag function and its user reads ``--min-calls``. Only lower-case
    identifiers in braces are tokens, so ``{input: 100}`` stays as written.
    """
    return _PARAMETER.sub(lambda m: name(m[1]) if name else m[1], template)


class Advice(str):
    """
    A message for people that names library parameters, as its caller spells them.

    A ``str`` (so it joins, prints and serialises as one) that reads with the parameters'
    own names; `render` spells them another way: the CLI renders every warning and note
    with ``render(flag_of)`` so that a command-line user reads flags. The tokens are
    ``{parameter}``, as in `name_parameters`.

    Args:
        template: The message with its ``{parameter}`` tokens.
    """

    template: str

    def __new__(cls, template: str) -> Advice:  # noqa: D102 - the class says it
        advice = super().__new__(cls, name_parameters(template))
        advice.template = template
        return advice

    def render(self, name: Callable[[str], str] | None = None) -> str:
        """
        The message with its parameters spelt by ``name`` (default: their own names).
        """
        return name_parameters(self.template, name)
