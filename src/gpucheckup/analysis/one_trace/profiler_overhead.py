"""Correct the trace's host-side figures for the profiler's own overhead.

torch.profiler slows the host: +33% to +69% step time on a launch-bound job on the H200, 1-2% on
GPU-bound ones (docs/validation.md). The GPU's kernels run at the same speed, so a job that is
GPU-bound without the profiler can look launch-bound in its trace. When the step time without
the profiler is known (the run directory's unprofiled step, analysis/run_logs/step_history.py: its steps
before the profiled window; or --unprofiled-step-ms):

- inflation % = traced step / unprofiled step - 1, the traced step being the window's step time
  (the median step window, analysis/one_trace/window.py), as every per-step figure is.
- GPU work per step = GPU busy time of the analysis window through the window's normalizer
  (its share of the window x the traced step; the profiler does not slow kernels), leaving out
  the part of each collective kernel that is waiting for other ranks (`gpu_work_us`). A NCCL
  kernel starts when its rank arrives and spins until every rank has; that wait is set by the
  other ranks' host (which the profiler slows), not by this GPU's work, so it is idle time here.
  Which wait: the collective kernel time beyond its transfer estimate, the transfer estimate
  of a call being the shortest duration of this rank's calls of the same collective, message
  size and group size in the trace (a call the rank arrives at last waits for nobody: it is
  the data moving); communication kernels with no `record_param_comms` call around their
  launch (launched before the profiled window: nothing known of them) count as waiting in
  full. When the ranks of a job are checked up together (a folder of per-rank traces, a run
  directory), each matched call's wait is its arrival skew from the cross-rank matching instead
  (analysis/job/ranks.py: its duration less the shortest rank's), and the ranks with a correction
  are checked up again with it (checkup/ranks.check_job). The single-trace estimate misses
  waits the rank has at every call of a size (DDP buckets waiting for a slower backward:
  1.4 ms of each 1.6 ms all-reduce on the H200 run with one slow input rank). `comm_wait_ms`:
  the wait left out, per step.
- unprofiled busy % = GPU work per step / unprofiled step (capped at 100).
- host idle factor = (unprofiled step - GPU work) / (traced step - GPU work), clipped to [0, 1]:
  the idle time left without the profiler over the idle time in the trace. Each gap cause's
  per-step time is multiplied by it, so the causes keep their proportions and shrink to the
  idle time the job really has.
The correction applies when the inflation is at least MIN_INFLATION_PCT (5%); below that the
trace is taken as it is. Everything else (kernels, copies, syncs counts) stays as traced.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.one_trace.gpu.collectives import Calls
from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.one_trace.host.gap_causes import GapSummary
from gpucheckup.analysis.one_trace.gpu.kernels import categorize
from gpucheckup.trace.tables import KERNEL, Trace

MIN_INFLATION_PCT = 5.0


class ProfilerCorrection(msgspec.Struct):
    """The figures of the profiler-overhead correction (the report's `profiler`)."""

    source: str
    traced_step_ms: float
    unprofiled_step_ms: float
    inflation_pct: float
    gpu_ms_per_step: float
    busy_pct_unprofiled: float | None
    host_idle_factor: float
    applied: bool
    comm_wait_ms: float = 0.0  # collective kernel time per step that is waiting, left out of gpu_ms_per_step


def call_waits(calls: Calls) -> np.ndarray:
    """Each collective call's wait (us): its duration less the shortest of this rank's calls of the same
    collective, message size and group size (the transfer estimate)."""
    dur = calls.end - calls.start
    key = [(n, b, g) for n, b, g in zip(calls.collective, calls.nbytes.tolist(), np.nan_to_num(calls.group_size).tolist())]
    fastest: dict[tuple, float] = {}
    for k, d in zip(key, dur.tolist()):
        fastest[k] = min(fastest.get(k, d), d)
    return np.array([d - fastest[k] for k, d in zip(key, dur.tolist())], dtype=np.float64)


def gpu_work_us(trace: Trace, window: tuple[float, float], calls: Calls,
                matched: np.ndarray | None = None) -> tuple[float, float]:
    """(GPU work, GPU busy) in us over the window summed over devices: work is the union of every GPU op with
    each collective kernel's waiting part left out (`matched`: each call's wait from the cross-rank matching,
    nan where unmatched; else and there `call_waits`), communication kernels outside `calls` in full."""
    g = trace.gpu
    lo, hi = window
    comm = np.array([categorize(n) == "communication" for n in trace.names], dtype=bool)
    is_comm = (g.kind == KERNEL) & comm[g.name] if len(g) else np.zeros(0, dtype=bool)
    rows = calls.row if calls.row is not None else np.zeros(0, dtype=np.int64)
    waits = call_waits(calls)
    if matched is not None and len(matched) == len(waits):
        waits = np.where(np.isfinite(matched), matched, waits)
    moving_start = calls.start + waits if len(rows) else np.zeros(0)
    work = busy = 0.0
    for d in unique(g.device):
        on = g.device == d
        mine = g.device[rows] == d if len(rows) else np.zeros(0, dtype=bool)
        keep = on & ~is_comm
        work += iv.total(iv.clip(iv.union(np.concatenate([g.start[keep], moving_start[mine]]),
                                          np.concatenate([g.end[keep], calls.end[mine]])), lo, hi))
        busy += iv.total(iv.clip(iv.union(g.start[on], g.end[on]), lo, hi))
    return work, busy


def correction(traced_step_ms: float, gpu_ms_per_step: float, unprofiled_step_ms: float,
               source: str, comm_wait_ms: float = 0.0) -> ProfilerCorrection:
    """The figures of the profiler-overhead correction (see the module docstring)."""
    inflation = 100 * (traced_step_ms / unprofiled_step_ms - 1) if unprofiled_step_ms > 0 else 0.0
    traced_idle = max(traced_step_ms - gpu_ms_per_step, 0.0)
    real_idle = max(unprofiled_step_ms - gpu_ms_per_step, 0.0)
    factor = min(max(real_idle / traced_idle, 0.0), 1.0) if traced_idle > 0 else 1.0
    return ProfilerCorrection(
        source=source,
        traced_step_ms=traced_step_ms,
        unprofiled_step_ms=unprofiled_step_ms,
        inflation_pct=inflation,
        gpu_ms_per_step=gpu_ms_per_step,
        busy_pct_unprofiled=min(100 * gpu_ms_per_step / unprofiled_step_ms, 100.0) if unprofiled_step_ms else None,
        host_idle_factor=factor,
        applied=inflation >= MIN_INFLATION_PCT,
        comm_wait_ms=comm_wait_ms,
    )


def corrected_gaps(gaps: GapSummary, corr: ProfilerCorrection) -> GapSummary:
    """Gap causes scaled to the idle time the job has without the profiler."""
    f = corr.host_idle_factor
    step = corr.unprofiled_step_ms
    per_step = {c: v * f for c, v in gaps.per_step_ms.items()}
    return msgspec.structs.replace(gaps, per_step_ms=per_step,
                                   pct_of_step={c: 100 * v / step for c, v in per_step.items()},
                                   traced={"per_step_ms": gaps.per_step_ms, "pct_of_step": gaps.pct_of_step})
