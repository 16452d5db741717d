"""The GPU's own time on the step's critical path: how much of each kernel a faster kernel could save.

A fix that makes kernels faster (TF32 or bf16 GEMMs, fused data movement, larger GEMMs) shortens the step only
where something waited for those kernels to end. Definitions (also in docs/metrics.md, "The GPU's critical time"):

- queued: the next GPU op on the same device (any stream: kernels, copies, memsets, ordered by start) started
  within QUEUED_GAP_US of this op's end. It had been launched and was waiting behind this op, so the GPU, not the
  host, set the pace there: all of the op's time is on the critical path (an upper bound: what follows a queue
  may still be host-bound).
- waited on: the op's overlap with the host's calls that wait for the device (host_calls.sync_call_rows: stream,
  event and device synchronizations and blocking copies; host_calls.alloc_rows: allocations and frees, which may
  synchronize): the host stood still until the GPU got there.
- otherwise the GPU sat idle after the op until the host launched more: finishing the op earlier only lengthens
  that idle, so none of its time is on the critical path.
- without the profiler the host runs faster and the GPU's idle gaps shrink: each gap is scaled by `idle_scale`
  (the step's idle without the profiler over its idle in the trace, `idle_scale`) before it is held to
  QUEUED_GAP_US, so a gap the profiler opened does not hide a queue the job has.

QUEUED_GAP_US is 3 us: on the H200 a stream's queued kernels start 0.9-2.3 us after the previous one ends (5th to
95th percentile of every gap on the GPU-bound transformer, busy 97%), while a launch-bound loop's kernels start a
median 15-40 us after (HF Trainer, a launch-bound MLP, timm; tests/data/h200). A trace of a light window without
synchronization records (`--light` without `--light-syncs`) sees only the queued part.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.distinct import union1d
from gpucheckup.analysis.one_trace.host.host_calls import alloc_rows, sync_call_rows
from gpucheckup.trace.tables import Trace

QUEUED_GAP_US = 3.0  # an op that starts this soon after the previous one on its device was queued behind it


def critical_us(trace: Trace, rows: np.ndarray, launch_rows: np.ndarray, idle_scale: float = 1.0) -> np.ndarray:
    """Each GPU op of `rows` (rows of trace.gpu): its microseconds on the critical path (all of it when queued,
    else its overlap with the host's calls that wait for the device; launch_rows: launches.launch_rows)."""
    gpu = trace.gpu
    dur = gpu.end[rows] - gpu.start[rows]
    gap = _gap_after(trace)[rows]
    queued = gap * idle_scale < QUEUED_GAP_US if idle_scale > 0 else np.isfinite(gap)  # no idle left: all queued
    waited = iv.covered_between(_waits(trace, launch_rows), gpu.start[rows], gpu.end[rows]) if len(rows) else dur
    return np.where(queued, dur, np.minimum(waited, dur))


def idle_scale(traced_step_ms: float, step_ms: float, busy_ms: float) -> float:
    """The step's GPU idle without the profiler over its idle in the trace (1 when the step without the profiler is
    not shorter; 0 when the GPU's work fills it)."""
    traced_idle = traced_step_ms - busy_ms
    if traced_idle <= 0 or step_ms >= traced_step_ms:
        return 1.0
    return float(np.clip((step_ms - busy_ms) / traced_idle, 0.0, 1.0))


def _gap_after(trace: Trace) -> np.ndarray:
    """Per GPU op: the time from its end to the start of the next op on its device (inf for a device's last)."""
    gpu = trace.gpu
    order = np.lexsort((gpu.start, gpu.device))
    nxt = np.full(len(order), np.inf)
    same = gpu.device[order[1:]] == gpu.device[order[:-1]]
    nxt[:-1] = np.where(same, gpu.start[order[1:]], np.inf)
    gap = np.empty(len(order))
    gap[order] = nxt - gpu.end[order]
    return gap


def _waits(trace: Trace, launch_rows: np.ndarray) -> iv.Intervals:
    """The union of the host's calls that may wait for the device."""
    h = trace.host
    keep = union1d(sync_call_rows(trace, launch_rows), alloc_rows(trace)).astype(np.int64)
    return iv.union(h.start[keep], h.end[keep])
