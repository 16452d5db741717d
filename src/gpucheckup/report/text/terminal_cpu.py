"""The terminal rendering of a CPU-side check-up (checkup/cpu_report.py)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.document import CpuFigures, cpu_part
from gpucheckup.report.text import terminal
from gpucheckup.safe_text import safe_tree


def render(report: dict, console: Console) -> None:
    """Print the CPU-side check-up: its one-line summary, the main figures, operators by self time, threads."""
    r = cpu_part(safe_tree(report))
    c, v = r.cpu, r.verdict
    console.print()
    console.print(Text(f"gpucheckup {r.trace.path}", style="bold"), soft_wrap=True)
    console.print(Panel(Text(f"{v.title}\n{v.reason}"), title=Text("CPU-side check-up"), title_align="left"))
    for f in v.findings:  # a run directory's run-level findings
        console.print(terminal._finding(f, console.width))
    if r.fixes:
        console.print(terminal._fixes(r.fixes))
    t = Table(title="Key figures", title_justify="left", box=box.SIMPLE, show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    for name, value in figure_rows(c):
        t.add_row(name, value)
    console.print(t)
    ops = Table(title="Operators by self time", title_justify="left", box=box.SIMPLE)
    for col, just in (("operator", "left"), ("calls", "right"), ("self ms", "right"), ("self %", "right"),
                      ("total ms", "right")):
        ops.add_column(col, justify=just, overflow="fold")
    for o in c.top_ops:
        ops.add_row(Text(o.name), str(o.count), f"{o.self_ms:.3f}", f"{o.self_pct:.1f}%", f"{o.total_ms:.3f}")
    console.print(ops)
    th = Table(title="Threads by operator time", title_justify="left", box=box.SIMPLE)
    for col, just in (("thread", "left"), ("ops", "right"), ("busy ms", "right"), ("busy %", "right")):
        th.add_column(col, justify=just, overflow="fold")
    for x in c.threads:
        th.add_row(Text(x.name or f"{x.pid}/{x.tid}"), str(x.ops), f"{x.busy_ms:.3f}", f"{x.busy_pct:.1f}%")
    console.print(th)
    for n in r.notes:
        console.print(Text(f"note: {n}", style="dim"))


def figure_rows(c: CpuFigures) -> list[tuple[str, str]]:
    """The CPU-side key figures as (name, value) rows, shared by every format."""
    span_what = f"{c.steps} ProfilerStep windows" if c.steps else "main thread, first to last operator"
    rows = [("span", f"{c.span_ms:.3f} ms ({span_what})"),
            ("operators", f"{c.ops_count} calls, {c.self_ms:.3f} ms self time (every thread)"),
            ("main thread busy in operators", f"{c.main_thread.busy_pct:.1f}%"),
            ("Python between operators", f"{c.python_between_pct:.1f}% ({c.python_between_ms:.3f} ms)"),
            ("DataLoader wait", f"{c.dataloader_pct:.1f}% ({c.dataloader_ms:.3f} ms)")]
    if c.step_median_ms is not None:
        rows.append(("step time (median)", f"{c.step_median_ms:.3f} ms over {c.steps} steps"))
    return rows
