"""
The report page: one self-contained HTML file (inline CSS, figures as data URIs, no script).
"""

from __future__ import annotations

import base64

from collections.abc import Sequence
from html import escape

from tailkit.report._common import Section


_CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232a;
       margin: 0; background: #f6f7f9; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid #d8dde3; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
p.meta { color: #5b6570; margin: 0 0 16px; }
p.note { color: #5b6570; font-style: italic; }
figure { margin: 0 0 28px; }
figure img { display: block; box-sizing: border-box; width: 100%; height: auto;
             border: 1px solid #e3e6ea; }
figcaption { color: #3b444e; font-size: 14px; margin-top: 6px; }
nav ol { columns: 2; padding-left: 20px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 14px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
"""


def render_html(title: str, meta: str, sections: Sequence[Section]) -> str:
    """
    The page: title, a line of context, a contents list, then each section's figures or note.
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">{escape(meta)}</p>',
        "<nav><ol>",
        *(f'<li><a href="#s{i}">{escape(s.title)}</a></li>' for i, s in enumerate(sections)),
        "</ol></nav>",
    ]
    for i, section in enumerate(sections):
        parts.append(f'<section id="s{i}"><h2>{escape(section.title)}</h2>')
        if section.note:
            parts.append(f'<p class="note">{escape(section.note)}</p>')
        if section.table:
            head, *rows = section.table
            parts.append("<table><thead><tr>")
            parts += [f"<th>{escape(cell)}</th>" for cell in head]
            parts.append("</tr></thead><tbody>")
            for row in rows:
                parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
            parts.append("</tbody></table>")
        for fig in section.figures:
            data = base64.b64encode(fig.png).decode("ascii")
            parts += [
                f'<figure id="{escape(fig.name)}">',
                f'<h3 class="title">{escape(fig.title)}</h3>',
                f'<img src="data:image/png;base64,{data}" alt="{escape(fig.title)}">',
                f'<figcaption class="how">{escape(fig.caption)}</figcaption>',
                "</figure>",
            ]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "\n".join(parts)
