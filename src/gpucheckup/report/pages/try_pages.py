"""`gpucheckup try` as Markdown and as one self-contained HTML page: the same rows as the terminal
(report/text/try_text.py cells), every string escaped. They render the TryDocument; they compute nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpucheckup.report.pages.html import page
from gpucheckup.report.pages.markdown import md, table
from gpucheckup.report.pages.plots import esc
from gpucheckup.report.text.try_text import HEADERS, base_line, cells

if TYPE_CHECKING:
    from gpucheckup.document import TryDocument

TITLE = "gpucheckup try"


def markdown(doc: TryDocument, side_effects: str) -> str:
    """The trial as Markdown: what ran, the table, where each fix was applied and its sentence."""
    out = [f"## {TITLE}", "", md(side_effects), "", f"Command: {md(' '.join(doc.command))}", "", md(base_line(doc)),
           ""]
    if doc.fixes:
        out += [table(list(HEADERS), [cells(r) for r in doc.fixes], right={2, 3, 4}), ""]
    for r in doc.fixes:
        out += [f"- **{md(r.fix)}**: {md(r.how)}. {md(r.sentence)}"]
    out += [""] + [md(n) + "  " for n in doc.notes]
    return "\n".join(out) + "\n"


def html(doc: TryDocument, side_effects: str) -> str:
    """The trial as one self-contained page (html.py's page: its CSP, styles and embedded JSON)."""
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells(r)) + "</tr>" for r in doc.fixes)
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    parts = [f"<h1>{esc(TITLE)}</h1>", f"<p class=\"meta\">{esc(side_effects)}</p>",
             f"<p>Command: <code>{esc(' '.join(doc.command))}</code></p>", f"<p>{esc(base_line(doc))}</p>",
             f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>" if doc.fixes else "",
             "<ul>" + "".join(f"<li><b>{esc(r.fix)}</b>: {esc(r.how)}. {esc(r.sentence)}</li>" for r in doc.fixes)
             + "</ul>",
             "".join(f"<p class=\"meta\">{esc(n)}</p>" for n in doc.notes)]
    return page(TITLE, parts, doc)
