"""The terminal report: verdict first, then evidence, then fixes, then the key figures.

Everything that comes from a trace (kernel names, paths, op names) goes through `Text`
objects, never through Rich markup, so a name like `[red]x[/red]` prints as written.
"""

from __future__ import annotations

import re

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.diagnosis.findings import TIER_TITLES
from gpucheckup.document import Finding, Fix, TraceReport, rank_table, trace_part
from gpucheckup.report.text.lines import (MAX_EVENTS, busy_line, cost_line, event_line, finding_heading, key_figures,
                                     profiler_caveat, saving_text, step_line, sync_rate)
from gpucheckup.report.text.terminal_mfu import render_hardware
from gpucheckup.safe_text import safe_tree

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
VERDICT_STYLE = {
    "input_bound": "bold white on dark_orange3",
    "launch_bound": "bold white on magenta",
    "sync_bound": "bold white on red3",
    "copy_bound": "bold white on blue",
    "communication_bound": "bold white on purple4",
    "gpu_bound": "bold white on green4",
}
MAX_FIXES = 6


BRIEF_LINES = 15  # --brief: the whole report in at most this many lines
BRIEF_FINDINGS = 3


def render(report: dict, console: Console, brief: bool = False) -> None:
    """Print one check-up (with `brief`, in at most BRIEF_LINES lines), read through its document type."""
    r = trace_part(safe_tree(report))  # names, paths and notes from the trace: control and bidi characters escaped
    if brief:
        render_brief(r, console)
        return
    console.print(_header(r))
    console.print(_verdict(r))
    for f in r.verdict.findings:
        console.print(_finding(f, console.width))
    console.print(_fixes(r.fixes))
    console.print(_figures(r, console.width))
    render_hardware(r, console)
    for note in r.notes:
        console.print(Text("note: " + note, style="dim"))


def render_brief(r: TraceReport, console: Console) -> None:
    """The verdict, the BRIEF_FINDINGS biggest findings and as many top fixes as fit in BRIEF_LINES lines."""
    v = r.verdict
    head = Text(f" {v.primary.upper().replace('_', '-')} ", style=VERDICT_STYLE.get(v.primary, "bold"))
    head.append("  " + v.title, style="bold")
    parts: list = [head, Text(v.reason, style="dim")]
    warning = profiler_caveat(r, short=True)
    if warning:
        parts.append(Text(warning, style="yellow"))
    big = sorted(v.findings, key=lambda f: -(f.cost_ms_per_step or 0.0))[:BRIEF_FINDINGS]
    if big:
        parts.append(_bullets([Text(finding_heading(f)) for f in big], mark="•"))
    used = sum(len(console.render_lines(p, console.options.update(height=None), pad=False)) for p in parts)
    shown = 0
    for n in range(len(r.fixes), 0, -1):  # the most fixes that fit with the line saying how many are left out
        more = more_fixes(r.fixes, n)
        lines = len(console.render_lines(fix_lines(r.fixes, n), pad=False)) + 1 + (1 if more else 0)
        if used + lines <= BRIEF_LINES:
            shown = n
            break
    if shown:
        parts += [Text("What to try first", style="bold italic"), fix_lines(r.fixes, shown)]
    more = more_fixes(r.fixes, shown)
    if more:
        parts.append(more)
    console.print(Group(*parts))


def _header(r: TraceReport) -> Text:
    t, s, w = r.trace, r.steps, r.window
    dev = ", ".join(sorted({d.name for d in t.devices})) or "GPU (no device properties in trace)"
    if not s.marked:
        steps = "no ProfilerStep markers"
    elif w.step_ms == w.traced_step_ms:
        steps = f"{s.count} steps, median {s.median_ms:.2f} ms"
    else:  # the job's step from its step log (analysis/step_basis.py), not the profiled steps' median
        steps = f"{s.count} profiled steps, step {w.step_ms:.2f} ms without the profiler"
    rank = f" | rank {t.rank}" if t.rank is not None else ""
    head = Text("gpucheckup ", style="bold")
    head.append(t.path)
    head.append(f"\n{dev}{rank} | {steps}", style="dim")
    return head


def _verdict(r: TraceReport) -> Panel:
    v, k = r.verdict, r.kernels
    body = Text()
    body.append(f" {v.primary.upper().replace('_', '-')} ", style=VERDICT_STYLE.get(v.primary, "bold"))
    body.append("  " + v.title, style="bold")
    body.append("\n" + v.reason)
    body.append(f"\n{busy_line(r)}  |  {step_line(r)}  |  "
                f"{k.count} kernels, mean {k.mean_us:.1f} us, {k.small_pct:.0f}% under 20 us  |  "
                f"DataLoader {r.dataloader.pct_of_step:.1f}% of step  |  "
                f"syncs {sync_rate(r)}", style="dim")
    caveat = profiler_caveat(r)
    if caveat:
        body.append("\n" + caveat, style="yellow")
    return Panel(body, title=Text("Verdict"), title_align="left", box=box.ROUNDED)


def _bullets(items: list[Text], indent: int = 0, mark: str = "•") -> Table:
    """Lines with a hanging indent: a wrapped line starts under its text, not under the mark."""
    g = Table.grid(padding=(0, 1))
    g.add_column(width=indent + len(mark), justify="right", no_wrap=True)
    g.add_column(ratio=1, overflow="fold")
    for item in items:
        g.add_row(mark, item)
    return g


TOP_OTHER_COLUMNS = 49  # the top-kernels table's columns but the kernel's, with their padding, at their minimum
NAME_SHARE = 0.6  # of the terminal's width: the longest unbroken name (a kernel's) an evidence line shows whole
_WORD_RUN = re.compile(r"\S+")
_TOKEN_END = re.compile(r"^(.*?)((?:\.\.\.)?[:,;)]*)$", re.S)


def fit_names(text: str, width: int) -> str:
    """Text with each unbroken run longer than NAME_SHARE of the width (a long kernel name) cut in its middle with
    an ellipsis, its head and tail kept (templated names differ in both), so that a line naming it wraps to two
    lines at most, not three; paths (with a /) stay whole. Terminal only: JSON and HTML keep the names."""
    limit = max(24, int(NAME_SHARE * width))
    return _WORD_RUN.sub(lambda m: m.group(0) if "/" in m.group(0) else shorten(m.group(0), limit), text)


def shorten(name: str, limit: int) -> str:
    """A name of at most `limit` characters: cut in its middle with an ellipsis (a trailing '...' or punctuation
    it already ends with kept at the end)."""
    if len(name) <= limit:
        return name
    core, end = _TOKEN_END.match(name).groups()
    keep = max(limit - 3 - len(end), 8)
    return core[:keep - keep // 2] + "..." + core[-(keep // 2):] + end


def _finding(f: Finding, width: int = 80) -> Group:
    """One finding: its title and cost (wrapped, never cut), evidence and events (long names shortened to fit
    `width`: fit_names) and the rule."""
    title = Text(f"[{f.severity}] ", style=SEVERITY_STYLE.get(f.severity, ""))
    cost = cost_line(f)
    title.append(f"{f.title}: " if cost else f.title, style="bold")
    title.append(cost)
    parts = [Text(""), title, _bullets([Text(fit_names(e, width)) for e in f.evidence], indent=1)]
    events = [Text(fit_names(event_line(ev), width), style="dim") for ev in f.events[:MAX_EVENTS]]
    if events:
        parts.append(_bullets(events, indent=3, mark="-"))
    parts.append(_bullets([Text(f.rule, style="dim italic")], indent=1, mark="rule:"))
    return Group(*parts)


def fix_lines(fixes: list[Fix], limit: int | None = MAX_FIXES) -> Table:
    """The ranked fixes as numbered, wrapped lines (fix code is never cut), with the count left out."""
    g = Table.grid(padding=(0, 1))
    g.add_column(width=3, justify="right", no_wrap=True)
    g.add_column(ratio=1, overflow="fold")
    shown = fixes if limit is None else fixes[:limit]
    for i, fx in enumerate(shown, 1):
        line = Text(f"[{TIER_TITLES[fx.tier]}] ", style="dim")
        line.append(fx.action)
        line.append(f" ({saving_text(fx)})", style="dim")
        g.add_row(f"{i}.", line)
        if fx.how:  # where to make the change (in the loop's framework's words when known)
            g.add_row("", Text(fx.how, style="italic"))
    return g


def more_fixes(fixes: list[Fix], shown: int) -> Text | None:
    """The line that says how many fixes are not shown, and where they are."""
    n = len(fixes) - shown
    if n <= 0:
        return None
    return Text(f"{n} more fix{'es' if n > 1 else ''}: see --json or --html", style="dim")


def _fixes(fixes: list[Fix]) -> Group:
    """The ranked fixes under their heading, with the line that says how many are not shown."""
    parts = [Text(""), Text("What to try first", style="bold italic"), fix_lines(fixes)]
    more = more_fixes(fixes, min(len(fixes), MAX_FIXES))
    if more:
        parts.append(more)
    return Group(*parts)


def _figures(r: TraceReport, width: int = 80) -> Group:
    k = r.kernels
    figs = Table(title="Key figures", title_justify="left", box=box.SIMPLE, show_header=False)
    figs.add_column("figure")
    figs.add_column("value", justify="right")
    for name, value in key_figures(r):
        figs.add_row(Text(name), Text(value))

    cats = Table(title="GPU time by kernel category", title_justify="left", box=box.SIMPLE, show_header=False)
    cats.add_column("category")
    cats.add_column("share", justify="right")
    cats.add_column("bar")
    for cat, pct in sorted(k.categories.items(), key=lambda kv: -kv[1]):
        if pct is not None and pct >= 0.5:
            style = "bold yellow" if cat == "data_movement" else ""
            cats.add_row(Text(cat.replace("_", " "), style=style), f"{pct:.1f}%", "█" * max(1, round(pct / 4)))

    top = Table(title="Top kernels", title_justify="left", box=box.SIMPLE, expand=True)
    top.add_column("kernel", overflow="fold", ratio=1)
    top.add_column("category", no_wrap=True, min_width=14)
    top.add_column("count", justify="right", no_wrap=True, min_width=5)
    top.add_column("total ms", justify="right", no_wrap=True, min_width=8)
    top.add_column("share", justify="right", no_wrap=True, min_width=6)
    column = max(16, width - TOP_OTHER_COLUMNS)  # what the other columns leave the kernel's label
    for t in k.top[:5]:  # a label folds over two lines at most (the JSON and HTML keep the whole name)
        top.add_row(Text(shorten(t.label, 2 * column - 2)), t.category, str(t.count), f"{t.total_ms:.2f}",
                    f"{t.pct:.1f}%")
    return Group(figs, cats, top)


def render_ranks(summary: list[dict], console: Console) -> None:
    """A one-line-per-rank table for a folder of traces."""
    summary = safe_tree(summary)
    t = Table(title="Ranks", title_justify="left", box=box.SIMPLE)
    for col in ("rank", "trace", "verdict", "step ms", "GPU busy"):
        t.add_column(col)
    for row in rank_table(summary):
        t.add_row(str(row.rank), Text(row.path), row.verdict, f"{row.step_ms:.2f}", f"{row.busy_pct:.1f}%")
    console.print(t)
