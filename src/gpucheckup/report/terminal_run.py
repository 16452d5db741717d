"""The terminal view of a run directory's run-level parts: capture status, steps over the whole run,
NVML, CPU, environment. Text from the run (commands, paths, names) goes through `Text`, never markup."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpucheckup.diagnosis.findings import TIER_TITLES
from gpucheckup.report import terminal
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
        t = Table(title="What to try first", title_justify="left", box=box.SIMPLE_HEAVY, expand=True)
        t.add_column("#", justify="right", width=2)
        t.add_column("change", width=18)
        t.add_column("fix", ratio=1)
        for i, fx in enumerate(report["fixes"][:terminal.MAX_FIXES], 1):
            t.add_row(str(i), TIER_TITLES[fx["tier"]], Text(fx["action"]))
        console.print(t)
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
                     + (f"CV {st['cv_pct']:.0f}%" if st["cv_pct"] is not None else "CV unknown"))
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
        t.add_row("DataLoader", f"num_workers up to {ld['max_workers']}, pin_memory {ld['pin_memory']}, "
                                f"{ld['usable_cores'] or '?'} usable cores ({ld['cores_limited_by']})")
    env = report.get("env") or {}
    torch = env.get("torch") or {}
    gpus = ", ".join(sorted({g.get("name", "?") for g in env.get("gpus") or []})) or "no GPU seen by NVML"
    t.add_row("environment", Text(f"{gpus}; driver {env.get('driver') or '?'}; torch {torch.get('version') or '?'}"
                                  f" (CUDA {torch.get('cuda') or '-'}, cuDNN {torch.get('cudnn') or '-'}, "
                                  f"NCCL {torch.get('nccl') or '-'})"))
    flops = fig.get("flops")
    if flops and flops.get("flops_per_step"):
        t.add_row("FLOPs per step", f"{flops['flops_per_step']:.4g} (step {flops.get('step')})")
    hs = fig.get("host_samples")
    if hs:
        for label, line in host_sample_lines(hs, (report.get("gaps") or {}).get("source")):
            t.add_row(label, line)
    for k, v in (r["failed"] or {}).items():
        t.add_row(Text(f"not captured: {k}", style="yellow"), Text(str(v)))
    console.print(t)
    coarse = fig.get("coarse")
    if coarse:
        console.print(Panel(Text(coarse.get("sentence", "")), title="Out-of-process check-up (coarse)",
                            title_align="left", box=box.ROUNDED))


def host_sample_lines(hs: dict, gaps_source: str | None) -> list[tuple[str, str]]:
    """The light window's rows: the main thread's sampled states over the window and over the GPU's idle
    time, the cheap ranges, and where the gap causes came from; each says its source."""
    def states(rows: list[dict]) -> str:
        return ", ".join(f"{x['state']} {x['pct']:.0f}%" for x in rows[:5]) or "none"

    out = [(f"host, from {hs['source']}",
            f"{states(hs['window_by_state'])} of {hs['window_ms']:.1f} ms of profiled steps "
            f"({hs['window_covered_pct']:.0f}% covered, {hs['stack_changes']} stack changes at {hs['rate_hz']:g} Hz)")]
    if hs.get("gap_by_state") is not None:
        out.append((f"GPU idle, from {hs['source']}", f"{states(hs['gap_by_state'])} of {hs['gap_ms']:.1f} ms idle "
                                                   f"({hs['gap_covered_pct']:.0f}% covered)"))
    rg = hs.get("ranges") or {}
    if rg:
        out.append(("ranges, from profiler ranges", ", ".join(f"{k} {v['pct']:.0f}%" for k, v in rg.items())
                    + " of the profiled steps"))
    if gaps_source:
        out.append(("idle causes above", f"from {gaps_source}"))
    return out
