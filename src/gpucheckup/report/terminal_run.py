"""The terminal view of a run directory's run-level parts: capture status, steps over the whole run,
NVML, CPU, environment. Text from the run (commands, paths, names) goes through `Text`, never markup."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.report import terminal
from gpucheckup.report.lines import plain_value, version_text
from gpucheckup.safe_text import safe_tree


def render_run_only(report: dict, console: Console) -> None:
    """A run with no GPU timeline: say so plainly, then the run-level findings and figures."""
    report = safe_tree(report)  # paths, commands, frames: control and bidi characters escaped
    r = report["run"]
    head = Text("gpucheckup ", style="bold")
    head.append(r["path"])
    console.print(head)
    console.print(Panel(Text(report["verdict"]["reason"]), title="No GPU timeline", title_align="left",
                        box=box.ROUNDED))
    for f in report["verdict"]["findings"]:
        console.print(terminal._finding(f))
    if report["fixes"]:
        console.print(terminal._fixes(report))
    render_run(report, console)


def render_run(report: dict, console: Console) -> None:
    """The whole-run figures under a check-up."""
    report = safe_tree(report)
    r, fig = report["run"], report["run_figures"]
    t = Table(title="Whole run", title_justify="left", box=box.SIMPLE, show_header=False)
    t.add_column("what")
    t.add_column("value", overflow="fold")
    t.add_row("command", Text(" ".join(r["command"] or [])))
    ex = f"exit code {r['exit_code']}" if r["exit_code"] is not None else f"killed by {r['exit_signal']}"
    if r["kind"] == "run":
        t.add_row("job", f"{ex}, {r['duration_s'] or 0:.1f} s")
    t.add_row("traces", Text(", ".join(r["traces"]) or "none"))
    st = fig.get("steps")
    if st:
        line = f"{st['count']} steps"
        if st["steady_median_ms"] is not None:
            line += (f"; steady median {st['steady_median_ms']:.2f} ms after {st['warmup_steps']} warm-up steps, "
                     f"CV {st['cv_pct']:.0f}%")
        if st["profiled_steps"]:
            line += f"; profiled steps {st['profiled_steps'][0]}-{st['profiled_steps'][1]}"
        if st["profiler_overhead_pct"] is not None:
            line += f" ({st['profiler_overhead_pct']:+.0f}% step time under the profiler)"
        if st["slow"] and st["slow"]["count"]:
            line += f"; {st['slow']['count']} slow steps (> 2x median)"
        t.add_row("steps", line)
    nv = fig.get("nvml")
    if nv and nv.get("util_mean_pct") is not None:
        hb = nv["heartbeat"]
        line = (f"utilization {nv['util_mean_pct']:.1f}% mean over {nv['active_s']:.1f} s"
                f"{', heartbeat' if hb['heartbeat'] else ''} ({hb['pulses']} pulses, {hb['low_pct']:.0f}% low)")
        if nv.get("power_mean_w") is not None:
            line += f"; {nv['power_mean_w']:.0f} W mean"
        if nv.get("sm_clock_median_mhz") is not None:
            line += f"; SM clock {nv['sm_clock_median_mhz']:.0f} MHz"
        th = nv.get("throttle") or {}
        if th.get("known"):
            line += f"; throttled {th['throttled_pct']:.0f}% of samples"
        mem = nv.get("memory") or {}
        if mem.get("growth_mb") is not None:
            line += f"; memory {mem['start_mb'] / 1024:.1f} -> {mem['end_mb'] / 1024:.1f} GB"
        t.add_row("NVML", line)
    else:
        t.add_row("NVML", Text(str((r["failed"] or {}).get("nvml") or "no GPU activity recorded")))
    cpu = fig.get("cpu")
    if cpu and cpu.get("samples"):
        t.add_row("CPU", f"main process {cpu['main_median_pct'] or 0:.0f}% of a core (median), other processes "
                         f"{cpu['others_median_pct']:.0f}%, up to {cpu['max_processes']} processes")
    ld = fig.get("dataloaders") or {}
    if ld.get("loaders"):
        t.add_row("DataLoader", f"num_workers up to {ld['max_workers']}, pin_memory {plain_value(ld['pin_memory'])}, "
                                f"{ld['usable_cores'] or '?'} usable cores ({ld['cores_limited_by']})")
    env = report.get("env") or {}
    torch = env.get("torch") or {}
    gpus = ", ".join(sorted({g.get("name", "?") for g in env.get("gpus") or []})) or "no GPU seen by NVML"
    t.add_row("environment", Text(f"{gpus}; driver {env.get('driver') or '?'}; torch {torch.get('version') or '?'}"
                                  f" (CUDA {torch.get('cuda') or '-'}, cuDNN {version_text('cudnn', torch.get('cudnn'))}, "
                                  f"NCCL {torch.get('nccl') or '-'})"))
    flops = fig.get("flops")
    if flops and flops.get("flops_per_step"):
        t.add_row("FLOPs per step", f"{flops['flops_per_step']:.4g} (step {flops.get('step')})")
    for k, v in (r["failed"] or {}).items():
        t.add_row(Text(f"not captured: {k}", style="yellow"), Text(str(v)))
    console.print(t)
    coarse = fig.get("coarse")
    if coarse:
        console.print(Panel(Text(coarse.get("sentence", "")), title="Out-of-process check-up (coarse)",
                            title_align="left", box=box.ROUNDED))
