"""The terminal report: verdict first, then evidence, then fixes, then the key figures.

Everything that comes from a trace (kernel names, paths, op names) goes through `Text`
objects, never through Rich markup, so a name like `[red]x[/red]` prints as written.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.diagnosis.findings import TIER_TITLES
from gpucheckup.report.lines import MAX_EVENTS, cost_line, event_line, key_figures, step_line
from gpucheckup.report.terminal_mfu import render_hardware
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


def render(report: dict, console: Console) -> None:
    """Print one check-up."""
    report = safe_tree(report)  # names, paths and notes from the trace: control and bidi characters escaped
    console.print(_header(report))
    console.print(_verdict(report))
    for f in report["verdict"]["findings"]:
        console.print(_finding(f))
    console.print(_fixes(report))
    console.print(_figures(report))
    render_hardware(report, console)
    for note in report["notes"]:
        console.print(Text("note: " + note, style="dim"))


def _header(r: dict) -> Text:
    t = r["trace"]
    dev = ", ".join(sorted({d["name"] for d in t["devices"]})) or "GPU (no device properties in trace)"
    s = r["steps"]
    steps = f"{s['count']} steps, median {s['median_ms']:.2f} ms" if s["marked"] else "no ProfilerStep markers"
    rank = f" | rank {t['rank']}" if t["rank"] is not None else ""
    head = Text("gpucheckup ", style="bold")
    head.append(t["path"])
    head.append(f"\n{dev}{rank} | {steps}", style="dim")
    return head


def _verdict(r: dict) -> Panel:
    v = r["verdict"]
    body = Text()
    body.append(f" {v['primary'].upper().replace('_', '-')} ", style=VERDICT_STYLE.get(v["primary"], "bold"))
    body.append("  " + v["title"], style="bold")
    body.append("\n" + v["reason"])
    g = r["gpu"]
    k = r["kernels"]
    unprof = f" ({g['busy_pct_unprofiled']:.0f}% without the profiler)" if g.get("busy_pct_unprofiled") else ""
    body.append(f"\nGPU busy {g['busy_pct']:.1f}%{unprof}  |  {step_line(r)}  |  "
                f"{k['count']} kernels, mean {k['mean_us']:.1f} us, {k['small_pct']:.0f}% under 20 us  |  "
                f"DataLoader {r['dataloader']['pct_of_step']:.1f}% of step  |  "
                f"{r['sync']['count_per_step']:.1f} syncs/step", style="dim")
    return Panel(body, title="Verdict", title_align="left", box=box.ROUNDED)


def _finding(f: dict) -> Panel:
    body = Text()
    for e in f["evidence"]:
        body.append("• ")
        body.append(e)
        body.append("\n")
    for ev in f["events"][:MAX_EVENTS]:
        body.append(Text("  " + event_line(ev), style="dim"))
        body.append("\n")
    body.append(f"rule: {f['rule']}", style="dim italic")
    title = Text(f"[{f['severity']}] ", style=SEVERITY_STYLE.get(f["severity"], ""))
    title.append(f"{f['title']}  ")
    title.append(cost_line(f), style="dim")
    return Panel(body, title=title, title_align="left", box=box.SIMPLE_HEAD)


def _fixes(r: dict) -> Table:
    t = Table(title="What to try first", title_justify="left", box=box.SIMPLE_HEAVY, expand=True)
    t.add_column("#", justify="right", width=2)
    t.add_column("change", width=18)
    t.add_column("fix", ratio=1)
    t.add_column("saves up to", justify="right", width=12)
    for i, fx in enumerate(r["fixes"][:MAX_FIXES], 1):
        saving = f"{fx['saving_ms']:.2f} ms/step" if (fx["saving_ms"] or 0) > 0 else "-"  # None: not finite
        t.add_row(str(i), TIER_TITLES[fx["tier"]], Text(fx["action"]), saving)
    return t


def _figures(r: dict) -> Group:
    k = r["kernels"]
    figs = Table(title="Key figures", title_justify="left", box=box.SIMPLE, show_header=False)
    figs.add_column("figure")
    figs.add_column("value", justify="right")
    for name, value in key_figures(r):
        figs.add_row(Text(name), Text(value))

    cats = Table(title="GPU time by kernel category", title_justify="left", box=box.SIMPLE, show_header=False)
    cats.add_column("category")
    cats.add_column("share", justify="right")
    cats.add_column("bar")
    for cat, pct in sorted(k["categories"].items(), key=lambda kv: -kv[1]):
        if pct is not None and pct >= 0.5:
            style = "bold yellow" if cat == "data_movement" else ""
            cats.add_row(Text(cat.replace("_", " "), style=style), f"{pct:.1f}%", "█" * max(1, round(pct / 4)))

    top = Table(title="Top kernels", title_justify="left", box=box.SIMPLE)
    top.add_column("kernel", overflow="ellipsis", no_wrap=True, max_width=44)
    top.add_column("category", no_wrap=True, min_width=10)
    top.add_column("count", justify="right", no_wrap=True, min_width=5)
    top.add_column("total ms", justify="right", no_wrap=True, min_width=8)
    top.add_column("share", justify="right", no_wrap=True, min_width=6)
    for t in k["top"][:5]:
        top.add_row(Text(t["label"]), t["category"], str(t["count"]), f"{t['total_ms']:.2f}", f"{t['pct']:.1f}%")
    return Group(figs, cats, top)


def render_ranks(summary: list[dict], console: Console) -> None:
    """A one-line-per-rank table for a folder of traces."""
    summary = safe_tree(summary)
    t = Table(title="Ranks", title_justify="left", box=box.SIMPLE)
    for col in ("rank", "trace", "verdict", "step ms", "GPU busy"):
        t.add_column(col)
    for row in summary:
        t.add_row(str(row["rank"]), Text(row["path"]), row["verdict"], f"{row['step_median_ms']:.2f}",
                  f"{row['busy_pct']:.1f}%")
    console.print(t)
