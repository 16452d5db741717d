"""The Markdown report: the HTML report's content as GitHub-flavoured Markdown tables, to paste
into an issue or a pull request.

Text from a trace goes through `md`: `&`, `<`, `>` become entities (no raw HTML survives a
renderer that allows it), and the characters that Markdown or a table cell would read as
syntax (`\\`, backtick, `*`, `_`, `[`, `]`, `|`, `~`) are backslash-escaped; line breaks
become spaces, so a kernel name can neither inject HTML nor break a table row.
"""

from __future__ import annotations

from gpucheckup import __version__
from gpucheckup.diagnosis.findings import TIER_TITLES
from gpucheckup.document import Fix, TraceReport, Verdict, nvml_series, run_info, run_only, step_history, trace_part
from gpucheckup.report.text.hardware_text import (
    NCU_HEADERS, ROOFLINE_HEADERS, bands_line, mfu_line, ncu_rows, roofline_rows,
)
from gpucheckup.report.pages.html import environment_rows, nvml_summary, step_rows
from gpucheckup.report.text.lines import (
    MAX_EVENTS, busy_line, event_line, severity_cost, key_figures, profiler_caveat, run_rows, saving_text,
    step_line, sync_rate,
)
from gpucheckup.safe_text import safe

_SYNTAX = "\\`*_[]|~"


class Markup(str):
    """Markdown written by gpucheckup itself: a table cell that is not escaped."""


def md(x) -> str:
    """Escape text for a Markdown paragraph or table cell."""
    s = safe(" ".join(str(x).split()))  # control and bidi characters shown escaped
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "".join("\\" + c if c in _SYNTAX else c for c in s)


def table(headers: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """A GFM table; every cell is escaped, numbers are formatted by the caller."""
    right = right or set()
    out = ["| " + " | ".join(md(h) for h in headers) + " |",
           "| " + " | ".join("---:" if i in right else "---" for i in range(len(headers))) + " |"]
    for row in rows:
        out.append("| " + " | ".join(c if isinstance(c, Markup) else md(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def render(items: list[tuple[str | None, dict]], summary_title: str = "Ranks", job_section: str = "") -> str:
    """The whole document: one report, or a summary table and one section per report (`job_section`: the
    ranks' job section, report/job_pages.markdown_section, first)."""
    many = len(items) > 1
    typed = [(label, trace_part(r), r) for label, r in items]  # each report read through its document type
    parts = []
    if many:
        parts.append(f"# gpucheckup check-up: {len(items)} traces\n")
        if job_section:
            parts.append(job_section)
        parts.append(f"## {md(summary_title)}\n")
        parts.append(table(["report", "trace", "verdict", "step ms", "GPU busy"],
                           [[label, p.trace.path, p.verdict.primary, f"{p.window.step_ms:.2f}",
                             f"{p.gpu.busy_pct:.1f}%"] for label, p, _ in typed], right={3, 4}))
    for label, p, r in typed:
        parts.append(_report(p, r, label, many))
    parts.append(f"<sub>gpucheckup {md(__version__)}</sub>\n")
    return "\n".join(parts)


def render_run_only(r: dict) -> str:
    """A run directory with no GPU timeline: why (or an out-of-process attach's coarse verdict, said coarse), the
    run-level findings and fixes, the whole run's figures, the notes."""
    lead = run_only(r)
    v, fixes = lead.verdict, lead.fixes
    head = (f"**Verdict: {md(v.primary.upper().replace('_', '-'))} (coarse)**: {md(v.title)}\n"
            if v.coarse else "**No GPU timeline**\n")
    out = ["# gpucheckup check-up\n", f"{md(run_info(r).path)}\n", head, f"{md(v.reason)}\n"]
    out += _fixes_and_findings(v, fixes, "#")
    out.append("## Whole run\n")
    out.append(table(["what", "value"], [list(x) for x in run_rows(r)]))
    if lead.notes:
        out.append("## Notes\n")
        out.append("\n".join(f"- {md(n)}" for n in lead.notes) + "\n")
    out.append(f"<sub>gpucheckup {md(__version__)}</sub>\n")
    return "\n".join(out)


def _fixes_and_findings(v: Verdict, fixes: list[Fix], h: str) -> list[str]:
    """The ranked fixes table and each finding with its evidence, events and rule."""
    out = [f"{h}# What to try first\n"]
    if fixes:
        out.append(table(["#", "change", "fix", "predicted saving", "finding"],
                         [[i, TIER_TITLES.get(f.tier, f.tier), f.action, saving_text(f), f.finding]
                          for i, f in enumerate(fixes, 1)], right={0, 3}))
    else:
        out.append("No fix suggested: no finding above its threshold.\n")
    out.append(f"{h}# Findings\n")
    for f in v.findings:
        out.append(f"{h}## {md(f.title)} ({md(severity_cost(f))})\n")
        lines = [f"- {md(e)}" for e in f.evidence]
        lines += [f"- {md(event_line(e))}" for e in f.events[:MAX_EVENTS]]
        lines.append(f"- rule: {md(f.rule)}")
        out.append("\n".join(lines) + "\n")
    return out


def _report(p: TraceReport, r: dict, label: str | None, many: bool) -> str:
    """One check-up's section: `p` its document part, `r` its report dict (for its run's run-level keys)."""
    h = "##" if many else "#"
    out = _heading(p, label, many, h) + _fixes_and_findings(p.verdict, p.fixes, h)
    out.append(f"{h}# Key figures\n")
    out.append(table(["figure", "value"], [list(x) for x in key_figures(p)], right={1}))
    out += _hardware(p, h) + _steps(p, r, h)
    out.append(_gap_histogram(p, h))
    out += _kernels(p, h)
    out.append(_copies(p, h))
    out.append(_syncs(p, h))
    nv = nvml_summary(nvml_series(r))
    if nv:
        out.append(f"{h}# NVML samples\n")
        out.append(table(["GPU", "series", "min", "mean", "max"], [list(x) for x in nv], right={2, 3, 4}))
    out.append(f"{h}# Environment\n")
    out.append(table(["what", "value"], [list(x) for x in environment_rows(p, r)]))
    if p.notes:
        out.append(f"{h}# Notes\n")
        out.append("\n".join(f"- {md(n)}" for n in p.notes) + "\n")
    return "\n".join(out)


def _heading(p: TraceReport, label: str | None, many: bool, h: str) -> list[str]:
    """The section's title, the trace and its devices and steps, the verdict, the step every figure is of."""
    t, v, s = p.trace, p.verdict, p.steps
    dev = ", ".join(sorted({d.name for d in t.devices})) or "GPU (no device properties in trace)"
    steps = f"{s.count} steps, median {s.median_ms:.2f} ms" if s.marked else "no ProfilerStep markers"
    return [f"{h} {md(label) if many else 'gpucheckup check-up'}\n",
            f"{md(t.path)}  \n{md(dev)} | {md(steps)}\n",
            f"**Verdict: {md(v.primary.upper().replace('_', '-'))}**: {md(v.title)}\n",
            f"{md(v.reason)}  \n{md(busy_line(p))} | {md(step_line(p))}: every ms per step and percent below "
            "is of this step\n",
            *([f"> {md(profiler_caveat(p))}\n"] if profiler_caveat(p) else [])]


def _hardware(p: TraceReport, h: str) -> list[str]:
    """How close to the hardware: MFU and the healthy bands, the roofline's ops, Nsight Compute's kernels."""
    out = [f"{h}# How close to the hardware\n"]
    hw = [["MFU", mfu_line(p)]] + ([["healthy bands", bands_line(p)]] if bands_line(p) else [])
    out.append(table(["figure", "value"], hw))
    if roofline_rows(p):
        out.append(table(ROOFLINE_HEADERS, roofline_rows(p), right={2, 3, 4, 6}))
    if ncu_rows(p):
        out.append(table(NCU_HEADERS, ncu_rows(p), right={1, 3, 4, 5}))
    return out


def _steps(p: TraceReport, r: dict, h: str) -> list[str]:
    """The profiled steps, each with its GPU busy and idle time by cause, then the whole run's step times."""
    out = []
    causes, rows = step_rows(p)
    if rows:
        out.append(f"{h}# Steps\n")
        out.append(table(["step", "GPU", "step ms", "GPU busy ms", "GPU busy %"]
                         + [f"idle ms: {c.replace('_', ' ')}" for c in causes],
                         [[x[0], x[1], f"{x[2]:.3f}", f"{x[3]:.3f}", f"{x[4]:.1f}"] + [f"{y:.3f}" for y in x[5:]]
                          for x in rows], right=set(range(1, 5 + len(causes)))))
    whole = step_history(r)
    if whole and whole.time_ms:
        hist = whole.time_ms
        out.append(f"Whole run ({md(whole.source)}): {len(hist)} steps, "
                   f"median {sorted(hist)[len(hist) // 2]:.2f} ms, min {min(hist):.2f} ms, max {max(hist):.2f} ms\n")
    return out


def _kernels(p: TraceReport, h: str) -> list[str]:
    """GPU time by kernel category (data movement always shown), then the top kernels."""
    out = [f"{h}# GPU time by kernel category\n"]
    cats = sorted(p.kernels.categories.items(), key=lambda kv: -kv[1])
    out.append(table(["category", "share of kernel time", "ms"],
                     [[(Markup("**data movement**") if c == "data_movement" else c.replace("_", " ")),
                       f"{pct:.1f}%", f"{p.kernels.categories_ms.get(c, 0.0):.3f}"]
                      for c, pct in cats if pct > 0 or c == "data_movement"], right={1, 2}))
    top = p.kernels.top
    if top:
        out.append(f"{h}# Top kernels\n")
        out.append(table(["kernel", "category", "count", "total ms", "mean us", "share"],
                         [[k.name, k.category, k.count, f"{k.total_ms:.3f}", f"{k.mean_us:.1f}",
                           f"{k.pct:.1f}%"] for k in top], right={2, 3, 4, 5}))
    return out


def _gap_histogram(r: TraceReport, h: str) -> str:
    hist = r.gaps.histogram
    edges = hist.edges_us
    if len(edges) < 2:
        return ""
    causes = [c for c, v in hist.count.items() if sum(v) > 0]
    rows = []
    for i in range(len(edges) - 1):
        n = sum(hist.count[c][i] for c in causes)
        if n == 0:
            continue
        ms = sum(hist.time_ms[c][i] for c in causes)
        main = max(causes, key=lambda c: hist.count[c][i])
        rows.append([f"{_us(edges[i])} - {_us(edges[i + 1])}", n, f"{ms:.3f}", main.replace("_", " ")])
    return (f"{h}# Idle gaps by duration\n\n" +
            table(["gap duration", "gaps", "idle ms", "main cause"], rows, right={1, 2}))


def _us(us: float) -> str:
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def _copies(r: TraceReport, h: str) -> str:
    c = r.copies
    if not c.by_direction:
        return f"{h}# Copies\n\nNo memory copies in the analysis window.\n"
    rows = [[d, e.count, f"{e.mb:.3f}", f"{e.time_us:.1f}", f"{e.gb_per_s:.2f}" if e.gb_per_s is not None else "-",
             e.pageable_count] for d, e in sorted(c.by_direction.items())]
    return f"{h}# Copies\n\n" + table(["direction", "count", "MB", "time us", "GB/s", "pageable"], rows,
                                      right={1, 2, 3, 4, 5})


def _syncs(r: TraceReport, h: str) -> str:
    s = r.sync
    if not s.recorded:
        return f"{h}# Synchronizations\n\n{sync_rate(r).capitalize()}: this trace cannot show them.\n"
    if not s.by_cause:
        return f"{h}# Synchronizations\n\nNo host-GPU synchronization in the analysis window.\n"
    rows = [[g.op, g.inner_op or "-", g.frame or "-", ", ".join(g.calls), g.count,
             f"{g.per_step:.1f}", f"{g.blocked_ms:.3f}", f"{g.gpu_idle_ms:.3f}"] for g in s.by_cause]
    return f"{h}# Synchronizations\n\n" + table(
        ["op", "inner op", "user frame", "CUDA calls", "count", "per step", "host blocked ms", "GPU idle caused ms"],
        rows, right={4, 5, 6, 7})
