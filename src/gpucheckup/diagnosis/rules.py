"""The rules: each states its metric and threshold, and returns a Finding or None.

Costs are per step, measured on the trace; a fix's saving is at most the cost it removes.
Thresholds are percent of step time unless said otherwise. Each rule's docstring is its
definition; docs/metrics.md repeats them.
"""

from __future__ import annotations

import re

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.gap_causes import CAUSES
from gpucheckup.analysis.gemm_dtype import dtype_from_name
from gpucheckup.analysis.kernels import QUEUED_DELAY_US, STARVED_DELAY_US, kernel_label
from gpucheckup.diagnosis.findings import Finding, Fix
from gpucheckup.diagnosis.verdict import primary as verdict_primary

INPUT_PCT = 5.0
DATALOADER_PCT = 10.0
LAUNCH_PCT = 10.0
SYNC_PCT = 2.0
PAGEABLE_MB_PER_STEP = 1.0
PINNED_GB_S = 25.0  # conservative pinned host-to-device rate (PCIe 4.0 x16 reaches ~25; the H200 host 54)
COPY_EXPOSED_PCT = 5.0
COMM_EXPOSED_PCT = 5.0
DATA_MOVEMENT_PCT = 15.0
FP32_GEMM_PCT = 10.0
ALLOC_PCT = 2.0
STEP_CV_PCT = 20.0
QUEUED_PCT = 10.0
LOW_MFU_PCT = 20.0  # below the lowest healthy band (MoE with FP8: 20-32%)
DENSE_MFU_PCT = 35.0  # the dense pre-training band's floor (35-50%)



def _step_ms(a: TraceAnalysis) -> float:
    return a.step_summary["mean_ms"]


def _per_step(a: TraceAnalysis, us: float) -> float:
    """Microseconds summed over the window and every device, as ms per step per device."""
    return us / 1000 / a.steps.count / max(len(a.timeline.busy), 1)


def _cost(a: TraceAnalysis, cause: str) -> tuple[float, float]:
    """A gap cause's idle time per step (ms) and its percent of step time."""
    return a.gaps_summary["per_step_ms"][cause], a.gaps_summary["pct_of_step"][cause]


def _top_gaps(a: TraceAnalysis, cause: str, n: int = 3) -> list[dict]:
    """The longest gaps whose largest share is the given cause, as trace pointers."""
    idx = CAUSES.index(cause)
    g = a.timeline.gaps
    if len(g) == 0:
        return []
    dom = a.causes.dominant()
    sel = [i for i in (g.dur.argsort()[::-1]) if dom[i] == idx][:n]
    return [{"name": f"GPU idle ({cause})", "t_us": float(g.start[i]), "dur_us": float(g.dur[i]),
             "device": int(g.device[i]), "step": int(g.step[i])} for i in sel]


def input_pipeline(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host waits in DataLoader `__next__` >= 5% of step time, or the
    DataLoader itself >= 10% of step time."""
    ms, pct = _cost(a, "input")
    dl = a.dataloader
    if pct < INPUT_PCT and dl["pct_of_step"] < DATALOADER_PCT:
        return None
    single = any("_SingleProcessDataLoaderIter" in n for n in dl["iterators"])
    evidence = [
        f"DataLoader __next__ takes {dl['pct_of_step']:.1f}% of step time ({dl['median_ms']:.1f} ms of a "
        f"{a.step_summary['median_ms']:.1f} ms median step)",
        f"the GPU sits idle {pct:.1f}% of the step waiting for data ({ms:.1f} ms per step)",
    ]
    if single:
        evidence.append("the iterator is _SingleProcessDataLoaderIter: num_workers=0, so loading and "
                        "augmentation run in the training process, serially with the GPU work")
    fixes = [
        Fix("Load batches in worker processes: DataLoader(num_workers=N) with N up to the free CPU cores"
            if single else "Raise DataLoader num_workers (up to the free CPU cores) and prefetch_factor",
            "config", ms, "DataLoader(dataset, num_workers=8, persistent_workers=True, prefetch_factor=4)"),
        Fix("Pin the batches: DataLoader(pin_memory=True), then x.to(device, non_blocking=True)", "config",
            min(ms, a.copies["per_step_ms"]), key="pin_memory"),
        Fix("Move per-sample augmentation to the GPU (batched transforms) or precompute it once", "code", ms),
        Fix("Store the dataset in a faster format or on local disk (sharded, pre-decoded)", "refactor", ms),
    ]
    return Finding(
        id="input_pipeline", severity="critical" if pct >= 20 else "warning",
        title="The GPU waits for input data",
        rule=f"GPU idle while the host is in DataLoader __next__ >= {INPUT_PCT:g}% of step time, "
             f"or DataLoader >= {DATALOADER_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, events=_top_gaps(a, "input"), fixes=fixes,
    )


def launch_overhead(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host dispatches ops, launches kernels or runs Python between them
    (`launch` + `other_host` + `allocation` gap time) >= 10% of step time."""
    ms = sum(_cost(a, c)[0] for c in ("launch", "other_host", "allocation"))
    pct = sum(_cost(a, c)[1] for c in ("launch", "other_host", "allocation"))
    if pct < LAUNCH_PCT:
        return None
    k = a.kernels
    pat = a.gap_pattern
    evidence = [
        f"GPU busy only {a.busy_pct:.1f}% of the step; {pct:.1f}% of step time is idle while the "
        f"host issues work ({_cost(a, 'launch')[1]:.1f}% inside ops and CUDA calls, "
        f"{_cost(a, 'other_host')[1]:.1f}% in Python between ops)",
        f"{k.count} kernels, mean {k.mean_us:.1f} us, median {k.median_us:.1f} us; "
        f"{k.small_pct:.1f}% run under 20 us, shorter than launching them takes",
        f"idle time is {pat['shape']} ({pat.get('gap_count', 0)} gaps; the longest gap per step holds "
        f"{pat['largest_gap_share_pct']:.0f}% of idle time)",
    ]
    if k.launch_delay_median_us is not None:
        d = k.launch_delay_median_us
        if d < STARVED_DELAY_US:
            meaning = "kernels start as soon as they are launched: the GPU waits for the host, starved rather than queued"
        elif d > QUEUED_DELAY_US:
            meaning = "most kernels wait in a queue, so the host runs ahead part of the time"
        else:
            meaning = "between starved (< 50 us) and queued (> 1 ms)"
        evidence.append(f"median launch-to-start delay {d:.1f} us: {meaning}")
    fixes = []
    if k.categories_pct.get("optimizer", 0) >= 5:
        fixes.append(Fix("Use the fused optimizer: torch.optim.AdamW(..., fused=True) (one kernel per "
                         "parameter group instead of several per tensor list)", "config",
                         ms * k.categories_pct["optimizer"] / 100))
    fixes += [
        Fix("Compile the model: model = torch.compile(model) fuses elementwise and normalisation kernels",
            "code", ms, key="torch_compile"),
        Fix("Capture the step in a CUDA graph: torch.compile(model, mode=\"reduce-overhead\") or "
            "torch.cuda.graphs", "code", ms),
        Fix("Give each kernel more work: a larger batch per step (gradient accumulation keeps the global batch)",
            "code", ms),
        Fix("Fuse the small layers into fewer, larger operations (custom or Triton kernels)", "refactor", ms),
    ]
    return Finding(
        id="launch_overhead", severity="critical" if pct >= 30 else "warning",
        title="The CPU cannot launch kernels fast enough (small-kernel storm)",
        rule=f"GPU idle while the host launches or runs Python >= {LAUNCH_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, events=_top_gaps(a, "launch"), fixes=fixes,
    )


def synchronizations(a: TraceAnalysis) -> Finding | None:
    """GPU idle caused by host-GPU synchronizations (queue drained by a sync) >= 2% of step time."""
    ms, pct = _cost(a, "sync")
    if pct < SYNC_PCT:
        return None
    s = a.syncs
    evidence = [
        f"{s['count_per_step']:.1f} synchronizations per step; each drains the GPU's queue, which then idles "
        f"until the host launches again (host work after the sync included): {ms:.2f} ms per step ({pct:.1f}%)",
    ]
    events = []
    for c in s["by_cause"][:4]:
        where = f" at {c['frame']}" if c["frame"] else ""
        inner = f" -> {c['inner_op']}" if c["inner_op"] and c["inner_op"] != c["op"] else ""
        evidence.append(f"{c['op']}{inner}{where}: {c['per_step']:.1f} per step, host blocked "
                        f"{c['blocked_ms']:.2f} ms, GPU idle {c['gpu_idle_ms']:.2f} ms in total "
                        f"({' + '.join(c['calls'])})")
    for p in s["points"][:5]:
        events.append({"name": f"sync: {p['op']}", "t_us": p["t_us"], "dur_us": p["blocked_us"]})
    ops = {c["op"] for c in s["by_cause"]}
    fixes = []
    if ops & {"aten::item", "aten::_local_scalar_dense"}:
        fixes.append(Fix("Stop reading GPU values on the host every step: no .item(), int(tensor), "
                         "print(loss) in the loop; log every N steps", "config", ms))
    fixes += [
        Fix("Replace data-dependent shapes (sizes read from GPU tensors, bincount/nonzero/unique) with static "
            "bounds, e.g. a fixed capacity instead of int(counts.max())", "code", ms),
        Fix("Find every sync with torch.cuda.set_sync_debug_mode(\"warn\")", "code", 0.0),
    ]
    return Finding(
        id="synchronizations", severity="critical" if pct >= 15 else "warning",
        title="Host-GPU synchronizations stall the GPU",
        rule=f"GPU idle after synchronizations >= {SYNC_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, events=events, fixes=fixes,
    )


def pageable_copies(a: TraceAnalysis) -> Finding | None:
    """Copies to or from pageable host memory moving >= 1 MB per step."""
    c = a.copies
    mb_per_step = c["pageable_mb"] / a.steps.count
    if c["pageable_count"] == 0 or mb_per_step < PAGEABLE_MB_PER_STEP:
        return None
    h2d = c["by_direction"].get("HtoD", {})
    time_ms = _per_step(a, sum(d["time_us"] for d in c["by_direction"].values() if d["pageable_count"]))
    saving = max(time_ms - mb_per_step / PINNED_GB_S, 0.0)
    pct = 100 * time_ms / _step_ms(a)
    evidence = [
        f"{c['pageable_count']} copies touch pageable host memory ({mb_per_step:.1f} MB per step); CUDA stages "
        "them through a bounce buffer and blocks the host",
    ]
    if h2d.get("gb_per_s"):
        evidence.append(f"host-to-device copies reach {h2d['gb_per_s']:.1f} GB/s over {h2d['count']} copies "
                        f"({h2d['pageable_count']} pageable); pinned memory reaches several times that")
    if c["overlap_pct"] is not None:
        evidence.append(f"{c['overlap_pct']:.0f}% of copy time overlaps compute (healthy: over 80%)")
    fixes = [
        Fix("Pin the batches: DataLoader(pin_memory=True), then x.to(device, non_blocking=True)", "config", saving,
            key="pin_memory"),
        Fix("Keep reused host tensors pinned (tensor.pin_memory()) and copy them on a side stream", "code", saving),
    ]
    return Finding(
        id="pageable_copies", severity="warning" if pct >= 1 else "info",
        title="Host-device copies use pageable memory",
        rule=f"copies to or from pageable host memory >= {PAGEABLE_MB_PER_STEP:g} MB per step",
        cost_ms_per_step=time_ms, cost_pct_of_step=pct, evidence=evidence, fixes=fixes,
    )


def exposed_copies(a: TraceAnalysis) -> Finding | None:
    """Copy time not overlapped by any kernel >= 5% of step time."""
    c = a.copies
    pct = c["exposed_pct_of_step"]
    if pct < COPY_EXPOSED_PCT:
        return None
    ms = pct / 100 * _step_ms(a)
    evidence = [f"copies take {c['time_ms'] / a.steps.count:.2f} ms per step, {pct:.1f}% of the step with no "
                f"kernel beside them ({c['pct_of_gpu_time']:.0f}% of GPU busy time)"]
    for d, e in sorted(c["by_direction"].items()):
        rate = f", {e['gb_per_s']:.1f} GB/s" if e["gb_per_s"] else ""
        evidence.append(f"{d}: {e['count']} copies, {e['mb']:.1f} MB{rate}")
    fixes = [
        Fix("Pin the batches: DataLoader(pin_memory=True), then x.to(device, non_blocking=True)", "config", ms,
            key="pin_memory"),
        Fix("Prefetch the next batch to the GPU on a side stream while this one computes", "code", ms),
        Fix("Keep data resident on the GPU (move preprocessing there; avoid round trips)", "refactor", ms),
    ]
    return Finding(
        id="exposed_copies", severity="warning", title="Copies the GPU waits on",
        rule=f"copy time with no kernel running beside it >= {COPY_EXPOSED_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, fixes=fixes,
    )


def exposed_communication(a: TraceAnalysis) -> Finding | None:
    """Communication kernel time with no compute beside it, plus host waits on collectives,
    >= 5% of step time."""
    cm = a.communication
    ms_idle, pct_idle = _cost(a, "communication")
    pct = cm["exposed_pct_of_step"] + pct_idle
    if pct < COMM_EXPOSED_PCT:
        return None
    ms = cm["exposed_ms_per_step"] + ms_idle
    evidence = []
    if cm["present"]:
        evidence.append(f"communication kernels take {cm['time_ms'] / a.steps.count:.2f} ms per step, "
                        f"{cm['overlap_pct']:.0f}% hidden under compute; {cm['exposed_ms_per_step']:.2f} ms exposed")
    if pct_idle > 0:
        evidence.append(f"the GPU idles {ms_idle:.2f} ms per step while the host waits on collectives")
    fixes = [
        Fix("Tune DDP bucketing: DistributedDataParallel(bucket_cap_mb=..., gradient_as_bucket_view=True)",
            "config", ms),
        Fix("Check NCCL's transport (NCCL_DEBUG=INFO), topology (nvidia-smi topo -m) and bus bandwidth "
            "(nccl-tests) against the link", "config", ms),
        Fix("Overlap communication with compute (DDP's default, FSDP prefetching); accumulate gradients to "
            "communicate less often", "code", ms),
        Fix("Reduce traffic: sharding strategy, compression, or a topology-aware placement", "refactor", ms),
    ]
    return Finding(
        id="exposed_communication", severity="critical" if pct >= 20 else "warning",
        title="Communication not hidden behind compute",
        rule=f"exposed communication time + host waits on collectives >= {COMM_EXPOSED_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, fixes=fixes,
    )


def data_movement(a: TraceAnalysis) -> Finding | None:
    """Data-movement kernels (index, gather, scatter, sort, copy, cat, ...) >= 15% of kernel time."""
    k = a.kernels
    pct_k = k.categories_pct.get("data_movement", 0.0)
    if pct_k < DATA_MOVEMENT_PCT:
        return None
    ms = _per_step(a, k.categories_us["data_movement"])
    evidence = [f"{pct_k:.1f}% of kernel time moves data instead of computing ({ms:.2f} ms per step)"]
    for fam in k.data_movement[:6]:
        short = ", ".join(dict.fromkeys(kernel_label(n) for n in fam["kernels"][:3]))
        evidence.append(f"{fam['family']}: {fam['pct']:.1f}% of kernel time, {fam['count']} kernels ({short})")
    fixes = [
        Fix("Compile the routing code (torch.compile) so gathers and scatters fuse into their consumers",
            "code", ms / 2),
        Fix("Avoid the argsort/index_select/index_add round trip: a fused MoE dispatch (grouped GEMM with "
            "the permutation inside, e.g. megablocks-style kernels)", "refactor", ms * 0.8),
    ]
    return Finding(
        id="data_movement", severity="warning",
        title="Much GPU time moves data rather than computing",
        rule=f"data-movement kernels >= {DATA_MOVEMENT_PCT:g}% of kernel time",
        cost_ms_per_step=ms, cost_pct_of_step=100 * ms / _step_ms(a), evidence=evidence, fixes=fixes,
    )


def fp32_gemms(a: TraceAnalysis) -> Finding | None:
    """GEMM/conv kernels whose names say plain FP32 (no tensor cores: sgemm, FFMA, SIMT kernels;
    `gemm_dtype.dtype_from_name`) >= 10% of kernel time."""
    k = a.kernels
    fp32 = [t for t in k.per_name if t["category"] == "gemm_conv" and dtype_from_name(t["name"]) == "fp32"]
    pct_k = sum(t["pct"] for t in fp32)
    if pct_k < FP32_GEMM_PCT:
        return None
    ms = _per_step(a, 1000 * sum(t["total_ms"] for t in fp32))
    evidence = [f"{pct_k:.1f}% of kernel time is FP32 matrix multiply without tensor cores ({ms:.2f} ms per step)"]
    evidence += [f"{kernel_label(t['name'])}: {t['pct']:.1f}%, {t['count']} launches" for t in fp32[:3]]
    fixes = [
        Fix("Allow TF32 tensor cores for FP32 matmuls: torch.set_float32_matmul_precision(\"high\") "
            "(and torch.backends.cudnn.allow_tf32 = True)", "config", ms * 0.6),
        Fix("Train in bf16 with torch.autocast(\"cuda\", dtype=torch.bfloat16)", "code", ms * 0.75),
    ]
    return Finding(
        id="fp32_gemms", severity="warning", title="Matrix multiplies run in FP32 without tensor cores",
        rule=f"FP32 (non-tensor-core) GEMM kernels >= {FP32_GEMM_PCT:g}% of kernel time",
        cost_ms_per_step=ms, cost_pct_of_step=100 * ms / _step_ms(a), evidence=evidence, fixes=fixes,
    )


def allocations(a: TraceAnalysis) -> Finding | None:
    """GPU idle while the host is inside cudaMalloc/cudaFree-like calls >= 2% of step time."""
    ms, pct = _cost(a, "allocation")
    if pct < ALLOC_PCT:
        return None
    calls = {n: c for n, c in a.api["calls"].items() if "alloc" in n.lower() or "free" in n.lower()}
    evidence = [f"the GPU idles {ms:.2f} ms per step ({pct:.1f}%) while the host allocates memory"]
    evidence += [f"{n}: {c['count']} calls, {c['total_ms']:.2f} ms" for n, c in calls.items()]
    fixes = [
        Fix("Let the caching allocator grow instead of reallocating: "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "config", ms),
        Fix("Keep tensor shapes stable across steps (pad or bucket variable lengths)", "code", ms),
    ]
    return Finding(
        id="allocations", severity="warning", title="Memory allocation in the training loop",
        rule=f"GPU idle during allocation calls >= {ALLOC_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct, evidence=evidence, fixes=fixes,
    )


def lock_contention(a: TraceAnalysis) -> Finding | None:
    """A CUDA call 10x slower than its median while another thread allocates (any occurrence)."""
    cont = a.api["contention"]
    if not cont:
        return None
    ms = sum(c["slow_ms"] for c in cont) / a.steps.count
    evidence = [
        f"{c['call']} on {c['thread']} took over 10x its usual {c['typical_us']:.1f} us {c['count']} time(s) "
        f"({c['slow_ms']:.2f} ms in all) while {c['blocker']} ran on {c['blocker_thread']}: both need the "
        "CUDA driver's context lock"
        for c in cont[:4]
    ]
    fixes = [
        Fix("Allocate pinned buffers once and reuse them instead of calling cudaHostAlloc per batch", "code", ms),
        Fix("Warm up the caching allocator before the loop so cudaMalloc leaves the steady state", "code", ms),
    ]
    return Finding(
        id="lock_contention", severity="warning", title="CUDA calls stall behind allocations on another thread",
        rule="a CUDA call >= 10x its median and >= 50 us overlapping an allocation call on another thread",
        cost_ms_per_step=ms, cost_pct_of_step=100 * ms / _step_ms(a), evidence=evidence, fixes=fixes,
    )


def unstable_steps(a: TraceAnalysis) -> Finding | None:
    """Step time coefficient of variation >= 20% over the profiled steps."""
    s = a.step_summary
    if s["count"] < 3 or s["cv_pct"] < STEP_CV_PCT:
        return None
    return Finding(
        id="unstable_steps", severity="info", title="Step time varies a lot between steps",
        rule=f"coefficient of variation of step time >= {STEP_CV_PCT:g}%",
        cost_ms_per_step=0.0,
        cost_pct_of_step=0.0,
        evidence=[f"steps take {s['min_ms']:.1f} to {s['max_ms']:.1f} ms (median {s['median_ms']:.1f}, "
                  f"CV {s['cv_pct']:.0f}%): profile past warm-up and over more steps before comparing"],
    )


def gpu_side_gaps(a: TraceAnalysis) -> Finding | None:
    """GPU idle with its next op already queued (GPU-side latency, cross-stream waits) >= 10%."""
    ms, pct = _cost(a, "queued")
    if pct < QUEUED_PCT:
        return None
    return Finding(
        id="gpu_side_gaps", severity="info", title="The GPU idles with work already queued",
        rule=f"idle gaps whose next op was launched before the gap began >= {QUEUED_PCT:g}% of step time",
        cost_ms_per_step=ms, cost_pct_of_step=pct,
        evidence=[f"{pct:.1f}% of step time ({ms:.2f} ms per step) the GPU waits with its next op already "
                  "launched: inter-stream dependencies, event waits, or per-kernel latency"],
        fixes=[Fix("Capture the step in a CUDA graph to cut per-kernel scheduling latency", "code", ms)],
    )


def gpu_bound_finding(a: TraceAnalysis, compute_pct: float) -> Finding:
    """The GPU-bound verdict's own finding: what the busy GPU spends its time on.
    Written whenever the verdict is gpu_bound (GPU busy >= 80% of the step)."""
    k = a.kernels
    step = _step_ms(a)
    cats = sorted(((c, p) for c, p in k.categories_pct.items() if p >= 1), key=lambda cp: -cp[1])
    evidence = [
        f"GPU busy {a.busy_pct:.1f}% of step time; kernels computing {compute_pct:.1f}%",
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
    cat_ms = {c: _per_step(a, v) for c, v in k.categories_us.items()}
    conv_ms = _per_step(a, 1000 * sum(t["total_ms"] for t in k.per_name
                                      if re.search(r"conv|fprop|dgrad|wgrad", t["name"], re.I)))
    fixes = []
    if conv_ms >= 0.1 * step:
        fixes.append(Fix("Let cuDNN pick the fastest convolution algorithms: torch.backends.cudnn.benchmark = True "
                         "(with fixed input shapes)", "config", conv_ms * 0.2))
    fused = cat_ms["elementwise"] + cat_ms["reduction_norm"]
    if fused >= 0.1 * step:
        fixes.append(Fix("Fuse elementwise and normalisation kernels with torch.compile (one memory pass "
                         "instead of several)", "code", fused * 0.5, key="torch_compile"))
    if (a.mfu or {}).get("pct") is None:
        fixes.append(Fix("Measure MFU to see how far the GEMMs are from the GPU's peak: re-run with "
                         "--flops-per-step F (or --params N --tokens-per-step T), or record with record_shapes=True",
                         "code", 0.0))
    fixes.append(Fix("Cut the work itself: activation checkpointing trade-offs, a smaller sequence or model, "
                     "fewer redundant ops", "refactor", 0.0))
    return Finding(
        id="gpu_bound", severity="critical", title="The GPU's own work bounds the step",
        rule="GPU busy >= 80% of step time (verdict rule); kernel time by category",
        cost_ms_per_step=compute_pct / 100 * step, cost_pct_of_step=compute_pct,
        evidence=evidence, fixes=fixes,
    )


def low_mfu(a: TraceAnalysis) -> Finding | None:
    """MFU < 35% (the dense pre-training band's floor) while the job is gpu_bound: a warning under 20%
    (below the MoE/FP8 band too), information between 20 and 35%. Cost: the step time above what the
    same FLOPs would take at 35% MFU."""
    m = a.mfu
    pct = m.get("pct") if m else None
    if pct is None or pct >= DENSE_MFU_PCT or verdict_primary(a)[0] != "gpu_bound":
        return None
    step = a.step_summary["median_ms"]
    cost = step * (1 - pct / DENSE_MFU_PCT)
    gemm = m.get("gemm_dtypes_pct") or {}
    evidence = [
        f"MFU {pct:.1f}%: {m['achieved_tflops']:.1f} TFLOP/s achieved against the {m['peak_tflops']:g} TFLOP/s "
        f"{m['dtype']} peak ({m['peak_from']}); healthy: dense pre-training 35-50%, MoE with FP8 20-32%",
        f"FLOPs per step {m['flops_per_step']:.3g} ({m['source']}: {m['source_detail']}), median step {step:.2f} ms",
    ]
    if gemm:
        evidence.append("GEMM kernel time by dtype: " + ", ".join(f"{k} {v:.0f}%" for k, v in gemm.items()))
    if m.get("pct_of_measured") is not None:
        evidence.append(f"{m['pct_of_measured']:.1f}% of this GPU's measured {m['dtype']} matmul ceiling "
                        f"({m['measured_tflops']:.0f} TFLOP/s)")
    if m.get("pct_of_gemm_dtype_peak") is not None:
        evidence.append(f"the GEMMs run in {m['gemm_dtype']}: {m['pct_of_gemm_dtype_peak']:.1f}% of that dtype's "
                        f"peak, but the {m['dtype']} tensor-core peak goes unused")
    evidence.append("to see which top kernels are compute-, memory- or latency-bound: gpucheckup ncu-cmd "
                    "prints the Nsight Compute command, gpucheckup analyze --ncu reads its CSV")
    k = a.kernels
    per_step = {c: v / 1000 / a.steps.count for c, v in k.categories_us.items()}
    fixes = [
        Fix("Fuse the non-GEMM work with torch.compile so more of the step is matrix math", "code",
            min(cost, 0.5 * (per_step["elementwise"] + per_step["reduction_norm"])), key="torch_compile"),
        Fix("Give the GEMMs more work: larger batch or hidden sizes, dimensions multiples of 64", "code",
            min(cost, 0.3 * per_step["gemm_conv"])),
    ]
    return Finding(
        id="low_mfu", severity="warning" if pct < LOW_MFU_PCT else "info",
        title="Low model FLOPs utilisation",
        rule=f"MFU < {DENSE_MFU_PCT:g}% while gpu_bound (warning < {LOW_MFU_PCT:g}%)",
        cost_ms_per_step=cost, cost_pct_of_step=100 * cost / step if step > 0 else 0.0,
        evidence=evidence, fixes=fixes,
    )


def profiler_overhead(a: TraceAnalysis) -> Finding | None:
    """The profiled steps ran >= 5% slower than the same job without the profiler: the trace's host-side
    figures are inflated, and the report's shares are corrected to the unprofiled step."""
    p = a.profiler
    if not p or not p["applied"]:
        return None
    return Finding(
        id="profiler_overhead", severity="info", title="The profiler slowed the host: shares corrected",
        rule="traced step >= 5% slower than the unprofiled step (analysis/profiler_overhead.py)",
        cost_ms_per_step=0.0, cost_pct_of_step=0.0,
        evidence=[
            f"profiled steps took {p['traced_step_ms']:.2f} ms against {p['unprofiled_step_ms']:.2f} ms without the "
            f"profiler ({p['source']}): +{p['inflation_pct']:.0f}%, all of it on the host",
            f"the GPU works {p['gpu_ms_per_step']:.2f} ms per step, {p['busy_pct_unprofiled']:.1f}% of the unprofiled "
            f"step (the trace shows {a.timeline.busy_pct:.1f}% of the profiled one)",
            f"idle-time causes are scaled by {p['host_idle_factor']:.2f} to the idle time the job has without the "
            "profiler; MFU uses the unprofiled step",
        ],
    )


RULES = [
    input_pipeline, launch_overhead, synchronizations, pageable_copies, exposed_copies, exposed_communication,
    data_movement, fp32_gemms, allocations, lock_contention, gpu_side_gaps, unstable_steps, profiler_overhead, low_mfu,
]
