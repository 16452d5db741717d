"""The terminal view of a run directory's run-level parts: capture status, steps over the whole run,
NVML, CPU, environment. Text from the run (commands, paths, names) goes through `Text`, never markup."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.document import run_figures, run_info, run_only
from gpucheckup.report.text import terminal
from gpucheckup.report.text.lines import run_rows
from gpucheckup.safe_text import safe_tree


def render_run_only(report: dict, console: Console) -> None:
    """A run with no GPU timeline: say so plainly (or, from an out-of-process attach's samples, the coarse verdict,
    said coarse), then the run-level findings and figures."""
    report = safe_tree(report)  # paths, commands, frames: control and bidi characters escaped
    head = Text("gpucheckup ", style="bold")
    head.append(run_info(report).path)
    console.print(head)
    lead = run_only(report)
    v, fixes = lead.verdict, lead.fixes
    if v.coarse:  # an out-of-process attach's verdict from sampled stacks (diagnosis/coarse.py)
        console.print(Panel(Text(f"{v.title}\n{v.reason}"), title=f"{v.primary.upper().replace('_', '-')} "
                            "(coarse)", title_align="left", box=box.ROUNDED))
    else:
        console.print(Panel(Text(v.reason), title="No GPU timeline", title_align="left", box=box.ROUNDED))
    for f in v.findings:
        console.print(terminal._finding(f, console.width))
    if fixes:
        console.print(terminal._fixes(fixes))
    for note in lead.notes:
        if note != v.reason:  # a run with no timeline: its note is the panel's reason
            console.print(Text("note: " + note, style="dim"))
    render_run(report, console)


def render_run(report: dict, console: Console) -> None:
    """The whole-run figures under a check-up."""
    report = safe_tree(report)
    coarse = run_figures(report).coarse
    t = Table(title="Whole run", title_justify="left", box=box.SIMPLE, show_header=False)
    t.add_column("what")
    t.add_column("value", overflow="fold")
    for name, value in run_rows(report):
        t.add_row(Text(name, style="yellow" if name.startswith("not captured") else ""), Text(value))
    console.print(t)
    if coarse:
        console.print(Panel(Text(coarse.sentence), title="Out-of-process check-up (coarse)",
                            title_align="left", box=box.ROUNDED))
