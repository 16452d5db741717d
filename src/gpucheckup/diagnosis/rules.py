"""The rules: each states its metric and threshold, and returns a Finding or None.

Costs are ms per step of the window's step time and percent of it (analysis/one_trace/window.py: every
figure through one normalizer, so a percent is its ms over the step time). Fixes come from the
catalogue (diagnosis/fixes.py), each offered only where its precondition holds, each saving at
most the cost its finding measures. Every finding carries the events behind it
(diagnosis/evidence.py). Thresholds are constants below, printed from the constant; percent of
step time unless said otherwise. Each rule's docstring is its definition; docs/metrics.md
repeats them in its rule table (a test checks the two agree).
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.one_trace.gpu import copies
from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace.host.api_health import SLOW_FACTOR, SLOW_FLOOR_US
from gpucheckup.analysis.distinct import union1d
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.flops.gemm_dtype import plain_fp32_gemms
from gpucheckup.analysis.one_trace.gpu.kernels import (
    CATEGORIES, QUEUED_DELAY_US, SMALL_KERNEL_US, STARVED_DELAY_US, kernel_label,
)
from gpucheckup.analysis.flops.mfu import HEALTHY_BANDS_PCT
from gpucheckup.analysis.one_trace.profiler_overhead import MIN_INFLATION_PCT
from gpucheckup.diagnosis import evidence as ev
from gpucheckup.diagnosis.findings import Event, Finding
from gpucheckup.diagnosis.fixes import DENSE_MFU_PCT, PINNED_GB_S, offer, single_process_loader
from gpucheckup.diagnosis.rates import per_step
from gpucheckup.diagnosis.verdict import GPU_BOUND_BUSY_PCT
from gpucheckup.diagnosis.verdict import primary as verdict_primary
from gpucheckup.trace.tables import KERNEL

INPUT_PCT = 5.0
INPUT_CRITICAL_PCT = 20.0
DATALOADER_PCT = 10.0
LAUNCH_PCT = 10.0
LAUNCH_CRITICAL_PCT = 30.0
SYNC_PCT = 2.0
SYNC_CRITICAL_PCT = 15.0
PAGEABLE_MB_PER_STEP = 1.0
PAGEABLE_WARNING_PCT = 1.0
COPY_EXPOSED_PCT = 5.0
COMM_EXPOSED_PCT = 5.0
COMM_CRITICAL_PCT = 20.0
DATA_MOVEMENT_PCT = 15.0
FP32_GEMM_PCT = 10.0
ALLOC_PCT = 2.0
STEP_CV_PCT = 20.0
MIN_CV_STEPS = 3
QUEUED_PCT = 10.0
LOW_MFU_PCT = HEALTHY_BANDS_PCT["moe_fp8"][0]  # below the lowest healthy band (MoE with FP8)
CATEGORY_MIN_PCT = 1.0  # kernel categories listed in the gpu_bound evidence

LAUNCH_CAUSES = ("launch", "other_host", "allocation")
CODE_LINES = 3  # lines of the user's code named in a finding's evidence (traces with Python stacks)


def _cost(a: TraceAnalysis, *causes: str) -> tuple[float, float]:
    """Gap causes' idle time per step (ms) and its percent of the step time."""
    ms = sum(a.gaps_summary.per_step_ms[c] for c in causes)
    return ms, a.window.pct(ms)


def _bands() -> str:
    """The healthy MFU bands, from their one home (analysis/flops/mfu.py)."""
    d, m = HEALTHY_BANDS_PCT["dense_pretraining"], HEALTHY_BANDS_PCT["moe_fp8"]
    return f"dense pre-training {d[0]:g}-{d[1]:g}%, MoE with FP8 {m[0]:g}-{m[1]:g}%"


def _by_line(weights: dict[str | None, float], what: str) -> list[str]:
    """One evidence line: the user's lines (None: no Python frame) with their share of the weight."""
    total = sum(weights.values())
    top = sorted(((w, f) for f, w in weights.items() if f is not None and w / total >= 0.005),
                 key=lambda x: -x[0])[:CODE_LINES] if total > 0 else []
    if not top:
        return [f"{what}: none under a Python frame (autograd's backward thread has none)"] if total > 0 else []
    none = weights.get(None, 0.0)
    tail = (f"; {100 * none / total:.0f}% on threads with no Python frame (autograd's backward pass runs on one)"
            if none / total >= 0.005 else "")
    return [f"{what} by line of your code: " + ", ".join(f"{f} ({100 * w / total:.0f}%)" for w, f in top) + tail]


def _code_lines(a: TraceAnalysis, rows: np.ndarray, what: str, weight: np.ndarray | None = None) -> list[str]:
    """Which lines of the user's code these host rows run under (the innermost Python frame outside torch,
    analysis/one_trace/host/host_calls.py), each row counted once or by its `weight`; none without Python stacks
    (profile with with_stack=True)."""
    if not a.trace.with_stack or len(rows) == 0:
        return []
    weights: dict[str | None, float] = {}
    w = np.ones(len(rows)) if weight is None else weight
    for f, x in zip(host_calls.user_frames(a.trace, rows), w):
        weights[f] = weights.get(f, 0.0) + float(x)
    return _by_line(weights, what)


def _gap_code_lines(a: TraceAnalysis, causes: tuple[str, ...], what: str) -> list[str]:
    """Which lines of the user's code the launching thread is in while the GPU idles for these causes (at
    each gap's midpoint), weighted by that idle time; none without Python stacks."""
    g, c = a.timeline.gaps, a.causes
    if not a.trace.with_stack or len(g) == 0 or len(c.time) == 0:
        return []
    idle = c.time[:, [CAUSES.index(x) for x in causes]].sum(axis=1)
    sel = np.flatnonzero(idle > 0)
    mid = g.start[sel] + g.dur[sel] / 2
    weights: dict[str | None, float] = {}
    for f, w in zip(host_calls.user_frames_during(a.trace, c.thread[sel, 0], c.thread[sel, 1], mid, mid),
                    idle[sel]):
        weights[f] = weights.get(f, 0.0) + float(w)
    return _by_line(weights, what)


def _kernel_mask(a: TraceAnalysis, names: set[str] | None = None) -> np.ndarray:
    """The window's kernels (of these names, when given) whose launching host call is known."""
    gpu, lo, hi = a.trace.gpu, *a.steps.window
    m = (gpu.kind == KERNEL) & (gpu.start >= lo) & (gpu.start <= hi) & (a.launch_rows >= 0)
    if names is not None:
        m &= np.isin(gpu.name, a.trace.name_ids(lambda n: n in names))
    return m


def _kernel_launch_rows(a: TraceAnalysis, names: set[str] | None = None) -> np.ndarray:
    """The host calls that launched the window's kernels (of these names, when given)."""
    return a.launch_rows[_kernel_mask(a, names)]


def _finding(a: TraceAnalysis, ms: float, **kw) -> Finding:
    """A finding whose cost is ms per step, its percent from the one window."""
    ms = min(max(ms, 0.0), a.window.step_ms)
    return Finding(cost_ms_per_step=ms, cost_pct_of_step=a.window.pct(ms), **kw)


def input_pipeline(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host waits in DataLoader `__next__` >= INPUT_PCT of step time, or the
    DataLoader itself >= DATALOADER_PCT of step time."""
    ms, pct = _cost(a, "input")
    dl = a.dataloader
    if pct < INPUT_PCT and dl.pct_of_step < DATALOADER_PCT:
        return None
    w = a.window
    evidence = [
        f"DataLoader __next__ takes {dl.pct_of_step:.1f}% of step time ({dl.ms_per_step:.1f} ms of the "
        f"{w.step_ms:.1f} ms step)",
        f"the GPU sits idle {pct:.1f}% of the step waiting for data ({ms:.1f} ms per step)",
    ]
    if single_process_loader(a):
        evidence.append("the iterator is _SingleProcessDataLoaderIter: num_workers=0, so loading and "
                        "augmentation run in the training process, serially with the GPU work")
    evidence += _gap_code_lines(a, ("input",), "the idle time waiting for data")
    events = ev.gaps(a, ("input",), 3) + ev.host_rows(a, host_calls.dataloader_rows(a.trace), 2)
    return _finding(
        a, ms, id="input_pipeline", severity="critical" if pct >= INPUT_CRITICAL_PCT else "warning",
        title="The GPU waits for input data",
        rule=f"GPU idle while the host is in DataLoader __next__ >= {INPUT_PCT:g}% of step time, "
             f"or DataLoader >= {DATALOADER_PCT:g}% of step time (critical >= {INPUT_CRITICAL_PCT:g}%)",
        evidence=evidence, events=events,
        fixes=offer(a, "dataloader_workers", "more_workers", "pin_memory", "gpu_augment", "fast_storage", cap_ms=ms),
    )


def launch_overhead(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host dispatches ops, launches kernels or runs Python between them
    (`launch` + `other_host` + `allocation` gap time) >= LAUNCH_PCT of step time."""
    ms, pct = _cost(a, *LAUNCH_CAUSES)
    if pct < LAUNCH_PCT:
        return None
    k = a.kernels
    pat = a.gap_pattern
    evidence = [
        f"GPU busy only {a.busy_pct:.1f}% of the step; {pct:.1f}% of step time ({ms:.2f} ms) is idle while the "
        f"host issues work ({_cost(a, 'launch')[1]:.1f}% inside ops and CUDA calls, "
        f"{_cost(a, 'other_host')[1]:.1f}% in Python between ops)",
        f"{k.count} kernels, mean {k.mean_us:.1f} us, median {k.median_us:.1f} us; "
        f"{k.small_pct:.1f}% run under {SMALL_KERNEL_US:g} us, shorter than launching them takes",
        f"idle time is {pat.shape} ({pat.gap_count} gaps; the longest gap per step holds "
        f"{pat.largest_gap_share_pct:.0f}% of idle time)",
    ]
    if k.launch_delay_median_us is not None:
        d = k.launch_delay_median_us
        if d < STARVED_DELAY_US:
            meaning = "kernels start as soon as they are launched: the GPU waits for the host, starved rather than queued"
        elif d > QUEUED_DELAY_US:
            meaning = "most kernels wait in a queue, so the host runs ahead part of the time"
        else:
            meaning = f"between starved (< {STARVED_DELAY_US:g} us) and queued (> {QUEUED_DELAY_US / 1000:g} ms)"
        evidence.append(f"median launch-to-start delay {d:.1f} us: {meaning}")
    evidence += _gap_code_lines(a, LAUNCH_CAUSES, "the idle time")
    evidence += _code_lines(a, _kernel_launch_rows(a), "kernel launches")
    return _finding(
        a, ms, id="launch_overhead", severity="critical" if pct >= LAUNCH_CRITICAL_PCT else "warning",
        title="The CPU cannot launch kernels fast enough (small-kernel storm)",
        rule=f"GPU idle while the host launches or runs Python >= {LAUNCH_PCT:g}% of step time "
             f"(critical >= {LAUNCH_CRITICAL_PCT:g}%)",
        evidence=evidence, events=ev.gaps(a, LAUNCH_CAUSES),
        fixes=offer(a, "fused_optimizer", "torch_compile", "cuda_graph", "larger_batch", "fuse_layers", cap_ms=ms),
    )


def synchronizations(a: TraceAnalysis) -> Finding | None:
    """GPU idle caused by host-GPU synchronizations (queue drained by a sync) >= SYNC_PCT of step time."""
    ms, pct = _cost(a, "sync")
    if pct < SYNC_PCT:
        return None
    s = a.syncs
    evidence = [
        f"synchronizations: {per_step(s.count, a.steps.count, a.steps.marked)}; each drains the GPU's queue, "
        f"which then idles until the host launches again (host work after the sync included): {ms:.2f} ms per "
        f"step ({pct:.1f}%)",
    ]
    for c in s.by_cause[:4]:
        where = f" at {c.frame}" if c.frame else ""
        inner = f" -> {c.inner_op}" if c.inner_op and c.inner_op != c.op else ""
        evidence.append(f"{c.op}{inner}{where}: {per_step(c.count, a.steps.count, a.steps.marked)}, host blocked "
                        f"{c.blocked_ms:.2f} ms, GPU idle {c.gpu_idle_ms:.2f} ms in total ({' + '.join(c.calls)})")
    rows = union1d(host_calls.sync_call_rows(a.trace, a.launch_rows), host_calls.sync_op_rows(a.trace))
    events = ev.gaps(a, ("sync",), 2) + ev.host_rows(a, rows, 3)
    return _finding(
        a, ms, id="synchronizations", severity="critical" if pct >= SYNC_CRITICAL_PCT else "warning",
        title="Host-GPU synchronizations stall the GPU",
        rule=f"GPU idle after synchronizations >= {SYNC_PCT:g}% of step time (critical >= {SYNC_CRITICAL_PCT:g}%)",
        evidence=evidence, events=events,
        fixes=offer(a, "no_host_reads", "static_shapes", "pin_memory", "sync_debug", cap_ms=ms),
    )


def pageable_copies(a: TraceAnalysis) -> Finding | None:
    """Copies to or from pageable host memory moving >= PAGEABLE_MB_PER_STEP per step (per device)."""
    c = a.copies
    mb_per_step = c.pageable_mb_per_step
    if c.pageable_count == 0 or mb_per_step < PAGEABLE_MB_PER_STEP:
        return None
    h2d = c.by_direction.get("HtoD")
    ms = c.pageable_ms_per_step
    evidence = [
        f"{c.pageable_count} copies touch pageable host memory ({mb_per_step:.1f} MB, {ms:.2f} ms per step); "
        "CUDA stages them through a bounce buffer and blocks the host",
        f"the same bytes take {mb_per_step / PINNED_GB_S:.2f} ms per step pinned at {PINNED_GB_S:g} GB/s",
    ]
    if h2d and h2d.gb_per_s:
        evidence.append(f"host-to-device copies reach {h2d.gb_per_s:.1f} GB/s over {h2d.count} copies "
                        f"({h2d.pageable_count} pageable); pinned memory reaches several times that")
    if c.overlap_pct is not None:
        evidence.append(f"{c.overlap_pct:.0f}% of copy time overlaps compute (healthy: over {copies.HEALTHY_OVERLAP_PCT:g}%)")
    pct = a.window.pct(ms)
    return _finding(
        a, ms, id="pageable_copies", severity="warning" if pct >= PAGEABLE_WARNING_PCT else "info",
        title="Host-device copies use pageable memory",
        rule=f"copies to or from pageable host memory >= {PAGEABLE_MB_PER_STEP:g} MB per step "
             f"(warning when they take >= {PAGEABLE_WARNING_PCT:g}% of step time)",
        evidence=evidence, events=ev.gpu_rows(a, copies.copy_rows(a.trace, a.steps, pageable=True)),
        fixes=offer(a, "pin_memory", "pinned_reuse", cap_ms=ms),
    )


def exposed_copies(a: TraceAnalysis) -> Finding | None:
    """Copy time not overlapped by any kernel >= COPY_EXPOSED_PCT of step time."""
    c = a.copies
    ms = c.exposed_ms_per_step
    pct = a.window.pct(ms)
    if pct < COPY_EXPOSED_PCT:
        return None
    evidence = [f"copies take {c.per_step_ms:.2f} ms per step, {ms:.2f} ms ({pct:.1f}%) of it with no "
                f"kernel beside them ({c.pct_of_gpu_time:.0f}% of GPU busy time)"]
    for d, e in sorted(c.by_direction.items()):
        rate = f", {e.gb_per_s:.1f} GB/s" if e.gb_per_s else ""
        evidence.append(f"{d}: {e.count} copies, {e.mb:.1f} MB{rate}")
    return _finding(
        a, ms, id="exposed_copies", severity="warning", title="Copies the GPU waits on",
        rule=f"copy time with no kernel running beside it >= {COPY_EXPOSED_PCT:g}% of step time",
        evidence=evidence, events=ev.gpu_rows(a, copies.copy_rows(a.trace, a.steps)),
        fixes=offer(a, "pin_memory", "prefetch_copies", "resident_data", cap_ms=ms),
    )


def exposed_communication(a: TraceAnalysis) -> Finding | None:
    """Communication kernel time with no compute beside it, plus host waits on collectives,
    >= COMM_EXPOSED_PCT of step time."""
    cm = a.communication
    ms_idle, pct_idle = _cost(a, "communication")
    ms = cm.exposed_ms_per_step + ms_idle
    pct = a.window.pct(ms)
    if pct < COMM_EXPOSED_PCT:
        return None
    evidence = []
    if cm.present:
        evidence.append(f"communication kernels take {a.window.ms(cm.time_ms * 1000):.2f} ms per step, "
                        f"{cm.overlap_pct:.0f}% hidden under compute; {cm.exposed_ms_per_step:.2f} ms exposed")
    if pct_idle > 0:
        evidence.append(f"the GPU idles {ms_idle:.2f} ms per step while the host waits on collectives")
    k = a.kernels
    events = ev.gpu_rows(a, k.rows[k.category_of_row == _cat("communication")], 3) + ev.gaps(a, ("communication",), 2)
    return _finding(
        a, ms, id="exposed_communication", severity="critical" if pct >= COMM_CRITICAL_PCT else "warning",
        title="Communication not hidden behind compute",
        rule=f"exposed communication time + host waits on collectives >= {COMM_EXPOSED_PCT:g}% of step time "
             f"(critical >= {COMM_CRITICAL_PCT:g}%)",
        evidence=evidence, events=events,
        fixes=offer(a, "ddp_buckets", "nccl_check", "overlap_comm", "reduce_traffic", cap_ms=ms),
    )


def data_movement(a: TraceAnalysis) -> Finding | None:
    """Data-movement kernels (index, gather, scatter, sort, copy, cat, ...) >= DATA_MOVEMENT_PCT of kernel time."""
    k = a.kernels
    pct_k = k.categories_pct.get("data_movement", 0.0)
    if pct_k < DATA_MOVEMENT_PCT:
        return None
    ms = a.window.ms(k.categories_us["data_movement"])
    evidence = [f"{pct_k:.1f}% of kernel time moves data instead of computing ({ms:.2f} ms per step)"]
    for fam in k.data_movement[:6]:
        short = ", ".join(dict.fromkeys(kernel_label(n) for n in fam["kernels"][:3]))
        evidence.append(f"{fam['family']}: {fam['pct']:.1f}% of kernel time, {fam['count']} kernels ({short})")
    events = ev.gpu_rows(a, k.rows[k.category_of_row == _cat("data_movement")])
    return _finding(
        a, ms, id="data_movement", severity="warning",
        title="Much GPU time moves data rather than computing",
        rule=f"data-movement kernels >= {DATA_MOVEMENT_PCT:g}% of kernel time",
        evidence=evidence, events=events, fixes=offer(a, "torch_compile", "moe_dispatch", cap_ms=ms),
    )


def _cat(name: str) -> int:
    return CATEGORIES.index(name)


def fp32_gemms(a: TraceAnalysis) -> Finding | None:
    """GEMM/conv kernels whose names say plain FP32 (no tensor cores: sgemm, FFMA, SIMT kernels;
    `gemm_dtype.dtype_from_name`) >= FP32_GEMM_PCT of kernel time."""
    k = a.kernels
    fp32 = plain_fp32_gemms(k)
    pct_k = sum(t["pct"] for t in fp32)
    if pct_k < FP32_GEMM_PCT:
        return None
    ms = a.window.ms(1000 * sum(t["total_ms"] for t in fp32))
    evidence = [f"{pct_k:.1f}% of kernel time is FP32 matrix multiply without tensor cores ({ms:.2f} ms per step)"]
    evidence += [f"{kernel_label(t['name'])}: {t['pct']:.1f}%, {t['count']} launches" for t in fp32[:3]]
    names = {t["name"] for t in fp32}
    evidence += _code_lines(a, _kernel_launch_rows(a, names), "FP32 GEMM launches")
    return _finding(
        a, ms, id="fp32_gemms", severity="warning", title="Matrix multiplies run in FP32 without tensor cores",
        rule=f"FP32 (non-tensor-core) GEMM kernels >= {FP32_GEMM_PCT:g}% of kernel time",
        evidence=evidence, events=ev.kernels_where(a, lambda n: n in names),
        fixes=offer(a, "tf32", "bf16_autocast", cap_ms=ms),
    )


def allocations(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host is inside cudaMalloc/cudaFree-like calls >= ALLOC_PCT of step time."""
    ms, pct = _cost(a, "allocation")
    if pct < ALLOC_PCT:
        return None
    calls = {n: c for n, c in a.api.calls.items() if "alloc" in n.lower() or "free" in n.lower()}
    evidence = [f"the GPU idles {ms:.2f} ms per step ({pct:.1f}%) while the host allocates memory"]
    evidence += [f"{n}: {c.count} calls, {c.total_ms:.2f} ms" for n, c in calls.items()]
    events = ev.gaps(a, ("allocation",), 3) + ev.host_rows(a, host_calls.alloc_rows(a.trace), 2)
    return _finding(
        a, ms, id="allocations", severity="warning", title="Memory allocation in the training loop",
        rule=f"GPU idle during allocation calls >= {ALLOC_PCT:g}% of step time",
        evidence=evidence, events=events, fixes=offer(a, "expandable_segments", "stable_shapes", cap_ms=ms),
    )


def lock_contention(a: TraceAnalysis) -> Finding | None:
    """A CUDA call SLOW_FACTOR x slower than its median (and >= SLOW_FLOOR_US) while another thread
    allocates (any occurrence)."""
    cont = a.api.contention
    if not cont:
        return None
    ms = a.window.host_ms(1000 * sum(c.slow_ms for c in cont))
    evidence = [
        f"{c.call} on {c.thread} took over {SLOW_FACTOR:g}x its usual {c.typical_us:.1f} us {c.count} "
        f"time(s) ({c.slow_ms:.2f} ms in all) while {c.blocker} ran on {c.blocker_thread}: both need the "
        "CUDA driver's context lock"
        for c in cont[:4]
    ]
    stalled = {(c.call, c.thread) for c in cont}
    t0 = a.trace.span[0]
    events = [Event(s.call, s.thread, (s.t_us - t0) / 1000, s.dur_us / 1000, s.t_us)
              for s in a.api.slow if (s.call, s.thread) in stalled][:ev.MAX_EVENTS]
    events = events or ev.host_rows(a, host_calls.alloc_rows(a.trace), 3)  # the listed slow calls were others
    return _finding(
        a, ms, id="lock_contention", severity="warning", title="CUDA calls stall behind allocations on another thread",
        rule=f"a CUDA call >= {SLOW_FACTOR:g}x its median and >= {SLOW_FLOOR_US:g} us overlapping an allocation "
             "call on another thread",
        evidence=evidence, events=events, fixes=offer(a, "pinned_buffers_once", "warm_allocator", cap_ms=ms),
    )


def unstable_steps(a: TraceAnalysis) -> Finding | None:
    """Step time coefficient of variation >= STEP_CV_PCT over the profiled steps (at least MIN_CV_STEPS)."""
    s = a.step_summary
    if s.count < MIN_CV_STEPS or s.cv_pct < STEP_CV_PCT:
        return None
    d = a.steps.duration
    return _finding(
        a, 0.0, id="unstable_steps", severity="info", title="Step time varies a lot between steps",
        rule=f"coefficient of variation of step time >= {STEP_CV_PCT:g}% (at least {MIN_CV_STEPS} steps)",
        evidence=[f"steps take {s.min_ms:.1f} to {s.max_ms:.1f} ms (median {s.median_ms:.1f}, "
                  f"CV {s.cv_pct:.0f}%): profile past warm-up and over more steps before comparing; the "
                  f"figures here use the median step, which one outlier does not move"],
        events=ev.steps(a, [int(np.argmax(d)), int(np.argmin(d))]),
    )


def gpu_side_gaps(a: TraceAnalysis) -> Finding | None:
    """GPU idle with its next op already queued (GPU-side latency, cross-stream waits) >= QUEUED_PCT."""
    ms, pct = _cost(a, "queued")
    if pct < QUEUED_PCT:
        return None
    return _finding(
        a, ms, id="gpu_side_gaps", severity="info", title="The GPU idles with work already queued",
        rule=f"idle gaps whose next op was launched before the gap began >= {QUEUED_PCT:g}% of step time",
        evidence=[f"{pct:.1f}% of step time ({ms:.2f} ms per step) the GPU waits with its next op already "
                  "launched: inter-stream dependencies, event waits, or per-kernel latency"],
        events=ev.gaps(a, ("queued",)), fixes=offer(a, "cuda_graph", cap_ms=ms),
    )


GPU_BOUND_FIXES = ("cudnn_benchmark", "torch_compile", "measure_mfu", "cut_work")  # gpu_bound_finding's offer


def gpu_bound_finding(a: TraceAnalysis, compute_pct: float) -> Finding:
    """The GPU-bound verdict's own finding: what the busy GPU spends its time on.
    Written whenever the verdict is gpu_bound (GPU busy >= GPU_BOUND_BUSY_PCT of the step)."""
    k = a.kernels
    cats = sorted(((c, p) for c, p in k.categories_pct.items() if p >= CATEGORY_MIN_PCT), key=lambda cp: -cp[1])
    ms = compute_pct / 100 * a.window.step_ms
    evidence = [
        f"GPU busy {a.busy_pct:.1f}% of step time; kernels computing {compute_pct:.1f}% ({ms:.2f} ms per step)",
        "kernel time by category: " + ", ".join(f"{c.replace('_', ' ')} {p:.1f}%" for c, p in cats),
    ]
    tr = a.trace
    if tr.command_buffer_full_count:
        evidence.append(f"{tr.command_buffer_full_count} 'Command Buffer Full' events "
                        f"({tr.command_buffer_full_us / 1000:.1f} ms): the host filled the GPU's launch queue and "
                        "had to wait, so work is queued, never starved")
    if k.launch_delay_median_us is not None and k.launch_delay_median_us > QUEUED_DELAY_US:
        evidence.append(f"median launch-to-start delay {k.launch_delay_median_us / 1000:.1f} ms: kernels wait in "
                        "the queue behind earlier work")
    for t in k.top[:3]:
        evidence.append(f"top kernel {kernel_label(t['name'])}: {t['pct']:.1f}% of kernel time, "
                        f"{t['count']} launches, mean {t['mean_us']:.0f} us")
    top = {t["name"] for t in k.top[:3]}
    if tr.with_stack:
        m = _kernel_mask(a)
        evidence += _code_lines(a, a.launch_rows[m], "kernel time", (tr.gpu.end - tr.gpu.start)[m])
    return _finding(
        a, ms, id="gpu_bound", severity="critical", title="The GPU's own work bounds the step",
        rule=f"GPU busy >= {GPU_BOUND_BUSY_PCT:g}% of step time (verdict rule); kernel time by category",
        evidence=evidence, events=ev.kernels_where(a, lambda n: n in top),
        fixes=offer(a, *GPU_BOUND_FIXES, cap_ms=ms),
    )


def low_mfu(a: TraceAnalysis) -> Finding | None:
    """MFU < DENSE_MFU_PCT (the dense pre-training band's floor) while the job is gpu_bound: a warning
    under LOW_MFU_PCT (below the MoE/FP8 band too), information between. Cost: the step time above
    what the same FLOPs would take at DENSE_MFU_PCT MFU."""
    m = a.mfu
    pct = m.pct if m else None
    if pct is None or pct >= DENSE_MFU_PCT or verdict_primary(a)[0] != "gpu_bound":
        return None
    step = a.window.step_ms
    cost = step * (1 - pct / DENSE_MFU_PCT)
    gemm = m.gemm_dtypes_pct or {}
    evidence = [
        f"MFU {pct:.1f}%: {m.achieved_tflops:.1f} TFLOP/s achieved against the {m.peak_tflops:g} TFLOP/s "
        f"{m.dtype} peak ({m.peak_from}); healthy: {_bands()}",
        f"{'FLOPs per step' if a.steps.marked else 'FLOPs of the whole trace, no ProfilerStep markers:'} "
        f"{m.flops_per_step:.3g} ({m.source}: {m.source_detail}), step {step:.2f} ms ({a.window.basis})",
    ]
    if gemm:
        evidence.append("GEMM kernel time by dtype: " + ", ".join(f"{k} {v:.0f}%" for k, v in gemm.items()))
    if m.pct_of_measured is not None:
        evidence.append(f"{m.pct_of_measured:.1f}% of this GPU's measured {m.dtype} matmul ceiling "
                        f"({m.measured_tflops:.0f} TFLOP/s)")
    if m.pct_of_gemm_dtype_peak is not None:
        evidence.append(f"the GEMMs run in {m.gemm_dtype}: {m.pct_of_gemm_dtype_peak:.1f}% of that dtype's "
                        f"peak, but the {m.dtype} tensor-core peak goes unused")
    evidence.append("to see which top kernels are compute-, memory- or latency-bound: gpucheckup ncu-cmd "
                    "prints the Nsight Compute command, gpucheckup analyze --ncu reads its CSV")
    k = a.kernels
    gemms = k.rows[k.category_of_row == _cat("gemm_conv")]
    return _finding(
        a, cost, id="low_mfu", severity="warning" if pct < LOW_MFU_PCT else "info",
        title="Low model FLOPs utilisation",
        rule=f"MFU < {DENSE_MFU_PCT:g}% while gpu_bound (warning < {LOW_MFU_PCT:g}%)",
        evidence=evidence, events=ev.gpu_rows(a, gemms if len(gemms) else k.rows),
        fixes=offer(a, "torch_compile", "bigger_gemms", cap_ms=cost),
    )


def profiler_overhead(a: TraceAnalysis) -> Finding | None:
    """The profiled steps ran >= MIN_INFLATION_PCT slower than the same job without the profiler: the
    trace's host-side figures are inflated, and the report's shares are corrected to the unprofiled step."""
    p = a.profiler
    if not p or not p.applied:
        return None
    d = a.steps.duration
    return _finding(
        a, 0.0, id="profiler_overhead", severity="info", title="The profiler slowed the host: shares corrected",
        rule=f"traced step >= {MIN_INFLATION_PCT:g}% slower than the unprofiled step "
             "(analysis/one_trace/profiler_overhead.py)",
        evidence=[
            f"profiled steps took {p.traced_step_ms:.2f} ms against {p.unprofiled_step_ms:.2f} ms without the "
            f"profiler ({p.source}): +{p.inflation_pct:.0f}%, all of it on the host",
            f"the GPU works {p.gpu_ms_per_step:.2f} ms per step, {p.busy_pct_unprofiled:.1f}% of the unprofiled "
            f"step (the trace shows {a.timeline.busy_pct:.1f}% of the profiled one"
            + (f"; {p.comm_wait_ms:.2f} ms per step of collective kernels waiting for other ranks is not work"
               if p.comm_wait_ms > 0 else "") + ")",
            f"idle-time causes are scaled by {p.host_idle_factor:.2f} to the idle time the job has without the "
            "profiler; MFU uses the unprofiled step",
        ],
        events=ev.steps(a, [int(np.argsort(d)[len(d) // 2])], "median step window"),
    )


RULES = [
    input_pipeline, launch_overhead, synchronizations, pageable_copies, exposed_copies, exposed_communication,
    data_movement, fp32_gemms, allocations, lock_contention, gpu_side_gaps, unstable_steps, profiler_overhead, low_mfu,
]
