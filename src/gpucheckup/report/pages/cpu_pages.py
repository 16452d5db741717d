"""The CPU-side check-up (checkup/cpu_report.py) as a self-contained HTML page and as Markdown; every text from
the trace is escaped."""

from __future__ import annotations

import html as _html

from gpucheckup.document import CpuFigures, CpuReport, cpu_part
from gpucheckup.report.pages.markdown import md, table
from gpucheckup.report.text.terminal_cpu import figure_rows
from gpucheckup.safe_text import safe

_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:70rem}table{border-collapse:collapse;"
          "margin:1rem 0;max-width:100%}td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left;"
          "overflow-wrap:anywhere}td.n{text-align:right}.v{font-size:1.1rem;border-left:4px solid #888;padding:.5rem}")


def _h(x) -> str:
    return _html.escape(safe(x))


def _op_rows(c: CpuFigures) -> list[list[str]]:
    return [[o.name, str(o.count), f"{o.self_ms:.3f}", f"{o.self_pct:.1f}%", f"{o.total_ms:.3f}"] for o in c.top_ops]


def _thread_rows(c: CpuFigures) -> list[list[str]]:
    return [[x.name or f"{x.pid}/{x.tid}", str(x.ops), f"{x.busy_ms:.3f}", f"{x.busy_pct:.1f}%"] for x in c.threads]


OP_HEADERS = ["operator", "calls", "self ms", "self %", "total ms"]
THREAD_HEADERS = ["thread", "operators", "busy ms", "busy %"]


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td{' class=n' if i else ''}>{_h(x)}</td>" for i, x in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_findings(r: CpuReport) -> str:
    """A run directory's run-level findings (title and evidence) and its fixes."""
    out = "".join(f"<h3>{_h(f.title)}</h3><ul>" + "".join(f"<li>{_h(e)}</li>" for e in f.evidence) + "</ul>"
                  for f in r.verdict.findings)
    if r.fixes:
        out += "<h3>What to try first</h3><ol>" + "".join(f"<li>{_h(x.action)}</li>" for x in r.fixes) + "</ol>"
    return out


def _md_findings(r: CpuReport) -> list[str]:
    """The same as Markdown lines."""
    out = []
    for f in r.verdict.findings:
        out += [f"### {md(f.title)}\n"] + [f"- {md(e)}" for e in f.evidence] + [""]
    if r.fixes:
        out += ["### What to try first\n"] + [f"{i}. {md(x.action)}" for i, x in enumerate(r.fixes, 1)] + [""]
    return out


def render_html(pages: list[tuple[str, dict]], title: str = "CPU-side check-up", head: str = "") -> str:
    """One HTML page holding each (label, report) CPU-side check-up, after `head` (the job's section, escaped
    HTML: report/pages/job_pages.py); no script, no outside request."""
    parts = []
    for label, report in pages:
        r = cpu_part(report)
        c, v = r.cpu, r.verdict
        parts.append(f"<section><h2>{_h(label)}</h2><p>{_h(r.trace.path)}</p>"
                     f"<p class=v><b>{_h(v.title)}</b><br>{_h(v.reason)}</p>"
                     + _html_findings(r) +
                     f"<h3>Key figures</h3>{_html_table(['figure', 'value'], [list(x) for x in figure_rows(c)])}"
                     f"<h3>Operators by self time</h3>{_html_table(OP_HEADERS, _op_rows(c))}"
                     f"<h3>Threads by operator time</h3>{_html_table(THREAD_HEADERS, _thread_rows(c))}"
                     + "".join(f"<p><small>note: {_h(n)}</small></p>" for n in r.notes) + "</section>")
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<meta name=viewport content=\"width=device-width,initial-scale=1\">"
            f"<title>gpucheckup: {_h(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>gpucheckup: {_h(title)}</h1>{head}{''.join(parts)}</body></html>\n")


def render_markdown(pages: list[tuple[str, dict]], title: str = "CPU-side check-up", head: str = "") -> str:
    """The CPU-side check-ups as Markdown, after `head` (the job's section: report/pages/job_pages.py)."""
    out = [f"# gpucheckup: {md(title)}\n"] + ([head] if head else [])
    for label, report in pages:
        r = cpu_part(report)
        c, v = r.cpu, r.verdict
        out += [f"## {md(label)}\n", f"{md(r.trace.path)}\n", f"**{md(v.title)}**: {md(v.reason)}\n"]
        out += _md_findings(r)
        out += ["### Key figures\n", table(["figure", "value"], [list(x) for x in figure_rows(c)], {1}),
                "### Operators by self time\n", table(OP_HEADERS, _op_rows(c), {1, 2, 3, 4}),
                "### Threads by operator time\n", table(THREAD_HEADERS, _thread_rows(c), {1, 2, 3})]
        out += [f"note: {md(n)}\n" for n in r.notes]
    return "\n".join(out)
