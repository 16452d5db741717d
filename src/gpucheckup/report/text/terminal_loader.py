"""The terminal view of `gpucheckup dataloader`: one row per setting, the CPU budget, the advice."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpucheckup.document import LoaderAdvice, LoaderBench, LoaderRun
from gpucheckup.report.text.lines import plain_value


def render_loader(bench: LoaderBench, advice: LoaderAdvice, console: Console) -> None:
    """Print the benchmark table and the advice (the `dataloader --json` document's parts)."""
    cap = advice.worker_cap
    t = Table(title=Text(f"DataLoader alone: {bench.factory}"), title_justify="left", box=box.SIMPLE_HEAVY,
              pad_edge=False, caption=Text("CPU = CPU seconds per wall second, the workers' (at 0 workers, the loop's)",
                                           style="dim"), caption_justify="left")
    for col, just in (("workers", "right"), ("pin", "left"), ("batch/s", "right"), ("sample/s", "right"),
                      ("start", "right"), ("CPU", "right"), ("RSS/shr/USS MB", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=bool(col), overflow="ellipsis" if col else "fold")
    for r in bench.runs:
        n = len(r.worker_rss_mb)
        mem = f"{_mean(r.worker_rss_mb):.0f}/{_mean(r.worker_shared_mb):.0f}/{_mean(r.worker_uss_mb):.0f}" if n else "-"
        flag = []
        if cap is not None and r.num_workers > cap:
            flag.append("over the cores")
        if r.num_workers == advice.recommended_workers:
            flag.append("recommended")
        if n != r.num_workers:
            flag.append(f"{n} worker processes seen")
        if r.note:
            flag.append(r.note)
        sps = f"{r.samples_per_s:.0f}" if r.samples_per_s else "-"
        t.add_row(str(r.num_workers), plain_value(r.pin_memory), f"{r.batches_per_s:.1f}", sps,
                  f"{r.startup_s:.2f}s", _cpu(r), mem, Text("; ".join(flag), style="bold" if flag else ""))
    console.print(t)
    c = bench.cpu
    quota = c.cgroup_quota_cpus
    quota_s = f"{quota:g} CPU{'' if quota == 1 else 's'}" if quota else "none"
    console.print(Text(f"CPU: {c.count} on the host, affinity {c.affinity}, cgroup quota {quota_s} "
                       f"({c.cgroup_source})", style="dim"))
    for note in bench.notes:
        console.print(Text("note: " + note, style="dim"))
    for s in advice.sentences:
        console.print(Text("• " + s, style="bold" if s.startswith("recommended") else ""))


def _cpu(run: LoaderRun) -> str:
    """The CPU seconds per wall second over the timed batches: the workers' (the iterating process's at 0 workers)."""
    spent = run.worker_cpu_s if run.num_workers else run.main_cpu_s
    return f"{spent / run.seconds:.2f}" if spent is not None and run.seconds > 0 else "-"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
