"""Plain-text lines every report format prints the same way (terminal, HTML, Markdown)."""

from __future__ import annotations

import re

from msgspec import UNSET

from gpucheckup.diagnosis.rates import per_step
from gpucheckup.document import (
    Event, Finding, Fix, HostSamples, NvmlSummary, StateShare, StepStats, TraceReport, host_samples, run_figures,
    run_info,
)
from gpucheckup.report.text.hardware_text import mfu_short

WHOLE_TRACE = "whole trace, no ProfilerStep markers"  # what a "step" is in a trace without them
MAX_EVENTS = 3  # evidence events shown under each finding (the JSON has them all)
SLOWER = re.compile(r"replayed [0-9.]+% slower than now")  # a fix's note, where its replay was slower (savings.py)


def event_line(ev: Event) -> str:
    """One evidence event: when (ms from the trace's first event, or the run's start), what, where, how long."""
    return f"at {ev.start_ms:.3f} ms: {ev.name} on {ev.where} ({ev.dur_ms:.3f} ms)"


def step_line(r: TraceReport) -> str:
    """The step time every figure is expressed in, and what it is."""
    return f"step {r.window.step_ms:.2f} ms ({r.window.basis})"


def busy_line(r: TraceReport) -> str:
    """GPU busy % as traced, with the busy % without the profiler when its step time is known."""
    g = r.gpu
    unprof = f" ({g.busy_pct_unprofiled:.0f}% without the profiler)" if g.busy_pct_unprofiled else ""
    return f"GPU busy {g.busy_pct:.1f}%{unprof}"


SYNCS_NOT_RECORDED = "not recorded (light window without --light-syncs)"


def sync_rate(r: TraceReport) -> str:
    """Synchronizations counted honestly: "2.0 per step", "1 in 30 steps" (diagnosis/rates.py), or not recorded."""
    if not r.sync.recorded:
        return SYNCS_NOT_RECORDED
    return per_step(r.sync.count, r.steps.count, r.steps.marked)


def cost_line(f: Finding) -> str:
    """A finding's cost: ms per step and percent of the step time; one that was not finite (None) says so; a coarse
    finding (no step time, a share of sampled stacks: diagnosis/coarse.py) gives its share. An informational
    finding, and one that measures no time per step (a run-level finding such as a warm-up window: 0 ms and 0%),
    has no cost headline (""): its evidence says what it found."""
    ms, pct = f.cost_ms_per_step, f.cost_pct_of_step
    if ms is None and pct is not None and f.id.startswith("coarse_"):
        return f"{pct:.0f}% of the samples (no step time to express it in ms)"
    if f.severity == "info" or (ms == 0 and pct == 0):
        return ""
    return "cost not measurable" if ms is None or pct is None else f"{ms:.2f} ms/step ({pct:.1f}%)"


def finding_heading(f: Finding) -> str:
    """A finding's title with its cost after a colon (an informational one's alone)."""
    cost = cost_line(f)
    return f"{f.title}: {cost}" if cost else f.title


def severity_cost(f: Finding) -> str:
    """'severity, cost' as the pages put it after a finding's title (an informational one's: 'info')."""
    cost = cost_line(f)
    return f"{f.severity}, {cost}" if cost else f.severity


def saving_text(fx: Fix) -> str:
    """A fix's saving as every format prints it: its replayed prediction and the edit that made it (said coarse,
    capped at the fix's bound, an upper bound, or replayed slower than now, where its `predicted_note` says so), else
    its bound and why it was not replayed."""
    p = fx.predicted
    if p:
        note = fx.predicted_note or ""
        coarse = ("; coarse: no operators recorded" if note.startswith("coarse") else "") + (
            "; capped at the fix's bound" if "capped at" in note else "") + (
            "; an upper bound: the forward's host reads replayed gone" if "upper bound" in note else "") + (
            "; " + slower.group(0) if (slower := SLOWER.search(note)) else "")
        return (f"replay {p.transform}: {p.step_ms:.2f} ms/step, saves {p.saving_ms:.2f} ms/step "
                f"({p.saving_pct:.1f}%{coarse})")
    bound = f"up to {fx.saving_ms:.2f} ms/step; " if (fx.saving_ms or 0) > 0 else ""  # None: not finite
    return bound + (fx.predicted_note or "not replayed")


def key_figures(r: TraceReport) -> list[tuple[str, str]]:
    """The headline figures as (name, value) text pairs: the one list the terminal, HTML and Markdown print."""
    s, k, c, g = r.steps, r.kernels, r.copies, r.gaps
    if s.marked:
        rows = [
            ("step time (median / min / max)", f"{s.median_ms:.2f} / {s.min_ms:.2f} / {s.max_ms:.2f} ms"),
            ("step time spread (CV)", f"{s.cv_pct:.1f}%"),
        ]
    else:
        rows = [(f"step time ({WHOLE_TRACE})", f"{s.median_ms:.2f} ms")]
    rows += [
        ("GPU busy", f"{r.gpu.busy_pct:.1f}%"),
        ("MFU", mfu_short(r)),
    ]
    for cause, pct in g.pct_of_step.items():
        if pct is not None and pct >= 0.5:  # None: not finite (an absurd trace)
            rows.append((f"GPU idle: {g.cause_titles.get(cause, cause)}", f"{pct:.1f}% of step"))
    rows += [
        ("idle pattern", g.pattern.shape),
        (f"kernels (count / mean / under {k.small_threshold_us:g} us)",
         f"{k.count} / {k.mean_us:.1f} us / {k.small_pct:.1f}%"),
        ("data movement share of kernel time", f"{k.categories.get('data_movement', 0.0):.1f}%"),
        ("copies (share of GPU time / pageable)", f"{c.pct_of_gpu_time:.1f}% / {c.pageable_count}"),
        ("synchronizations", sync_rate(r)),
        ("DataLoader wait", f"{r.dataloader.pct_of_step:.1f}% of step"),
    ]
    if r.labels:  # diagnosis/labels.py
        rows.append(("job label (for schedulers)", f"{r.labels.intensity}-intensive ({r.labels.reason})"))
    return rows + counter_rows(r)


def counter_rows(r: TraceReport) -> list[tuple[str, str]]:
    """A light window's counter steps (analysis/one_trace/counter_steps.py) as key figures; none for other traces."""
    c = r.counters
    if c is None:
        return []
    rows = [("counter steps, no kernel records (steps / median)", f"{c.steps} / {c.step_ms:.2f} ms"),
            ("the record steps' cost (their median over the counter steps')", f"{c.records_cost_pct:+.1f}%")]
    if c.busy_pct is not None:
        rows.append(("GPU busy by the activity counters (counter steps)",
                     f"{c.busy_pct:.1f}% ({c.coverage_pct:.0f}% of their time sampled)"))
    if c.record_busy_pct is not None:
        rows.append(("GPU busy over the record steps (counters / kernels)",
                     f"{c.record_busy_pct:.1f}% / {c.record_kernels_busy_pct:.1f}%"
                     + ("" if c.agrees else " (differ: read the kernels' figure with care)")))
    if c.launches_per_step is not None:
        rows.append(("kernel launches per counter step (counted)", f"{c.launches_per_step:.0f}"))
    return rows


HOST_VERDICTS = ("launch_bound",)  # verdicts read from host-side idle time, which the profiler inflates
# analysis/one_trace/profiler_overhead.py
PROFILER_COST = "+33% to +69% step time on launch-bound jobs measured on an H200"


def profiler_caveat(r: TraceReport, short: bool = False) -> str | None:
    """A host-side verdict read from a profiled trace with no unprofiled step time: the profiler's own host
    cost may have made it; how to get the true verdict. None when it does not apply."""
    if r.verdict.primary not in HOST_VERDICTS or r.profiler:
        return None
    if short:
        return "caution: profiler host cost can fake launch-bound; see --unprofiled-step-ms"
    return ("caution: torch.profiler adds host cost to every op (" + PROFILER_COST + "), which can make a "
            "GPU-bound job read launch-bound; for the true verdict pass --unprofiled-step-ms MS or record "
            "unprofiled steps with `gpucheckup run`")


def rel_ms(r: TraceReport, t_us: float) -> float:
    """A time on the trace's clock as a person reads it: ms from the trace's first event."""
    return (t_us - (r.trace.start_us or 0.0)) / 1000


def step_label(r: TraceReport, index: int) -> str:
    """The one numbering of steps every table and plot uses: the ProfilerStep number (`#12`), else the label."""
    labels = r.steps.labels or []
    label = labels[index] if 0 <= index < len(labels) else str(index)
    return label[len("ProfilerStep"):] if label.startswith("ProfilerStep") else label


def plain_value(v) -> str:
    """A value as a person reads it: lists joined (each distinct value once), not Python's repr."""
    if isinstance(v, (list, tuple)):
        return ", ".join(dict.fromkeys(plain_value(x) for x in v)) or "-"
    return "-" if v is None else str(v)


def version_text(kind: str, v) -> str:
    """Library versions as released: CUDA 12040 -> 12.4, cuDNN 91900 -> 9.19.0 (8907 -> 8.9.7); text as given."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        return ".".join(map(str, v))  # NCCL's (2, 21, 5)
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        return plain_value(v)
    if kind == "cuda":
        return f"{v // 1000}.{(v % 1000) // 10}"
    if kind == "cudnn":
        major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(v)


def run_rows(report: dict) -> list[tuple[str, str]]:
    """The whole run's figures as (name, value) text pairs: the one list the terminal and HTML print."""
    r, fig = run_info(report), run_figures(report)
    rows = [("command", " ".join(r.command or []))]
    ex = f"exit code {r.exit_code}" if r.exit_code is not None else f"killed by {r.exit_signal}"
    if r.kind == "run" and r.exit_code is None and r.exit_signal is None:  # attached to it while it runs
        rows.append(("job", "still running (checked up from its run directory so far)"))
    elif r.kind == "run":
        rows.append(("job", f"{ex}, {r.duration_s or 0:.1f} s"))
    rows.append(("traces", ", ".join(r.traces) or "none"))
    if fig.steps:
        rows.append(("steps", _steps_line(fig.steps)))
    nv = fig.nvml
    rows.append(("NVML", _nvml_line(nv) if nv and nv.util_mean_pct is not None
                 else r.failed.get("nvml") or "no GPU activity recorded"))
    cpu = fig.cpu
    if cpu and cpu.samples:
        rows.append(("CPU", f"main process {cpu.main_median_pct or 0:.0f}% of a core (median), other processes "
                            f"{cpu.others_median_pct:.0f}%, up to {cpu.max_processes} processes"))
    ld = fig.dataloaders
    if ld and ld.loaders:
        rows.append(("DataLoader", f"num_workers up to {ld.max_workers}, pin_memory {plain_value(ld.pin_memory)}"
                                   f", {ld.usable_cores or '?'} usable cores ({ld.cores_limited_by})"))
    rows.append(("environment", _environment_line(report.get("env") or {})))
    flops = fig.flops  # flops.json as the agent wrote it (document.RunFigures): its keys as given
    if flops and flops.get("flops_per_step"):
        rows.append(("FLOPs per step", f"{flops['flops_per_step']:.4g} (step {flops.get('step')})"))
    hs = host_samples(report)
    if hs:  # a light window (analysis/run_logs/sampled_causes.py)
        rows += host_sample_lines(hs, (report.get("gaps") or {}).get("source"))
    for k, v in r.failed.items():
        rows.append((f"not captured: {k}", v))
    return rows


def _steps_line(st: StepStats) -> str:
    """The run's step log in one line: count, steady step, spread, the profiled steps and their cost, slow steps."""
    line = f"{st.count} steps"
    if st.steady_ms is not None:
        line += (f"; steady step {st.steady_ms:.2f} ms (total time over steps) after {st.warmup_steps} "
                 "warm-up steps, " + (f"CV {st.cv_pct:.0f}%" if st.cv_pct is not None else "CV unknown"))
    if st.profiled_steps:
        line += f"; profiled steps {st.profiled_steps[0]}-{st.profiled_steps[1]}"
    if st.profiler_overhead_pct is not None:
        line += f" ({st.profiler_overhead_pct:+.0f}% step time under the profiler)"
    if st.slow and st.slow.count:
        line += f"; {st.slow.count} slow steps (> 2x median)"
    return line


def _nvml_line(nv: NvmlSummary) -> str:
    """The NVML samples in one line: utilization and its heartbeat, power, SM clock, throttling, memory growth."""
    hb = nv.heartbeat
    line = (f"utilization {nv.util_mean_pct:.1f}% mean over {nv.active_s:.1f} s"
            f"{', heartbeat' if hb.heartbeat else ''} ({hb.pulses} pulses, {hb.low_pct:.0f}% low)")
    if nv.power_mean_w is not None:
        line += f"; {nv.power_mean_w:.0f} W mean"
    if nv.sm_clock_median_mhz is not None:
        line += f"; SM clock {nv.sm_clock_median_mhz:.0f} MHz"
    if nv.throttle.known:
        line += f"; throttled {nv.throttle.throttled_pct:.0f}% of samples"
    mem = nv.memory
    if mem.growth_mb not in (None, UNSET):
        line += f"; memory {mem.start_mb / 1024:.1f} -> {mem.end_mb / 1024:.1f} GB"
    return line


def _environment_line(env: dict) -> str:
    """The GPUs, driver and torch build the run saw, in one line."""
    torch = env.get("torch") or {}
    names = [g.get("name") for g in env.get("gpus") or []]  # env.json is only type-checked to its items
    gpus = ", ".join(sorted({n if isinstance(n, str) else "?" for n in names})) or "no GPU seen by NVML"
    return (f"{gpus}; driver {env.get('driver') or '?'}; torch {torch.get('version') or '?'} "
            f"(CUDA {torch.get('cuda') or '-'}, cuDNN {version_text('cudnn', torch.get('cudnn'))}, "
            f"NCCL {version_text('nccl', torch.get('nccl'))})")


def host_sample_lines(hs: HostSamples, gaps_source: str | None) -> list[tuple[str, str]]:
    """The light window's rows: the main thread's sampled states over the window and over the GPU's idle
    time, the cheap ranges, and where the gap causes came from; each says its source."""
    def states(rows: list[StateShare]) -> str:
        return ", ".join(f"{x.state} {x.pct:.0f}%" for x in rows[:5]) or "none"

    out = [(f"host, from {hs.source}",
            f"{states(hs.window_by_state)} of {hs.window_ms:.1f} ms of profiled steps "
            f"({hs.window_covered_pct:.0f}% covered, {hs.stack_changes} stack changes at {hs.rate_hz:g} Hz)")]
    if hs.gap_by_state is not UNSET:
        out.append((f"GPU idle, from {hs.source}", f"{states(hs.gap_by_state)} of {hs.gap_ms:.1f} ms idle "
                                                 f"({hs.gap_covered_pct:.0f}% covered)"))
    if hs.ranges:
        out.append(("ranges, from profiler ranges", ", ".join(f"{k} {v.pct:.0f}%" for k, v in hs.ranges.items())
                    + " of the profiled steps"))
    if gaps_source:
        out.append(("idle causes above", f"from {gaps_source}"))
    return out
