"""Run-level rules: over the whole run (steps.csv, nvml.csv, env.json), not only the profiled window.

Each rule's docstring is its definition (metric and threshold); docs/capture.md and the rule
table of docs/metrics.md repeat them. They qualify the trace's verdict and never replace it.
Costs are per step where the run measures them, else 0 (the finding then says what to look at,
not what it would save). Fixes come from the catalogue (diagnosis/fixes.py); every finding
carries the events behind it, timed in ms from the run's start (diagnosis/evidence.py).
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.run_logs import step_history, telemetry
from gpucheckup.analysis.run_logs.run import RunAnalysis
from gpucheckup.diagnosis import evidence as ev
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.diagnosis.fixes import offer

LOW_UTIL_PCT = 50.0
THROTTLE_PCT = 10.0
MEMORY_GROWTH_PCT = 5.0
MEMORY_GROWTH_MB = 1024.0
SLOW_STEPS_PCT = 5.0
RUN_CV_PCT = 20.0


def gpu_heartbeat(ra: RunAnalysis) -> Finding | None:
    """NVML utilization in pulses over the whole run: >= HEARTBEAT_PULSES pulses above
    max(HEARTBEAT_FLOOR_PCT, p90/2) and >= HEARTBEAT_LOW_PCT of active samples at or below it
    (analysis.telemetry.heartbeat)."""
    nv = ra.nvml
    if not nv or not nv["heartbeat"]["heartbeat"]:
        return None
    hb = nv["heartbeat"]
    period = f", one every {hb['period_s']:.2f} s" if hb["period_s"] else ""
    evidence = [
        f"NVML utilization pulses {hb['pulses']} times over {nv['active_s']:.1f} s of activity{period}; "
        f"{hb['low_pct']:.0f}% of samples are at or below {hb['threshold_pct']:.0f}% (mean {nv['util_mean_pct']:.1f}%)",
        "the GPU works in bursts and waits in between: per-batch data loading, a synchronization, or host "
        "work between steps (the trace's verdict says which)",
    ]
    if ra.loaders["max_workers"] == 0:
        evidence.append("every DataLoader the job created has num_workers=0: batches are prepared in the "
                        "training process, between GPU bursts")
    s = telemetry.gpu_series(ra.run.nvml)
    a, b = telemetry.active_span(s["util"])
    t, u = s["t_s"][a:b + 1], np.nan_to_num(s["util"][a:b + 1])
    events = ev.run_stretches(ra, t, u <= hb["threshold_pct"], f"GPU utilization <= {hb['threshold_pct']:.0f}%")
    return Finding(
        id="gpu_heartbeat", severity="warning", title="GPU utilization comes in pulses over the whole run",
        rule=f"NVML utilization: >= {telemetry.HEARTBEAT_PULSES} pulses above max({telemetry.HEARTBEAT_FLOOR_PCT:g}%, "
             f"p90/2) and >= {telemetry.HEARTBEAT_LOW_PCT:g}% of active samples at or below it",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0, evidence=evidence, events=events,
        fixes=offer(ra, "dataloader_workers"))


def low_gpu_utilization(ra: RunAnalysis) -> Finding | None:
    """Mean NVML utilization over the active period < LOW_UTIL_PCT (and no heartbeat, which says more)."""
    nv = ra.nvml
    if not nv or nv["util_mean_pct"] is None or nv["util_mean_pct"] >= LOW_UTIL_PCT or nv["heartbeat"]["heartbeat"]:
        return None
    events = [ev.run_event(ra, f"active period, mean utilization {nv['util_mean_pct']:.1f}%", "nvml.csv",
                           nv["active_from_epoch_s"], nv["active_s"])]
    return Finding(
        id="low_gpu_utilization", severity="warning", title="The GPU is mostly idle over the whole run",
        rule=f"mean NVML utilization over the active period < {LOW_UTIL_PCT:g}%",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[f"NVML utilization averages {nv['util_mean_pct']:.1f}% over {nv['active_s']:.1f} s of activity "
                  f"({nv['samples']} samples): not only the profiled window is starved",
                  "NVML counts any running kernel as busy, so the GPU's real use is lower still"],
        events=events)


def throttling(ra: RunAnalysis) -> Finding | None:
    """Clock-event reasons other than idle/application clocks/sync boost/display in >= THROTTLE_PCT of
    active samples."""
    nv = ra.nvml
    th = (nv or {}).get("throttle") or {}
    if not th.get("known") or th["throttled_pct"] < THROTTLE_PCT:
        return None
    by = th["by_reason_pct"]
    power_only = set(by) <= {"SW power cap"}
    evidence = [f"SM clocks were held down in {th['throttled_pct']:.0f}% of active samples: "
                + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(by.items(), key=lambda kv: -kv[1])),
                f"median SM clock {nv['sm_clock_median_mhz']:.0f} MHz, mean power {nv['power_mean_w']:.0f} W"
                if nv.get("sm_clock_median_mhz") and nv.get("power_mean_w") else "clock and power not reported"]
    if power_only:
        evidence.append("a power cap under heavy GEMM load is normal on a busy GPU: it bounds peak FLOP/s")
    s = telemetry.gpu_series(ra.run.nvml)
    a, b = telemetry.active_span(s["util"])
    throttled = ((s["reasons"][a:b + 1] & telemetry.THROTTLE_MASK) != 0) & s["reasons_known"][a:b + 1]
    events = ev.run_stretches(ra, s["t_s"][a:b + 1], throttled, "SM clocks throttled")
    return Finding(
        id="throttling", severity="info" if power_only else "warning", title="The GPU's clocks were throttled",
        rule=f"NVML throttle reasons ({', '.join(telemetry.THROTTLE_BITS.values())}) in >= {THROTTLE_PCT:g}% "
             "of active samples",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0, evidence=evidence, events=events,
        fixes=offer(ra, "check_cooling"))


def memory_growth(ra: RunAnalysis) -> Finding | None:
    """Used GPU memory grows over the active period (first vs last 1/MEMORY_TENTHS of it) by
    >= MEMORY_GROWTH_PCT of total and >= MEMORY_GROWTH_MB."""
    mem = (ra.nvml or {}).get("memory") or {}
    g, pct = mem.get("growth_mb"), mem.get("growth_pct_of_total")
    if g is None or pct is None or g < MEMORY_GROWTH_MB or pct < MEMORY_GROWTH_PCT:
        return None
    s = telemetry.gpu_series(ra.run.nvml)
    a, b = telemetry.active_span(s["util"])
    t = s["t_s"][a:b + 1]
    k = max(len(t) // telemetry.MEMORY_TENTHS, 1)
    events = [ev.run_event(ra, f"{which} tenth of the active period: {mb / 1024:.1f} GB used", "nvml.csv",
                           float(span[0]), float(span[-1] - span[0]))
              for which, span, mb in (("first", t[:k], mem["start_mb"]), ("last", t[-k:], mem["end_mb"]))]
    return Finding(
        id="memory_growth", severity="warning", title="GPU memory keeps growing during the run",
        rule=f"used memory, last tenth vs first tenth of the active period: >= {MEMORY_GROWTH_PCT:g}% of total "
             f"and >= {MEMORY_GROWTH_MB / 1024:g} GB",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[f"used memory went from {mem['start_mb'] / 1024:.1f} GB to {mem['end_mb'] / 1024:.1f} GB "
                  f"(+{g / 1024:.1f} GB, {pct:.0f}% of the GPU's memory; peak {mem['peak_mb'] / 1024:.1f} GB)",
                  "tensors kept across steps (a loss kept with its graph, growing lists of outputs) or a cache "
                  "that fills up; an out-of-memory error may follow on a longer run"],
        events=events, fixes=offer(ra, "detach_values"))


def profiled_during_warmup(ra: RunAnalysis) -> Finding | None:
    """The profiled window starts before warm-up ended (warm-up steps >= first profiled step; warm-up
    ends where WARMUP_RUN steps in a row lie within WARMUP_TOL_PCT of the steady median)."""
    st = ra.steps
    if not st or st["warmup_steps"] is None or not st["profiled_steps"]:
        return None
    first = st["profiled_steps"][0]
    if st["warmup_steps"] < first:
        return None
    events = ev.run_steps(ra, range(first, st["profiled_steps"][1] + 1))
    return Finding(
        id="profiled_during_warmup", severity="warning", title="The profiled steps fell in warm-up",
        rule=f"warm-up (steps until {step_history.WARMUP_RUN} in a row lie within {step_history.WARMUP_TOL_PCT:g}% "
             "of the steady median) >= the first profiled step",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[f"step times settle after step {st['warmup_steps']}, but the window profiled steps "
                  f"{first}-{st['profiled_steps'][1]}: the trace may show start-up costs (allocator growth, "
                  "cuDNN autotuning, compilation), not the steady state"],
        events=events, fixes=offer(ra, "profile_later"))


def periodic_slow_steps(ra: RunAnalysis) -> Finding | None:
    """Steps over SLOW_FACTOR x the steady median, after warm-up, costing >= SLOW_STEPS_PCT of the run's
    plain step time."""
    st = ra.steps
    slow = (st or {}).get("slow")
    if not slow or slow["count"] == 0 or slow["extra_pct"] < SLOW_STEPS_PCT:
        return None
    per = f"every {slow['period']} steps" if slow["period"] else "irregularly"
    extra_per_step = slow["extra_ms"] / max(st["plain_count"], 1)
    return Finding(
        id="periodic_slow_steps", severity="warning", title=f"Some steps are much slower ({per})",
        rule=f"steps > {step_history.SLOW_FACTOR:g}x the steady median after warm-up cost >= {SLOW_STEPS_PCT:g}% "
             "of step time",
        cost_ms_per_step=extra_per_step, cost_pct_of_step=slow["extra_pct"],
        evidence=[f"{slow['count']} steps took over 2x the steady median of {st['steady_median_ms']:.1f} ms "
                  f"(median {slow['median_slow_ms']:.1f} ms), {per}; they add {_duration(slow['extra_ms'])}, "
                  f"{slow['extra_pct']:.1f}% of the run's step time (steps {', '.join(map(str, slow['steps'][:8]))})",
                  "slow steps on a schedule are checkpointing, evaluation, logging or garbage collection"
                  if slow["period"] else
                  "slow steps with no schedule point to contention (other jobs on the GPU or host, storage, the "
                  "network), not to periodic work: compare their times with the NVML and CPU samples"],
        events=ev.run_steps(ra, slow["steps"]), fixes=offer(ra, "async_periodic"))


def unstable_run(ra: RunAnalysis) -> Finding | None:
    """Coefficient of variation of plain step times after warm-up >= RUN_CV_PCT over the whole run."""
    st = ra.steps
    if not st or st["cv_pct"] is None or st["cv_pct"] < RUN_CV_PCT:
        return None
    after = range(st["warmup_steps"] + 1, st["last_step"] + 1)
    return Finding(
        id="unstable_run", severity="info", title="Step time varies a lot over the run",
        rule=f"coefficient of variation of step time after warm-up >= {RUN_CV_PCT:g}% (whole run)",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[f"after warm-up, steps vary with a CV of {st['cv_pct']:.0f}% around a median of "
                  f"{st['steady_median_ms']:.1f} ms: compare runs by their median, over many steps"],
        events=ev.run_steps(ra, after))


def workers_exceed_cores(ra: RunAnalysis) -> Finding | None:
    """DataLoader workers on the host (most workers of one loader x processes on the host) > usable cores."""
    ld = ra.loaders
    if not ld["workers_on_host"] or not ld["usable_cores"] or ld["workers_on_host"] <= ld["usable_cores"]:
        return None
    m = ra.run.manifest
    events = [ev.run_event(ra, f"the run: {ld['workers_on_host']} DataLoader workers on {ld['usable_cores']:g} cores",
                           "env.json", float(m.get("started_epoch_s") or ev._run_t0(ra)),
                           float(m.get("duration_s") or 0.0))]
    return Finding(
        id="workers_exceed_cores", severity="warning", title="More DataLoader workers than CPU cores",
        rule="DataLoader workers on the host > usable cores (min of CPU count, affinity, cgroup quota)",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[f"{ld['processes_on_host']} process(es) x num_workers={ld['max_workers']} = "
                  f"{ld['workers_on_host']} workers on {ld['usable_cores']:g} usable cores (limited by "
                  f"{ld['cores_limited_by']}): the workers and the training processes thrash"],
        events=events, fixes=offer(ra, "fewer_workers"))


def _duration(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.1f} ms"


RUN_RULES = [gpu_heartbeat, low_gpu_utilization, throttling, memory_growth, profiled_during_warmup,
             periodic_slow_steps, unstable_run, workers_exceed_cores]


def run_findings(ra: RunAnalysis) -> list[Finding]:
    """Every run-level rule that fires."""
    return [f for f in (rule(ra) for rule in RUN_RULES) if f is not None]
