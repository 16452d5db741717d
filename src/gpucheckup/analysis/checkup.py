"""Run every analysis on one trace and keep the results together."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import (
    api_health, communication, copies, dataloader, gap_causes, kernels, launches, steps, syncs,
)
from gpucheckup.analysis import gemm_dtype, mfu, ncu_bounds, roofline, shape_flops
from gpucheckup.analysis import timeline as tl
from gpucheckup.errors import CheckupError
from gpucheckup.hardware.peaks import lookup
from gpucheckup.trace.ncu_csv import NcuLaunch
from gpucheckup.trace.tables import Trace


@dataclass
class TraceAnalysis:
    """The figures of one trace, each from its own analysis module."""

    trace: Trace
    launch_rows: np.ndarray
    steps: steps.Steps
    timeline: tl.Timeline
    causes: gap_causes.GapCauses
    kernels: kernels.KernelStats
    step_summary: dict
    gap_pattern: dict
    gaps_summary: dict
    copies: dict
    syncs: dict
    dataloader: dict
    api: dict
    communication: dict
    mfu: dict = field(default_factory=dict)
    roofline: dict = field(default_factory=dict)
    ncu: dict | None = None


def analyze(trace: Trace, mfu_inputs: mfu.MfuInputs | None = None, ncu: list[NcuLaunch] | None = None,
            ncu_path: str = "") -> TraceAnalysis:
    """All analyses of one trace. Raises CheckupError for a trace with no GPU activity."""
    if not trace.has_gpu:
        raise CheckupError(
            f"{trace.path}: CPU-only trace (no kernels, copies or memsets), so there is no GPU to check up; "
            "record it with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )
    rows = launches.launch_rows(trace)
    st = steps.find_steps(trace, rows)
    timeline = tl.gpu_timeline(trace, st)
    causes = gap_causes.attribute_gaps(trace, st, timeline, rows)
    kstats = kernels.kernel_stats(trace, st, rows)
    inputs = mfu_inputs or mfu.MfuInputs()
    shapes = shape_flops.shape_flops(trace, st)
    annotated = shape_flops.annotated_flops(trace, st)
    device = trace.devices[0].name if trace.devices else ""
    mfu_fig = mfu.mfu_figures(device, float(np.median(st.duration)) / 1e6, gemm_dtype.gemm_dtypes(trace, kstats),
                              inputs, annotated, shapes)
    mfu_fig["shape_flops"] = shapes.to_dict() if shapes else None
    mfu_fig["annotated_flops"] = annotated.to_dict() if annotated else None
    gpu = lookup(inputs.gpu or device) if (inputs.gpu or device) else None
    return TraceAnalysis(
        trace=trace,
        launch_rows=rows,
        steps=st,
        timeline=timeline,
        causes=causes,
        kernels=kstats,
        step_summary=steps.summary(st),
        gap_pattern=tl.gap_pattern(timeline, st),
        gaps_summary=gap_causes.summarize(causes, st, timeline),
        copies=copies.copy_stats(trace, st, timeline),
        syncs=syncs.sync_stats(trace, st, rows, causes),
        dataloader=dataloader.dataloader_stats(trace, st),
        api=api_health.api_health(trace, rows),
        communication=communication.comm_stats(trace, st, kstats),
        mfu=mfu_fig,
        roofline=roofline.roofline(shapes, gpu, st.count),
        ncu=ncu_bounds.ncu_bounds(ncu, kstats, ncu_path) if ncu else None,
    )
