"""Run every analysis on one trace and keep the results together."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.host import api_health, dataloader, gap_causes, syncs
from gpucheckup.analysis.one_trace.gpu import communication, copies, gpu_critical, kernels
from gpucheckup.analysis.one_trace import counter_steps, launches, steps
from gpucheckup.analysis.flops import gemm_dtype, mfu, roofline, shape_flops
from gpucheckup.analysis.one_trace import profiler_overhead
from gpucheckup.analysis.one_trace import timeline as tl
from gpucheckup.analysis.one_trace.gpu.collectives import collective_calls
from gpucheckup.analysis.one_trace import window as win
from gpucheckup.document import Mfu
from gpucheckup.errors import CheckupError
from gpucheckup.hardware.peaks import lookup
from gpucheckup.trace.tables import Trace

if TYPE_CHECKING:  # Nsight Compute's bounds: imported only for a check-up given its CSV (--ncu)
    from gpucheckup.analysis.flops import ncu_bounds
    from gpucheckup.trace.ncu_csv import NcuLaunch


class TraceAnalysis(msgspec.Struct):
    """The figures of one trace, each from its own analysis module."""

    trace: Trace
    launch_rows: np.ndarray
    steps: steps.Steps
    timeline: tl.Timeline
    causes: gap_causes.GapCauses
    kernels: kernels.KernelStats
    critical_us: np.ndarray  # per row of kernels.rows: its time on the critical path (gpu_critical.py)
    step_summary: steps.StepSummary
    gap_pattern: tl.GapPattern
    gaps_summary: gap_causes.GapSummary
    copies: copies.CopyStats
    syncs: syncs.SyncStats
    dataloader: dataloader.DataLoaderStats
    api: api_health.ApiHealth
    communication: communication.CommStats
    mfu: Mfu | None = None
    roofline: roofline.Roofline | None = None
    ncu: ncu_bounds.NcuBounds | None = None
    profiler: profiler_overhead.ProfilerCorrection | None = None  # when the unprofiled step time is known
    window: win.Window | None = None  # THE step time and the per-step normalizer (analysis/one_trace/window.py)
    framework: str = ""  # the loop's framework from the run's agent ("": unknown, a bare trace)
    counters: counter_steps.CounterSteps | None = None  # a light window's counter steps

    @property
    def busy_pct(self) -> float:
        """GPU busy % of the step: without the profiler when that correction applies, else as traced."""
        if self.profiler and self.profiler.applied:
            return self.profiler.busy_pct_unprofiled
        return self.timeline.busy_pct

    @property
    def gaps_step_ms(self) -> float:
        """The step the gap causes' per-step times are of (gaps_summary): the step without the profiler when the
        correction scaled them to it, else the traced step."""
        return self.window.step_ms if self.profiler and self.profiler.applied else self.window.traced_step_ms


def analyze(trace: Trace, mfu_inputs: mfu.MfuInputs | None = None, ncu: list[NcuLaunch] | None = None,
            ncu_path: str = "", comm_waits=None) -> TraceAnalysis:
    """All analyses of one trace (`comm_waits`: its collective calls' waits from the cross-rank matching, for
    the profiler-overhead correction). Raises CheckupError for a trace with no GPU activity."""
    _check_gpu_activity(trace)
    rows = launches.launch_rows(trace)
    st = steps.find_steps(trace, rows)
    timeline = tl.gpu_timeline(trace, st)
    _check_work_in_steps(trace, st, timeline)
    causes = gap_causes.attribute_gaps(trace, st, timeline, rows)
    kstats = kernels.kernel_stats(trace, st, rows)
    inputs = mfu_inputs or mfu.MfuInputs()
    traced = win.traced_window(st, len(timeline.busy))
    counted = counter_steps.counter_steps(trace.counters, st.start, st.end, traced.traced_step_ms, timeline.busy_pct)
    if counted is not None and not inputs.unprofiled_step_ms:
        inputs = msgspec.structs.replace(inputs, unprofiled_step_ms=counted.step_ms, unprofiled_from=(
            f"the median of the window's {counted.steps} counter steps, which had no kernel records"))
    w, prof, gaps_summary = _window_and_profiler(trace, st, rows, timeline, causes, inputs, comm_waits, traced)
    shapes = shape_flops.shape_flops(trace, st)
    device = trace.devices[0].name if trace.devices else ""
    gpu = lookup(inputs.gpu or device) if (inputs.gpu or device) else None
    return TraceAnalysis(
        trace=trace,
        launch_rows=rows,
        steps=st,
        timeline=timeline,
        causes=causes,
        kernels=kstats,
        critical_us=gpu_critical.critical_us(trace, kstats.rows, rows, gpu_critical.idle_scale(
            w.traced_step_ms, w.step_ms, timeline.busy_pct / 100 * w.traced_step_ms)),
        step_summary=steps.summary(st),
        gap_pattern=tl.gap_pattern(timeline, st),
        gaps_summary=gaps_summary,
        copies=copies.copy_stats(trace, st, timeline, w),
        syncs=syncs.sync_stats(trace, st, rows, causes),
        dataloader=dataloader.dataloader_stats(trace, st, w),
        api=api_health.api_health(trace, rows),
        communication=communication.comm_stats(trace, st, kstats, w),
        mfu=_mfu(trace, st, kstats, inputs, shapes, device, w.step_ms / 1000),
        roofline=roofline.roofline(shapes, gpu, st.count),
        ncu=_ncu_bounds(ncu, kstats, ncu_path) if ncu else None,
        profiler=prof,
        window=w,
        framework=inputs.framework,
        counters=counted,
    )


def _check_gpu_activity(trace: Trace) -> None:
    """CheckupError for a trace without kernels, copies or memsets."""
    if not trace.has_gpu:
        raise CheckupError(
            f"{trace.path}: CPU-only trace (no kernels, copies or memsets), so there is no GPU to check up; "
            "record it with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )


def _check_work_in_steps(trace: Trace, st: steps.Steps, timeline: tl.Timeline) -> None:
    """CheckupError for a trace whose GPU work all lies outside its step windows."""
    if not any(timeline.busy_us(d) > 0 for d in timeline.busy):
        raise CheckupError(
            f"{trace.path}: no kernel, copy or memset runs inside the {st.count} ProfilerStep window(s) "
            f"({len(trace.gpu)} GPU ops lie outside them), so there is nothing to check up for the steps"
        )


def _window_and_profiler(trace: Trace, st: steps.Steps, rows: np.ndarray, timeline: tl.Timeline,
                         causes: gap_causes.GapCauses, inputs: mfu.MfuInputs, comm_waits, w: win.Window):
    """The step window (from the traced one, `w`), the profiler-overhead correction (None without an unprofiled step)
    and the gap summary (corrected when the correction applies)."""
    gaps_summary = gap_causes.summarize(causes, w)
    if not inputs.unprofiled_step_ms:
        return w, None, gaps_summary
    work_us, busy_us = profiler_overhead.gpu_work_us(trace, timeline.window, collective_calls(trace, st, rows),
                                                    comm_waits)
    prof = profiler_overhead.correction(w.traced_step_ms, w.ms(work_us), inputs.unprofiled_step_ms,
                                        inputs.unprofiled_from, w.ms(busy_us - work_us))
    w = win.unprofiled(w, inputs.unprofiled_step_ms, inputs.unprofiled_from)  # the job's step (step_basis.py)
    if prof.applied:
        gaps_summary = profiler_overhead.corrected_gaps(gaps_summary, prof)
    return w, prof, gaps_summary


def _mfu(trace: Trace, st: steps.Steps, kstats: kernels.KernelStats, inputs: mfu.MfuInputs,
         shapes: shape_flops.FlopCount | None, device: str, step_s: float) -> Mfu:
    """The MFU figures, with the FLOPs counted from the shapes and from the annotations beside them."""
    annotated = shape_flops.annotated_flops(trace, st)
    mfu_fig = mfu.mfu_figures(device, step_s, gemm_dtype.gemm_dtypes(trace, kstats), inputs, annotated, shapes)
    mfu_fig.shape_flops = shapes.to_dict() if shapes else None
    mfu_fig.annotated_flops = annotated.to_dict() if annotated else None
    return mfu_fig


def _ncu_bounds(ncu: list[NcuLaunch], kstats: kernels.KernelStats, path: str) -> ncu_bounds.NcuBounds:
    """Nsight Compute's bounds of the kernels (analysis/flops/ncu_bounds.py, imported when a CSV was given)."""
    from gpucheckup.analysis.flops import ncu_bounds

    return ncu_bounds.ncu_bounds(ncu, kstats, path)
