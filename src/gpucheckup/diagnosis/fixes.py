"""The fix catalogue: one entry per fix, with when it applies and what it can save.

Each entry has a key (one change, however many findings point at it), the action, its tier
(configuration only, code change, refactor), how to do it, its precondition (checked on the
trace's analysis, on the run's for run-level fixes, or on the CPU-side profile of a trace without device
activity (analysis/one_trace/host/cpu_profile.py) for CPU-side ones: a fix is offered only where it holds) and
its saving model with the reason for it. Savings are ms per step of the window's step time
(analysis/one_trace/window.py), predicted from the cost the fix removes and never more than it; a fix that
removes part of a cost names the part. docs/metrics.md ("Fix catalogue") repeats every model.
Rules build a finding's fixes with `offer(a, key, ...)`; `make(key, saving_ms)` builds one from
the catalogue with a saving computed elsewhere.
"""

from __future__ import annotations

import re
from typing import Callable

import msgspec
import numpy as np

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.one_trace.host.cpu_profile import CpuProfile
from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.flops.gemm_dtype import plain_fp32_gemms
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, data_movement_family
from gpucheckup.analysis.one_trace.host.dataloader import workers_to_keep_pace
from gpucheckup.analysis import intervals
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES
from gpucheckup.analysis.one_trace.host.optimizer_spans import closure_rows, optimizer_rows, step_classes
from gpucheckup.analysis.flops.mfu import HEALTHY_BANDS_PCT
from gpucheckup.analysis.run_logs.environment import ThreadBudget
from gpucheckup.analysis.run_logs.run import RunAnalysis
from gpucheckup.whatif import compiled, edits
from gpucheckup.whatif.compiled import COMPILE_FUSES_MOVES
from gpucheckup.diagnosis.findings import Fix
from gpucheckup.diagnosis.framework_words import framework_how
from gpucheckup.hardware.peaks import lookup
from gpucheckup.trace.tables import CPU_OP

from gpucheckup.hardware.peaks import PINNED_GB_S  # the pinned rate assumed for a pageable copy
# Ops whose output size depends on tensor values, so the host must read the GPU to allocate it.
DATA_DEPENDENT_OPS = frozenset({
    "aten::nonzero", "aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_consecutive",
    "aten::unique_dim", "aten::bincount", "aten::masked_select", "aten::repeat_interleave", "aten::histc",
})
HOST_READ_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
# Copies whose sync is a read of GPU values when the trace copies to the host (`.cpu()`, `.to("cpu")`).
COPY_READ_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
# A mixture-of-experts token dispatch: top-k routing, a sort or count of tokens per expert, and an
# indexed gather/scatter of tokens to and from the experts.
MOE_ROUTING_OPS = frozenset({"aten::topk"})
MOE_GROUPING_OPS = frozenset({"aten::argsort", "aten::sort", "aten::bincount", "aten::histc"})
MOE_MOVE_OPS = frozenset({"aten::index_add_", "aten::index_select", "aten::scatter_add_", "aten::index_put_",
                          "aten::scatter_"})
MOE_FAMILIES = ("sort", "gather", "scatter", "index")
DENSE_MFU_PCT = HEALTHY_BANDS_PCT["dense_pretraining"][0]  # the dense band's floor: the target low_mfu measures
OPTIMIZER_FUSE_MIN_PCT = 5.0  # optimizer kernels' share of kernel time below which fusing them is noise
# torch's fused optimizers (`fused=True`: Adam, AdamW, SGD, Adagrad) run their update as
# `multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<n>, Fused<Class>MathFunctor<...>>` (ATen's
# fused_adam_impl.cu and its siblings); the for-each and for-loop forms never do.
FUSED_OPTIMIZER_KERNEL = re.compile(r"FusedOptimizerTensorListMetadata|Fused\w*MathFunctor")
CONV_MIN_PCT_OF_STEP = 10.0  # convolution time worth re-tuning algorithms for


class CatalogueFix(msgspec.Struct, frozen=True):
    """One fix: what to do, how deep a change it is, when it applies, what it saves and why."""

    key: str
    action: str  # may hold {fields} filled from `fill`
    tier: str
    when: str  # the precondition, in words
    saves: str  # the saving model and the reason for it, in words
    applies: Callable[[object], bool]
    saving: Callable[[object], float]
    how: str = ""
    fill: Callable[[object], dict] | None = None
    bottleneck: str = ""  # the verdict (diagnosis/verdict.py) whose cost the fix removes; "" when it names none
    replay: Callable[..., object] | None = None  # the graph edit (whatif/edits.py) that predicts its saving
    replay_params: tuple = ()  # (name, value) pairs passed to that edit
    edit_params: Callable[[object], tuple] | None = None  # more (name, value) pairs, read off the trace
    ceiling: bool = False  # `saving` is the mechanism's whole time on the critical path: a replay is capped there

    def params(self, a) -> tuple:
        """The (name, value) pairs the graph edit is replayed with on this trace's analysis."""
        return self.replay_params + (self.edit_params(a) if self.edit_params else ())


# ---- quantities the preconditions and saving models read (ms per step of the window) ----

def _workers(a: TraceAnalysis) -> int:
    """The worker count the advice names and the edit replays (analysis/one_trace/host/dataloader.py)."""
    return max(a.dataloader.workers_to_keep_pace, 1)


def advised_workers(x) -> int | None:
    """The DataLoader workers that keep pace, as the advice computes them (a trace's workers_to_keep_pace; a CPU-side
    profile's from its main thread's DataLoader time per step); None for a run directory, which has no per-batch
    cost. `gpucheckup try dataloader_workers` starts from it."""
    if _is_run(x):
        return None
    if _is_cpu(x):
        return max(workers_to_keep_pace(x.per_step(x.dataloader_ms), x.per_step(x.span_ms)), 1)
    return _workers(x)


def _workers_advice(x) -> dict:
    """The worker count and its reason, for the action and `how` (a run directory has no per-batch cost; a CPU-side
    profile's is its main thread's time in DataLoader __next__ per step)."""
    n = advised_workers(x)
    if n is None:
        return {"workers": "N", "why": "N up to the CPU cores left free (a trace says how many keep pace)"}
    if _is_cpu(x):
        load, step = x.per_step(x.dataloader_ms), x.per_step(x.span_ms)
    else:
        load, step = x.dataloader.ms_per_step, x.window.step_ms
    return {"workers": n, "why": f"loading takes {load:.1f} ms a batch in the training process and the rest of the "
            f"step {max(step - load, 0.0):.1f} ms, so {n} {'worker keeps' if n == 1 else 'workers keep'} pace; it "
            "needs that many free cores (with fewer, the wait shrinks in proportion)"}


def _idle(a: TraceAnalysis, *causes: str) -> float:
    return sum(a.gaps_summary.per_step_ms[c] for c in causes)


def _launch_idle(a: TraceAnalysis) -> float:
    return _idle(a, "launch", "other_host")


def _model_idle(a: TraceAnalysis, *causes: str) -> float:
    """The idle of these causes per step that falls outside the optimizer's own spans and its zero_grad ranges
    (analysis/one_trace/host/optimizer_spans.py) and, where the trace records the optimizer's closures (the model's
    forward and backward run inside them: Lightning's automatic optimization), inside a closure: the idle a change to
    the model alone can remove. A model compiled, captured in graphs or given fused layers leaves the optimizer step
    and the loop's code around the model eager (whatif/compiled.py `_outside_the_model`). Without closures the loop's
    code is not told from the model's, and counts as the model's (an upper bound)."""
    total = _idle(a, *causes)
    gaps, time = a.timeline.gaps, a.causes.time
    idle = time[:, [CAUSES.index(c) for c in causes]].sum(axis=1)
    if total <= 0 or idle.sum() <= 0:
        return total
    lo, hi, _ = optimizer_rows(a.trace, zero_grad=True)
    outside = intervals.covered_between(intervals.union(lo, hi), gaps.start, gaps.end)
    c_lo, c_hi = closure_rows(a.trace)
    if len(c_lo):
        in_closures = intervals.covered_between(intervals.union(c_lo, c_hi), gaps.start, gaps.end)
        outside = np.maximum(outside, gaps.dur - in_closures)
    share = np.divide(np.maximum(gaps.dur - outside, 0.0), gaps.dur, out=np.zeros(len(idle)), where=gaps.dur > 0)
    return total * float((idle * share).sum() / idle.sum())


def _batch_bound(a: TraceAnalysis) -> float:
    """The most a `edits.BATCH_FACTOR` times larger batch saves per original batch: the host's launch work stays per
    step (the launch idle is host work: at least that much of it), so a larger step takes at least the launch idle and
    saves per original batch at most step - launch idle / factor (the step the idle is of: `gaps_step_ms`); and never
    more than the launch idle. (The data wait is left out: on the H200's Lightning loop twice the batch measured 59.8%
    faster per sample, docs/validation.md 7j, more than a loader time growing with the batch would allow.)"""
    launch = _launch_idle(a)
    return max(min(launch, a.gaps_step_ms - launch / edits.BATCH_FACTOR), 0.0)


def _compile_fusion(a: TraceAnalysis) -> tuple[float, float]:
    """torch.compile's fusion of the model's kernels (those outside the `optimizer` category: the optimizer stays
    eager), judged on the GPU's order alone (`compiled.fused_in_gpu_order`, the replay's grouping): the share of the
    model's launches whose kernels fold into another, and the kernel time per step the fusion removes (each fused
    kernel keeps its longest member's time)."""
    k = a.kernels
    model = k.category_of_row != CATEGORIES.index("optimizer")
    if not model.any():
        return 0.0, 0.0
    gpu, names = a.trace.gpu, a.trace.names
    order = np.argsort(gpu.start[k.rows], kind="stable")  # the optimizer's kernels too: they break a chain
    rows, cats = k.rows[order], k.category_of_row[order]
    steps = np.searchsorted(a.steps.start, gpu.start[rows], side="right")
    folded, saved_us = compiled.fused_in_gpu_order([names[int(i)] for i in gpu.name[rows].tolist()],
                                                   [CATEGORIES[int(c)] for c in cats.tolist()], gpu.stream[rows],
                                                   steps, gpu.end[rows] - gpu.start[rows])
    return folded / int(model.sum()), a.window.ms(saved_us)


def _compile_bound(a: TraceAnalysis) -> float:
    """torch.compile's bound: the model's launch idle times the share of its launches that fold into another kernel,
    plus the kernel time the fusion removes (`_compile_fusion`)."""
    share, saved_ms = _compile_fusion(a)
    return _model_idle(a, "launch", "other_host") * share + saved_ms


def _host_ops(a: TraceAnalysis) -> set[str]:
    """Names of the CPU ops in the trace."""
    ids = unique(a.trace.host.name[a.trace.host.cat == CPU_OP])
    return {a.trace.names[int(i)] for i in ids}


# Optimizers whose for-each step runs nothing on the CPU before its first launch but the Python the fused form runs
# too (gathering the parameters, grouping them by device and dtype): torch's SGD keeps no step count. The Adam family
# updates a CPU step tensor per parameter there (1.0 of AdamW's 2.4 ms span on the H200's launch-bound MLP, which
# its fused form removed: docs/validation.md 6l, 7d).
NO_CPU_WORK_BEFORE_LAUNCH = frozenset({"SGD"})


def _optimizer_span_ms(a: TraceAnalysis) -> float:
    """The optimizer's own spans (analysis/one_trace/host/optimizer_spans.py: `Optimizer.step#` ranges less the closures
    they call) as host time per step: the host work a fused optimizer collapses into a launch or two. In a trace with
    no operator and no launch record (a CUPTI light window) an optimizer of NO_CPU_WORK_BEFORE_LAUNCH counts from its
    first optimizer kernel's start, as the replay (whatif/edits.fused_optimizer) keeps the Python before the first
    launch: a kernel starts at or after its launch, and host work while the GPU still ran earlier work was off the
    critical path. Per step: the spans that start inside the analysis window, cut at its end, over the steps they start
    in. A step's mark comes from inside its optimizer step, so a light window's first step begins inside the range of
    the step before it (on the H200's Lightning loop a 59 ms range, closure and all, CUPTI's first use: counted, it
    read the whole launch idle, docs/validation.md 6n), and its last range may close after the window or not at all."""
    lo, hi, _ = optimizer_rows(a.trace)
    if not len(lo):
        return 0.0
    if a.trace.light_activities is not None:
        keeps = np.array([c in NO_CPU_WORK_BEFORE_LAUNCH for c in step_classes(a.trace)], dtype=bool)
        lo = np.where(keeps, _first_optimizer_kernel(a, lo, hi), lo)
    first, last = a.steps.window
    inside = (lo >= first) & (lo < last)
    if not inside.any():
        return 0.0
    steps_in = len(unique(np.searchsorted(a.steps.start, lo[inside], side="right")))
    total = float(np.nansum(np.minimum(hi[inside], last) - lo[inside]))
    return a.window.host_ms(total * a.steps.count / steps_in)


def _first_optimizer_kernel(a: TraceAnalysis, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per span [lo, hi]: the start of the first optimizer kernel that starts inside it; `hi` where none does (then
    nothing there for a fused kernel to replace)."""
    k = a.kernels
    starts = np.sort(a.trace.gpu.start[k.rows[k.category_of_row == CATEGORIES.index("optimizer")]].astype(np.float64))
    if not len(starts):
        return hi
    at = np.minimum(np.searchsorted(starts, lo, side="left"), len(starts) - 1)
    first = starts[at]
    return np.where((first >= lo) & (first <= hi), first, hi)


def _already_fused(a: TraceAnalysis) -> bool:
    """Whether the optimizer already runs torch's fused kernels (FUSED_OPTIMIZER_KERNEL among the `optimizer` kernels'
    names): the fix is in place."""
    k = a.kernels
    names = a.trace.gpu.name[k.rows[k.category_of_row == CATEGORIES.index("optimizer")]]
    return bool(np.isin(names, a.trace.name_ids(FUSED_OPTIMIZER_KERNEL.search)).any())


def _fused_optimizer_bound(a: TraceAnalysis) -> float:
    """The most a fused optimizer can save per step: its own spans' host time where that time is on the critical
    path (no more than the GPU's launch idle: a GPU-bound step hides the host), plus the optimizer kernels' time (the
    fused kernel moves fewer bytes than a for-each update's passes: whatif/optimizer_passes.py)."""
    return min(_optimizer_span_ms(a), _launch_idle(a)) + _kernel_ms(a, "optimizer")


def _kernel_ms(a: TraceAnalysis, *cats: str) -> float:
    return a.window.ms(sum(a.kernels.categories_us[c] for c in cats))


def _indexing_ms(a: TraceAnalysis) -> float:
    """Kernel ms per step of the data-movement families torch.compile fuses (whatif.COMPILE_FUSES_MOVES)."""
    fams = a.kernels.data_movement
    return a.window.ms(1000.0 * sum(f["total_ms"] for f in fams if f["family"] in COMPILE_FUSES_MOVES))


def _sync_share(a: TraceAnalysis, ops: frozenset) -> float:
    """The share of sync-caused GPU idle that follows syncs from the given ops."""
    groups = a.syncs.by_cause
    total = sum(g.gpu_idle_ms for g in groups)
    part = sum(g.gpu_idle_ms for g in groups if g.op in ops or (g.inner_op or "") in ops)
    return part / total if total > 0 else 0.0


def _has_sync_from(a: TraceAnalysis, ops: frozenset) -> bool:
    return any(g.op in ops or (g.inner_op or "") in ops for g in a.syncs.by_cause)


def _host_read_ops(a: TraceAnalysis) -> frozenset:
    """The ops whose syncs read GPU values on the host: .item(), and copies when the trace copies to the host."""
    to_host = (a.copies.by_direction.get("DtoH") or None) is not None
    return HOST_READ_OPS | (COPY_READ_OPS if to_host else frozenset())


def _sync_saving(a: TraceAnalysis, ops: frozenset) -> float:
    return _idle(a, "sync") * _sync_share(a, ops)


def _pinned_saving(a: TraceAnalysis) -> float:
    c = a.copies
    return max(c.pageable_ms_per_step - c.pageable_mb_per_step / PINNED_GB_S, 0.0)


def _has_pageable(a: TraceAnalysis) -> bool:
    return a.copies.pageable_count > 0


# DDP's forward range; its Reducer's ops (torch::distributed::reducer::mul_out, ...ddp.reducer::copy_bucket_to_grad)
DDP_MARKS = ("DistributedDataParallel", "reducer::")
FSDP_MARKS = ("FSDP::", "fsdp::", "FullyShardedDataParallel")  # FSDP2's ranges and ops; FSDP1's module


def uses_ddp(trace) -> bool:
    """Whether the trace shows DistributedDataParallel (its forward range or its Reducer's ops) and no FSDP:
    the precondition of DDP-only fixes (bucket_cap_mb, gradient_as_bucket_view)."""
    names = trace.names
    ddp = any(n.startswith(DDP_MARKS[0]) or DDP_MARKS[1] in n for n in names)
    return ddp and not any(n.startswith(FSDP_MARKS) for n in names)


def _comm_exposed(a: TraceAnalysis) -> bool:
    return a.communication.exposed_ms_per_step + _idle(a, "communication") > 0


def single_process_loader(a: TraceAnalysis) -> bool:
    return any("_SingleProcessDataLoaderIter" in n for n in a.dataloader.iterators)


def _multi_process_loader(a: TraceAnalysis) -> bool:
    return any("_MultiProcessingDataLoaderIter" in n for n in a.dataloader.iterators)


def _input_wait(a: TraceAnalysis) -> bool:
    return a.dataloader.present or _idle(a, "input") > 0


def _fp32_ms(a: TraceAnalysis) -> float:
    return a.window.ms(1000 * sum(t["total_ms"] for t in plain_fp32_gemms(a.kernels)))


def _critical_ms(a: TraceAnalysis, keep: Callable[[str, int], bool]) -> float:
    """ms per step of the kernels for which keep(name, category index) holds, on the critical path only
    (analysis/one_trace/gpu/gpu_critical.py): what making them faster can save at most."""
    k = a.kernels
    if not len(k.rows):
        return 0.0
    n = len(CATEGORIES)
    pairs = a.trace.gpu.name[k.rows].astype(np.int64) * n + k.category_of_row  # (name, category) of each kernel
    chosen = np.zeros(len(a.trace.names) * n, dtype=bool)  # looked up by pair: keep() once per distinct pair
    for x in unique(pairs).tolist():
        chosen[x] = keep(a.trace.names[x // n], x % n)
    return a.window.ms(float(a.critical_us[chosen[pairs]].sum()))


def _fp32_critical_ms(a: TraceAnalysis) -> float:
    """The plain-FP32 GEMM kernels' time on the critical path, ms per step."""
    fp32 = {t["name"] for t in plain_fp32_gemms(a.kernels)}
    return _critical_ms(a, lambda name, _cat: name in fp32)


def _peak_ratio(a: TraceAnalysis, dtype: str) -> float | None:
    """FP32 FMA peak over the dtype's tensor-core peak on the trace's GPU, when both are known."""
    name = a.trace.devices[0].name if a.trace.devices else ""
    gpu = lookup(name) if name else None
    if gpu is None or not gpu.peak("fp32") or not gpu.peak(dtype):
        return None
    return gpu.peak("fp32") / gpu.peak(dtype)


def _faster_dtype_saving(a: TraceAnalysis, dtype: str) -> float:
    ratio = _peak_ratio(a, dtype)
    fp32 = _fp32_critical_ms(a)
    return fp32 * (1 - ratio) if ratio is not None else fp32


def _moe_dispatch(a: TraceAnalysis) -> bool:
    ops = _host_ops(a)
    return bool(ops & MOE_ROUTING_OPS and ops & MOE_GROUPING_OPS and ops & MOE_MOVE_OPS)


def _moe_ms(a: TraceAnalysis) -> float:
    """The token dispatch's data-movement kernels' time on the critical path, ms per step."""
    dm = CATEGORIES.index("data_movement")
    return _critical_ms(a, lambda name, cat: cat == dm and data_movement_family(name) in MOE_FAMILIES)


def _conv_ms(a: TraceAnalysis) -> float:
    return a.window.ms(1000 * sum(t["total_ms"] for t in a.kernels.per_name
                                  if re.search(r"conv|fprop|dgrad|wgrad", t["name"], re.I)))


def _mfu_pct(a: TraceAnalysis) -> float | None:
    return a.mfu.pct if a.mfu else None


def _low_mfu_cost(a: TraceAnalysis) -> float:
    pct = _mfu_pct(a)
    return a.window.step_ms * (1 - pct / DENSE_MFU_PCT) if pct is not None and pct < DENSE_MFU_PCT else 0.0


def _below_band(a: TraceAnalysis) -> bool:
    """MFU is known and below the dense band, and GEMMs ran."""
    pct = _mfu_pct(a)
    return pct is not None and pct < DENSE_MFU_PCT and _kernel_ms(a, "gemm_conv") > 0


def _gemm_to_band(a: TraceAnalysis) -> float:
    pct = _mfu_pct(a)
    if pct is None or pct >= DENSE_MFU_PCT:
        return 0.0
    gemm = CATEGORIES.index("gemm_conv")
    return min(_critical_ms(a, lambda _name, cat: cat == gemm) * (1 - pct / DENSE_MFU_PCT), _low_mfu_cost(a))


def _is_run(x) -> bool:
    return isinstance(x, RunAnalysis)


def _is_cpu(x) -> bool:
    return isinstance(x, CpuProfile)


def _no_workers(x) -> bool:
    if _is_cpu(x):
        return any("_SingleProcessDataLoaderIter" in n for n in x.loader_iterators)
    return x.loaders["max_workers"] == 0 if _is_run(x) else single_process_loader(x)


def _trace(f: Callable[[TraceAnalysis], float]) -> Callable[[object], float]:
    """A saving model that the trace measures; 0 for a run-level finding (no per-step figure) and a CPU-side one."""
    return lambda x: 0.0 if _is_run(x) or _is_cpu(x) else f(x)


def _never_on_run(f: Callable[[TraceAnalysis], bool]) -> Callable[[object], bool]:
    """A GPU trace's precondition: never on a run's or a CPU-side profile's finding."""
    return lambda x: not (_is_run(x) or _is_cpu(x)) and f(x)


def _input_wait_ms(x) -> float:
    """The time per step the loop waits for data: the GPU's `input` idle, or on a CPU-side profile the main
    thread's time in DataLoader __next__ (the most that batches ready when asked for can give back)."""
    if _is_cpu(x):
        return x.per_step(x.dataloader_ms)
    return 0.0 if _is_run(x) else _idle(x, "input")


def _cpu_python(x) -> bool:
    """A CPU-side profile whose main thread runs Python with no operator open outside the DataLoader."""
    return _is_cpu(x) and x.python_outside_loader_ms > 0


def _cpu_python_ms(x) -> float:
    """A CPU-side profile's Python between operators outside the DataLoader, per step; 0 elsewhere."""
    return x.per_step(x.python_outside_loader_ms) if _is_cpu(x) else 0.0


def _zero(_x) -> float:
    return 0.0


def _always(_x) -> bool:
    return True


INPUT_SAVES = ("all of the GPU idle while the host waits for data (`input` gap time): with batches ready when "
               "asked for, that wait is gone; the loading work itself moves off the critical path")
LAUNCH_SAVES = "the GPU idle while the host launches kernels or runs Python between them (`launch` + `other_host`)"
CPU_INPUT_SAVES = ("the main thread's time in DataLoader __next__ per step: with batches ready when asked for, the "
                   "loop stops waiting; more cores on the loading cannot give back more than that wait")
CPU_PYTHON_WHEN = "CPU-side check-up: the main thread runs Python with no operator open outside the DataLoader"
CPU_PYTHON_SAVES = ("the main thread's Python between operators outside the DataLoader, per step (upper bound: all "
                    "of it): the time the loop spends in Python with no operator running")

CATALOGUE: list[CatalogueFix] = [
    CatalogueFix(
        "dataloader_workers", "Load batches in worker processes: DataLoader(num_workers={workers})", "config",
        when="the training loop iterates a single-process DataLoader (_SingleProcessDataLoaderIter; in a run "
             "directory: every DataLoader has num_workers=0)",
        saves=INPUT_SAVES + "; workers prepare the next batches while the GPU computes (CPU-side: " + CPU_INPUT_SAVES
              + ")",
        applies=_no_workers, saving=_input_wait_ms,
        how="DataLoader(dataset, num_workers={workers}, persistent_workers=True): {why}",
        fill=lambda x: _workers_advice(x), bottleneck="input_bound", replay=edits.dataloader_workers,
        edit_params=lambda a: (("workers", _workers(a)),)),
    CatalogueFix(
        "more_workers", "Raise DataLoader num_workers (up to the free CPU cores) and prefetch_factor", "config",
        when="the DataLoader already uses worker processes (_MultiProcessingDataLoaderIter) and the GPU (CPU-side: the "
             "training loop) waits for it",
        saves=INPUT_SAVES + "; more workers raise the batch rate until it matches the GPU's (CPU-side: "
              + CPU_INPUT_SAVES + ")",
        applies=lambda x: (any("_MultiProcessingDataLoaderIter" in n for n in x.loader_iterators) if _is_cpu(x)
                           else _never_on_run(_multi_process_loader)(x)),
        saving=_input_wait_ms,
        bottleneck="input_bound", replay=edits.dataloader_workers),
    CatalogueFix(
        "pin_memory", "Pin the batches: DataLoader(pin_memory=True), then x.to(device, non_blocking=True)", "config",
        when="the trace has copies to or from pageable host memory",
        saves="the pageable copies' time per step minus the time the same bytes take pinned, at a conservative "
              f"{PINNED_GB_S:g} GB/s: pinning removes the staging through CUDA's bounce buffer and lets the copy "
              "overlap compute, but the bytes still move",
        applies=_never_on_run(_has_pageable), saving=_trace(_pinned_saving),
        bottleneck="copy_bound", replay=edits.pin_memory),
    CatalogueFix(
        "gpu_augment", "Move per-sample augmentation to the GPU (batched transforms) or precompute it once", "code",
        when="the host waits in the DataLoader", saves=INPUT_SAVES,
        applies=_never_on_run(_input_wait), saving=_trace(lambda a: _idle(a, "input")),
        bottleneck="input_bound"),
    CatalogueFix(
        "fast_storage", "Store the dataset in a faster format or on local disk (sharded, pre-decoded)", "refactor",
        when="the host waits in the DataLoader", saves=INPUT_SAVES + " (CPU-side: " + CPU_INPUT_SAVES + ")",
        applies=lambda x: x.dataloader_ms > 0 if _is_cpu(x) else _never_on_run(_input_wait)(x),
        saving=_input_wait_ms,
        bottleneck="input_bound"),
    CatalogueFix(
        "fused_optimizer", "Use the fused optimizer: torch.optim.AdamW(..., fused=True) (one kernel per parameter "
        "group instead of several per tensor list)", "config",
        when=f"optimizer kernels take >= {OPTIMIZER_FUSE_MIN_PCT:g}% of kernel time, and none of them is the fused "
             "form's already",
        saves="the optimizer's own host time (its `Optimizer.step` spans less any closure they call), no more than "
              "the launch idle, plus the optimizer kernels' time: the for-loop or foreach optimizer's Python and "
              "launches run while the GPU waits, and the fused one launches a kernel or two that read and write "
              "each tensor once, where a foreach update passes over the parameters once per operation",
        applies=_never_on_run(lambda a: a.kernels.categories_pct.get("optimizer", 0) >= OPTIMIZER_FUSE_MIN_PCT
                              and not _already_fused(a)),
        saving=_trace(_fused_optimizer_bound),
        bottleneck="launch_bound", replay=edits.fused_optimizer, ceiling=True),
    CatalogueFix(
        "torch_compile", "Compile the model: model = torch.compile(model) fuses elementwise, normalisation and "
        "indexing (gather, scatter, index_put) kernels", "code",
        when="the trace has elementwise, normalisation or indexing kernels",
        saves="the model's launch idle (as for `cuda_graph`: the optimizer and the loop's code stay eager) times the "
              "share of the model's launches whose kernels fuse into another (folded kernels are not launched: each "
              "chain of elementwise, normalisation, indexing and copy kernels in a step keeps one kernel per "
              "reduction in it), plus the kernel time the fusion removes: the kernels are memory-bound, and a fused "
              "kernel moves at least its largest member's operand, so it takes at least its longest member's time "
              "and the others' time goes (as the replay fuses them)",
        applies=_never_on_run(lambda a: _kernel_ms(a, "elementwise", "reduction_norm") + _indexing_ms(a) > 0),
        saving=_trace(_compile_bound),
        replay=compiled.torch_compile),  # no bottleneck: it removes launches and memory-bound kernel time alike
    CatalogueFix(
        "cuda_graph", "Capture the step in a CUDA graph: torch.compile(model, mode=\"reduce-overhead\") or "
        "torch.cuda.graphs", "code",
        when="the GPU idles while the host launches, or with work already queued, and no synchronization comes from "
             "an op whose output size depends on values (" + ", ".join(sorted(DATA_DEPENDENT_OPS)) + "): a graph "
             "replays fixed shapes, and such an op sets new ones each step (torch.compile's cudagraph trees record a "
             "graph per new shape and run eager meanwhile: on the H200's MoE job, routing by bincount, "
             "mode=\"reduce-overhead\" ran 62% slower, docs/validation.md 6p)",
        saves="the model's launch idle plus its idle with work already queued (`queued`): a graph replays the "
              "model's forward and backward from one launch, so no host time falls between their kernels, and the "
              "per-kernel scheduling latency shrinks (upper bound: all of it); the optimizer step and the loop's "
              "code around the model stay eager, so their idle stays (outside the model: the optimizer's own spans, "
              "zero_grad and, where the trace records the optimizer's closures, what runs outside them); plus, as "
              "mode=\"reduce-overhead\" compiles the model with Inductor first, the kernel time its fusion removes "
              "(as for `torch_compile`)",
        applies=_never_on_run(lambda a: _launch_idle(a) + _idle(a, "queued") > 0
                              and not _has_sync_from(a, DATA_DEPENDENT_OPS)),
        saving=_trace(lambda a: _model_idle(a, "launch", "other_host", "queued") + _compile_fusion(a)[1]),
        bottleneck="launch_bound", replay=compiled.cuda_graphs),
    CatalogueFix(
        "larger_batch", "Give each kernel more work: a larger batch per step (gradient accumulation keeps the "
        "global batch)", "code",
        when="the GPU idles while the host launches",
        saves=LAUNCH_SAVES + ", per original batch: launch overhead is per kernel, not per sample, so larger "
              f"kernels hide it; a {edits.BATCH_FACTOR:g}x batch keeps the host's launch work per step (at least the "
              f"launch idle), so it saves at most step - launch idle / {edits.BATCH_FACTOR:g}, and no more than the "
              "launch idle",
        applies=_never_on_run(lambda a: _launch_idle(a) > 0), saving=_trace(_batch_bound),
        replay=edits.larger_batch),
    CatalogueFix(
        "fuse_layers", "Fuse the small layers into fewer, larger operations (custom or Triton kernels)", "refactor",
        when="the GPU idles while the host launches",
        saves=LAUNCH_SAVES + " between the model's kernels: each fused kernel is one launch instead of several "
              "(upper bound: all of it); the optimizer and the loop's code keep theirs (as for `cuda_graph`)",
        applies=_never_on_run(lambda a: _launch_idle(a) > 0),
        saving=_trace(lambda a: _model_idle(a, "launch", "other_host")),
        bottleneck="launch_bound"),
    CatalogueFix(
        "no_host_reads", "Stop reading GPU values on the host every step: no .item(), int(tensor), print(loss) in "
        "the loop; log every N steps", "config",
        when="a synchronization comes from aten::item / aten::_local_scalar_dense, or from a copy (aten::to, "
             "_to_copy, copy_) in a trace that copies to the host",
        saves="the sync idle that follows those syncs (their share of the GPU idle after syncs): without the read "
              "the host keeps queueing work",
        applies=_never_on_run(lambda a: _has_sync_from(a, _host_read_ops(a))),
        saving=_trace(lambda a: _sync_saving(a, _host_read_ops(a))),
        bottleneck="sync_bound", replay=edits.remove_syncs, replay_params=(("ops", HOST_READ_OPS), ("reads", True))),
    CatalogueFix(
        "static_shapes", "Replace data-dependent shapes (sizes read from GPU tensors, bincount/nonzero/unique) with "
        "static bounds, e.g. a fixed capacity instead of int(counts.max())", "code",
        when="a synchronization comes from an op whose output size depends on values (" +
             ", ".join(sorted(DATA_DEPENDENT_OPS)) + ")",
        saves="the sync idle that follows those syncs: with a static bound the host need not read the size back",
        applies=_never_on_run(lambda a: _has_sync_from(a, DATA_DEPENDENT_OPS)),
        saving=_trace(lambda a: _sync_saving(a, DATA_DEPENDENT_OPS)),
        bottleneck="sync_bound", replay=edits.static_shapes, replay_params=(("ops", DATA_DEPENDENT_OPS),)),
    CatalogueFix(
        "sync_debug", "Find every sync with torch.cuda.set_sync_debug_mode(\"warn\")", "code",
        when="the trace has host-GPU synchronizations",
        saves="nothing by itself: it finds the syncs the other fixes remove",
        applies=_never_on_run(lambda a: a.syncs.count > 0), saving=_zero,
        bottleneck="sync_bound"),
    CatalogueFix(
        "pinned_reuse", "Keep reused host tensors pinned (tensor.pin_memory()) and copy them on a side stream",
        "code", when="the trace has copies to or from pageable host memory",
        saves="as pin_memory: the pageable copy time minus the same bytes at the pinned rate",
        applies=_never_on_run(_has_pageable), saving=_trace(_pinned_saving),
        bottleneck="copy_bound", replay=edits.pin_memory),
    CatalogueFix(
        "prefetch_copies", "Prefetch the next batch to the GPU on a side stream while this one computes", "code",
        when="copies run with no kernel beside them",
        saves="the exposed copy time: a copy overlapped with compute costs the step nothing",
        applies=_never_on_run(lambda a: a.copies.exposed_ms_per_step > 0),
        saving=_trace(lambda a: a.copies.exposed_ms_per_step),
        bottleneck="copy_bound"),
    CatalogueFix(
        "resident_data", "Keep data resident on the GPU (move preprocessing there; avoid round trips)", "refactor",
        when="copies run with no kernel beside them",
        saves="the exposed copy time: data that stays on the GPU is not copied",
        applies=_never_on_run(lambda a: a.copies.exposed_ms_per_step > 0),
        saving=_trace(lambda a: a.copies.exposed_ms_per_step),
        bottleneck="copy_bound"),
    *[CatalogueFix(
        key, action, tier,
        when="communication kernels run with no compute beside them, or the host waits on collectives"
             + ("; the trace shows DistributedDataParallel (its forward range or Reducer ops) and no FSDP"
                if key == "ddp_buckets" else ""),
        saves="the exposed communication time plus the GPU idle while the host waits on collectives (upper bound: "
              + why + ")",
        applies=_never_on_run(lambda a, key=key: _comm_exposed(a) and (key != "ddp_buckets" or uses_ddp(a.trace))),
        saving=_trace(lambda a: a.communication.exposed_ms_per_step + _idle(a, "communication")),
        bottleneck="communication_bound", replay=edits.comm_overlap if key in ("ddp_buckets", "overlap_comm") else None)
      for key, action, tier, why in [
          ("ddp_buckets", "Tune DDP bucketing: DistributedDataParallel(bucket_cap_mb=..., "
           "gradient_as_bucket_view=True)", "config", "buckets sized to start reducing early overlap all of it"),
          ("nccl_check", "Check NCCL's transport (NCCL_DEBUG=INFO), topology (nvidia-smi topo -m) and bus bandwidth "
           "(nccl-tests) against the link", "config", "a collective on the wrong transport runs several times slower"),
          ("overlap_comm", "Overlap communication with compute (DDP's default, FSDP prefetching); accumulate "
           "gradients to communicate less often", "code", "fully overlapped communication is hidden"),
          ("reduce_traffic", "Reduce traffic: sharding strategy, compression, or a topology-aware placement",
           "refactor", "less traffic takes proportionally less time"),
      ]],
    CatalogueFix(
        "moe_dispatch", "Avoid the argsort/index_select/index_add round trip: a fused MoE dispatch (grouped GEMM with "
        "the permutation inside, e.g. megablocks-style kernels)", "refactor",
        when="the trace routes tokens to experts: aten::topk, a sort or count of tokens (argsort, sort, bincount, "
             "histc) and an indexed gather or scatter (index_add_, index_select, scatter_add_, index_put_, scatter_)",
        saves="the sort, gather, scatter and index kernels' time on the critical path (queued or waited on: "
              "analysis/one_trace/gpu/gpu_critical.py): the fused dispatch permutes tokens inside the grouped GEMM's "
              "loads, so those kernels do not run",
        applies=_never_on_run(_moe_dispatch), saving=_trace(_moe_ms),
        bottleneck="gpu_bound"),
    CatalogueFix(
        "tf32", "Allow TF32 tensor cores for FP32 matmuls: torch.set_float32_matmul_precision(\"high\") "
        "(and torch.backends.cudnn.allow_tf32 = True)", "config",
        when="GEMM kernels run in plain FP32 (no tensor cores)",
        saves="the FP32 GEMM time on the critical path (queued or waited on: analysis/one_trace/gpu/gpu_critical.py) "
              "x (1 - FP32 FMA peak / TF32 tensor-core peak) of the trace's GPU (hardware/peaks.py; all of it when "
              "the GPU is unknown): a compute-bound GEMM's time scales with the peak it runs at, and a GEMM the "
              "GPU idles after saves nothing by ending sooner",
        applies=_never_on_run(lambda a: _fp32_ms(a) > 0), saving=_trace(lambda a: _faster_dtype_saving(a, "tf32")),
        bottleneck="gpu_bound", replay=edits.tf32, ceiling=True),
    CatalogueFix(
        "bf16_autocast", "Train in bf16 with torch.autocast(\"cuda\", dtype=torch.bfloat16)", "code",
        when="GEMM kernels run in plain FP32 (no tensor cores)",
        saves="the FP32 GEMM time on the critical path x (1 - FP32 FMA peak / bf16 tensor-core peak), as for tf32",
        applies=_never_on_run(lambda a: _fp32_ms(a) > 0),
        saving=_trace(lambda a: _faster_dtype_saving(a, "bf16")),
        bottleneck="gpu_bound", replay=edits.bf16, ceiling=True),
    CatalogueFix(
        "compile_cpu", "Compile the model for the CPU: model = torch.compile(model) runs forward and backward as "
        "generated C++ instead of one Python-dispatched operator after another", "code",
        when=CPU_PYTHON_WHEN,
        saves=CPU_PYTHON_SAVES + "; a compiled graph runs its operators without returning to Python between them",
        applies=_cpu_python, saving=_cpu_python_ms),
    CatalogueFix(
        "python_off_loop", "Take per-step Python off the training loop: vectorize per-sample Python loops into "
        "tensor ops, compute metrics and log every N steps (py-spy shows where the time goes)", "code",
        when=CPU_PYTHON_WHEN,
        saves=CPU_PYTHON_SAVES + "; Python that no longer runs every step costs the step nothing",
        applies=_cpu_python, saving=_cpu_python_ms),
    CatalogueFix(
        "cpu_threads", "Give each process its share of the cores for its operators: torch.set_num_threads({k}) at "
        "start (torchrun sets OMP_NUM_THREADS=1 unless told: OMP_NUM_THREADS={k})", "config",
        when="CPU-side check-up of a run directory: the job's processes run fewer intra-op threads "
             "(torch.get_num_threads()) than the usable cores per process",
        saves="the main thread's operator time per step x (1 - threads / (usable cores / processes)): an operator "
              "that splits its work over k threads instead of t takes t/k of its time at best (upper bound)",
        applies=lambda x: isinstance(x, ThreadBudget) and 0 < x.threads < x.cores_per_process,
        saving=lambda x: x.busy_ms_per_step * (1 - x.threads / x.cores_per_process)
        if isinstance(x, ThreadBudget) and x.cores_per_process > 0 else 0.0,
        fill=lambda x: {"k": x.cores_per_process}),
    CatalogueFix(
        "expandable_segments", "Let the caching allocator grow instead of reallocating: "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "config",
        when="the GPU idles while the host allocates memory",
        saves="the GPU idle during allocation calls (`allocation`): without cudaMalloc/cudaFree in the loop the "
              "host does not stop launching",
        applies=_never_on_run(lambda a: _idle(a, "allocation") > 0), saving=_trace(lambda a: _idle(a, "allocation")),
        bottleneck="launch_bound"),
    CatalogueFix(
        "stable_shapes", "Keep tensor shapes stable across steps (pad or bucket variable lengths)", "code",
        when="the GPU idles while the host allocates memory",
        saves="the GPU idle during allocation calls: stable shapes reuse the cached blocks",
        applies=_never_on_run(lambda a: _idle(a, "allocation") > 0), saving=_trace(lambda a: _idle(a, "allocation")),
        bottleneck="launch_bound"),
    CatalogueFix(
        "pinned_buffers_once", "Allocate pinned buffers once and reuse them instead of calling cudaHostAlloc per "
        "batch", "code",
        when="a CUDA call stalls behind an allocation on another thread",
        saves="the stalled calls' time per step: without allocations beside them they run at their usual speed",
        applies=_never_on_run(lambda a: bool(a.api.contention)),
        saving=_trace(lambda a: a.window.host_ms(1000 * sum(c.slow_ms for c in a.api.contention))),
        bottleneck="launch_bound"),
    CatalogueFix(
        "warm_allocator", "Warm up the caching allocator before the loop so cudaMalloc leaves the steady state",
        "code", when="a CUDA call stalls behind an allocation on another thread",
        saves="the stalled calls' time per step, as pinned_buffers_once",
        applies=_never_on_run(lambda a: bool(a.api.contention)),
        saving=_trace(lambda a: a.window.host_ms(1000 * sum(c.slow_ms for c in a.api.contention))),
        bottleneck="launch_bound"),
    CatalogueFix(
        "cudnn_benchmark", "Let cuDNN pick the fastest convolution algorithms: torch.backends.cudnn.benchmark = "
        "True (with fixed input shapes)", "config",
        when=f"convolution kernels take >= {CONV_MIN_PCT_OF_STEP:g}% of the step",
        saves="not predicted (shown as -): the gain depends on which algorithms cuDNN's heuristics picked, which "
              "the trace does not say",
        applies=_never_on_run(lambda a: _conv_ms(a) >= CONV_MIN_PCT_OF_STEP / 100 * a.window.step_ms),
        saving=_zero,
        bottleneck="gpu_bound"),
    CatalogueFix(
        "bigger_gemms", "Give the GEMMs more work: larger batch or hidden sizes, dimensions multiples of 64", "code",
        when=f"MFU is below {DENSE_MFU_PCT:g}%",
        saves=f"the GEMM time on the critical path x (1 - MFU / {DENSE_MFU_PCT:g}%): larger, aligned GEMMs run "
              "nearer the peak; at the dense band's floor their time would shrink in that proportion (at most the "
              "low-MFU cost)",
        applies=_never_on_run(_below_band), saving=_trace(_gemm_to_band),
        bottleneck="gpu_bound"),
    CatalogueFix(
        "measure_mfu", "Measure MFU to see how far the GEMMs are from the GPU's peak: re-run with --flops-per-step F "
        "(or --params N --tokens-per-step T), or record with record_shapes=True", "code",
        when="MFU could not be computed", saves="nothing by itself: it measures",
        applies=_never_on_run(lambda a: _mfu_pct(a) is None), saving=_zero),
    CatalogueFix(
        "cut_work", "Cut the work itself: activation checkpointing trade-offs, a smaller sequence or model, fewer "
        "redundant ops", "refactor",
        when="the GPU's own work bounds the step", saves="not predicted: it depends on what is cut",
        applies=_always, saving=_zero,
        bottleneck="gpu_bound"),
    CatalogueFix(
        "fewer_workers", "Lower num_workers to about {fit} per process (usable cores / processes, minus one for the "
        "training process)", "config",
        when="DataLoader workers on the host exceed its usable cores (run directory)",
        saves="not predicted: thrashing shows in step time, not in a trace figure",
        applies=lambda x: _is_run(x) and bool(x.loaders["workers_on_host"]) and bool(x.loaders["usable_cores"])
        and x.loaders["workers_on_host"] > x.loaders["usable_cores"],
        saving=_zero,
        fill=lambda ra: {"fit": max(int(ra.loaders["usable_cores"] // max(ra.loaders["processes_on_host"], 1)) - 1,
                                    1)}),
    CatalogueFix(
        "check_cooling", "Check cooling and the power supply (nvidia-smi -q -d PERFORMANCE,TEMPERATURE); a thermally "
        "or hardware-throttled GPU runs every kernel slower", "config",
        when="NVML reports throttle reasons other than the software power cap (run directory)",
        saves="not predicted: the clock lost is in NVML, not in the trace",
        applies=lambda x: _is_run(x) and bool(set(((x.nvml or {}).get("throttle") or {}).get("by_reason_pct", {}))
                                              - {"SW power cap"}),
        saving=_zero),
    CatalogueFix(
        "detach_values", "Keep only detached values across steps (loss.item() every N steps, not the loss tensor); "
        "check torch.cuda.memory_summary() between steps", "code",
        when="used GPU memory grows over the run (run directory)",
        saves="nothing per step: it prevents an out-of-memory error",
        applies=_is_run, saving=_zero),
    CatalogueFix(
        "profile_later", "Profile later: gpucheckup run --skip {skip} ...", "config",
        when="the profiled steps fall in warm-up (run directory)",
        saves="nothing per step: it makes the trace show the steady state",
        applies=lambda x: _is_run(x) and bool(x.steps) and x.steps.get("warmup_steps") is not None,
        saving=_zero, fill=lambda ra: {"skip": ra.steps["warmup_steps"] + 5}),
    CatalogueFix(
        "async_periodic", "Make the periodic work asynchronous or rarer: async checkpointing "
        "(torch.distributed.checkpoint.async_save), evaluation less often, logging without syncs", "code",
        when="steps over 2x the steady median recur every N steps after warm-up (run directory)",
        saves="the slow steps' extra time spread over the plain steps: work moved off the training thread no "
              "longer stalls it",
        applies=lambda x: _is_run(x) and bool((x.steps or {}).get("slow")) and x.steps["slow"]["count"] > 0
        and x.steps["slow"]["period"] is not None,  # a schedule's cause only for a schedule's pattern
        saving=lambda ra: ra.steps["slow"]["extra_ms"] / max(ra.steps["plain_count"], 1) if _is_run(ra) else 0.0),
]
BY_KEY = {f.key: f for f in CATALOGUE}
assert len(BY_KEY) == len(CATALOGUE), "fix keys must be unique"
assert len({f.action for f in CATALOGUE}) == len(CATALOGUE), "fix actions must be unique"


def _action(entry: CatalogueFix, x) -> str:
    return entry.action.format(**entry.fill(x)) if entry.fill else entry.action


def _how(entry: CatalogueFix, x) -> str:
    """How to make the change: in the words of the framework that runs the loop when one is known
    (diagnosis/framework_words.py), else the plain PyTorch `how`."""
    fill = entry.fill(x) if entry.fill else {}
    words = framework_how(entry.key, getattr(x, "framework", "") or "", fill)
    return words or (entry.how.format(**fill) if fill and entry.how else entry.how)


def offer(x, *keys: str, cap_ms: float | None = None) -> list[Fix]:
    """The catalogue's fixes for these keys whose precondition holds on x (a TraceAnalysis or RunAnalysis),
    each saving at most cap_ms (the cost the finding measures) when given."""
    out = []
    for key in keys:
        e = BY_KEY[key]
        if not e.applies(x):
            continue
        saving = max(float(e.saving(x)), 0.0)
        if cap_ms is not None:
            saving = min(saving, max(cap_ms, 0.0))
        out.append(Fix(_action(e, x), e.tier, saving, _how(e, x), key, e.saves))
    return out


def make(key: str, saving_ms: float, action: str | None = None) -> Fix:
    """A fix from the catalogue with a saving computed by the caller (its precondition checked by the caller)."""
    e = BY_KEY[key]
    return Fix(action or e.action, e.tier, saving_ms, "" if e.fill else e.how, key, e.saves)
