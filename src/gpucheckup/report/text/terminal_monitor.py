"""The live view of `gpucheckup monitor`: GPUs like `nvidia-smi dmon`, the job's processes, the named events.
Process names come from the system: they go through `Text`, never markup."""

from __future__ import annotations

import time

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

GPU_COLUMNS = (("util_pct", "{:.0f}", "util%"), ("mem_util_pct", "{:.0f}", "mem%"),
               ("mem_used_mb", "{:.0f}", "used MB"),
               ("power_w", "{:.0f}", "W"), ("sm_clock_mhz", "{:.0f}", "SM MHz"), ("temp_c", "{:.0f}", "C"),
               ("clock_reasons", "0x{:x}", "reasons"))  # NVML_COLUMNS names (layout.py)


def render_monitor(snap, heartbeat, throttles, events: list[str], saturation=None) -> Group:
    """One frame: NVML status or GPU table, processes, what is named now (heartbeat, throttling, saturated loader
    workers: analysis/run_logs/live_events.py), the latest events."""
    parts = []
    stamp = time.strftime("%H:%M:%S", time.localtime(snap.t_s))
    if snap.nvml_status != "ok":
        parts.append(Text(f"{stamp}  GPU side off (no NVML)", style="yellow"))
    else:
        t = Table(title=f"{stamp}  GPUs {', '.join(map(str, snap.gpus))}", title_justify="left", box=box.SIMPLE)
        t.add_column("gpu", justify="right")
        for _, _, head in GPU_COLUMNS:
            t.add_column(head, justify="right")
        latest = {}
        for r in snap.window:
            latest[int(r["gpu"])] = r
        for gpu, r in sorted(latest.items()):
            cells = []
            for key, fmt, _ in GPU_COLUMNS:
                v = r.get(key)
                cells.append("-" if v is None or v == "" else fmt.format(int(v) if "x" in fmt else float(v)))
            t.add_row(str(gpu), *cells)
        parts.append(t)
    if snap.processes:
        p = Table(title="Processes (CPU: 100% = one core)", title_justify="left", box=box.SIMPLE)
        for col in ("pid", "role", "name", "CPU %", "RSS MB", "threads"):
            p.add_column(col, justify="right" if col in ("pid", "CPU %", "RSS MB", "threads") else "left")
        for r in snap.processes:
            cpu = "-" if r.cpu_pct is None else f"{r.cpu_pct:.0f}"
            p.add_row(str(r.pid), r.role, Text(r.name), cpu, f"{r.rss_mb:.0f}", str(r.threads))
        parts.append(p)
    elif snap.pid_status:
        parts.append(Text(snap.pid_status, style="yellow"))
    if snap.host_cpu_pct is not None:
        parts.append(Text(f"host CPU {snap.host_cpu_pct:.0f}% of all cores", style="dim"))
    if snap.nvml_status == "ok":
        parts.append(Text(heartbeat.sentence(), style="bold red" if heartbeat.seen else "dim"))
        for th in throttles:
            parts.append(Text(th.sentence(), style="bold yellow" if th.slows_clocks else "cyan"))
    if saturation is not None and saturation.saturated:
        parts.append(Text(saturation.sentence(), style="bold red"))
    for line in events:
        parts.append(Text(line, style="dim"))
    return Group(*parts)
