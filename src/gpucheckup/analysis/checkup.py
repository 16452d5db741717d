"""Run every analysis on one trace and keep the results together."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucheckup.analysis import (
    api_health, communication, copies, dataloader, gap_causes, kernels, launches, steps, syncs,
)
from gpucheckup.analysis import timeline as tl
from gpucheckup.errors import CheckupError
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


def analyze(trace: Trace) -> TraceAnalysis:
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
    )
