"""Memory copies: bytes, counts and achieved bandwidth per direction, pageable against pinned.

Definitions (also in docs/metrics.md). Counted: `gpu_memcpy` events starting inside the
analysis window. Kineto names them `Memcpy <DIR> (<SRC> -> <DST>)`, e.g.
`Memcpy HtoD (Pageable -> Device)`.
- direction: HtoD, DtoH, DtoD, HtoH, PtoP as in the name.
- pageable: source or destination is `Pageable` host memory. CUDA stages such copies through
  a bounce buffer and blocks the host: the fix is `pin_memory=True` and `non_blocking=True`.
- pageable_mb_per_step, pageable_ms_per_step: the pageable copies' bytes and summed durations
  per step and device (analysis/one_trace/window.py).
- achieved GB/s per direction: summed bytes / summed copy duration.
- pct_of_gpu_time: the union of copy intervals over the union of all GPU busy intervals.
- overlap_pct: the share of copy time during which a kernel was running on the same device.
  Copies hidden under compute cost nothing; the articles' healthy band is over
  HEALTHY_OVERLAP_PCT (80%).
- exposed_ms_per_step, exposed_pct_of_step: copy time with no kernel beside it, per step and
  device and over the step time (analysis/one_trace/window.py): what the copies cost the step.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.groups import by_key
from gpucheckup.analysis.one_trace.copy_names import is_pageable, parse_copy_name
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.analysis.one_trace.timeline import Timeline
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.trace.tables import KERNEL, MEMCPY, Trace

HEALTHY_OVERLAP_PCT = 80.0


class DirectionStats(msgspec.Struct):
    """Copies of one direction (HtoD, DtoH, ...)."""

    count: int = 0
    bytes: float = 0.0
    time_us: float = 0.0
    pageable_count: int = 0
    gb_per_s: float | None = None
    mb: float = 0.0


class CopyStats(msgspec.Struct):
    """Copy figures of the analysis window (the report's `copies`)."""

    count: int
    by_direction: dict[str, DirectionStats]
    pageable_count: int
    pageable_mb: float
    pageable_mb_per_step: float  # per device
    pageable_ms_per_step: float  # summed copy durations, per device
    time_ms: float
    pct_of_gpu_time: float
    overlap_pct: float | None
    per_step_ms: float  # per device
    exposed_ms_per_step: float
    exposed_pct_of_step: float


def copy_rows(trace: Trace, steps: Steps, pageable: bool = False) -> np.ndarray:
    """Rows of trace.gpu of the copies starting inside the analysis window (only pageable ones when asked)."""
    gpu = trace.gpu
    lo, hi = steps.window
    rows = np.flatnonzero((gpu.kind == MEMCPY) & (gpu.start >= lo) & (gpu.start <= hi))
    if pageable:
        rows = rows[np.isin(gpu.name[rows], trace.name_ids(is_pageable))]
    return rows


def copy_stats(trace: Trace, steps: Steps, timeline: Timeline, window: Window) -> CopyStats:
    """Per-direction totals, pageable count, share of GPU time and overlap with kernels."""
    gpu = trace.gpu
    lo, hi = steps.window
    rows = copy_rows(trace, steps)
    directions: dict[str, DirectionStats] = {}
    pageable = 0
    pageable_bytes = 0.0
    pageable_us = 0.0
    for r in rows:
        d, src, dst = parse_copy_name(trace.names[gpu.name[r]])
        e = directions.setdefault(d, DirectionStats())
        e.count += 1
        b = gpu.bytes[r]
        e.bytes += 0.0 if np.isnan(b) else float(b)
        e.time_us += float(gpu.end[r] - gpu.start[r])
        if is_pageable(trace.names[gpu.name[r]]):
            e.pageable_count += 1
            pageable += 1
            pageable_bytes += 0.0 if np.isnan(b) else float(b)
            pageable_us += float(gpu.end[r] - gpu.start[r])
    for e in directions.values():
        e.gb_per_s = e.bytes / (e.time_us * 1e3) if e.time_us > 0 else None
        e.mb = e.bytes / 1e6
    busy_total = sum(iv.total(b) for b in timeline.busy.values())
    copy_union_total = 0.0
    overlapped = 0.0
    none = np.zeros(0, dtype=np.int64)
    copies_of, all_kernels = by_key(gpu.device[rows]), np.flatnonzero(gpu.kind == KERNEL)
    kernels_of = by_key(gpu.device[all_kernels])  # one sort each, not a mask per device
    for dev in timeline.busy:
        c = rows[copies_of.get(int(dev), none)]
        copies = iv.clip(iv.union(gpu.start[c], gpu.end[c]), lo, hi)
        k = all_kernels[kernels_of.get(int(dev), none)]
        kernels = iv.clip(iv.union(gpu.start[k], gpu.end[k]), lo, hi)
        copy_union_total += iv.total(copies)
        overlapped += iv.total(iv.intersect(copies, kernels))
    return CopyStats(
        count=int(len(rows)),
        by_direction=directions,
        pageable_count=pageable,
        pageable_mb=pageable_bytes / 1e6,
        pageable_mb_per_step=window.per_step(pageable_bytes) / 1e6,
        pageable_ms_per_step=window.ms(pageable_us),
        time_ms=copy_union_total / 1000,
        pct_of_gpu_time=100 * copy_union_total / busy_total if busy_total > 0 else 0.0,
        overlap_pct=100 * overlapped / copy_union_total if copy_union_total > 0 else None,
        per_step_ms=window.ms(copy_union_total),
        exposed_ms_per_step=window.ms(copy_union_total - overlapped),
        exposed_pct_of_step=window.pct(window.ms(copy_union_total - overlapped)),
    )
