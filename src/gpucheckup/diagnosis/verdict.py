"""The primary verdict: which single bound explains the most step time.

Scores, each in percent of step time (docs/metrics.md):
- input_bound: GPU idle while the host waits for data (gap cause `input`).
- launch_bound: GPU idle while the host launches, allocates or runs Python (`launch` +
  `allocation` + `other_host`).
- sync_bound: GPU idle after synchronizations drained its queue (`sync`).
- communication_bound: exposed communication kernel time + idle while the host waits on
  collectives (`communication`).
- copy_bound: copy time with no kernel beside it.
- gpu_bound: GPU busy % minus the exposed copy and communication time: kernels computing.
When the step time without the profiler is known, busy % and the idle scores are those of the
unprofiled step (analysis/profiler_overhead.py): the profiler inflates host time, not GPU time.
Rule: when the GPU is busy at least GPU_BOUND_BUSY_PCT (80%) of the step, removing every idle
gap would shorten the step by at most a fifth, so the GPU's own work bounds the job:
`gpu_bound`, unless exposed copies or communication outweigh compute. Below that, the largest
of the other scores names the bound.
"""

from __future__ import annotations

from gpucheckup.analysis.checkup import TraceAnalysis

GPU_BOUND_BUSY_PCT = 80.0


def scores(a: TraceAnalysis) -> dict[str, float]:
    """Percent of step time each bound explains."""
    pct = a.gaps_summary.pct_of_step
    copy = a.copies.exposed_pct_of_step
    comm = a.communication.exposed_pct_of_step
    return {
        "input_bound": pct["input"],
        "launch_bound": pct["launch"] + pct["allocation"] + pct["other_host"],
        "sync_bound": pct["sync"],
        "communication_bound": comm + pct["communication"],
        "copy_bound": copy,
        "gpu_bound": max(a.busy_pct - copy - comm, 0.0),
    }


def primary(a: TraceAnalysis) -> tuple[str, str, dict[str, float]]:
    """The verdict, a one-line reason, and the scores behind it."""
    sc = scores(a)
    busy = a.busy_pct
    unprof = " without the profiler" if a.profiler and a.profiler.applied else ""
    if busy >= GPU_BOUND_BUSY_PCT:
        best = max(("gpu_bound", "copy_bound", "communication_bound"), key=lambda k: sc[k])
        return best, (f"GPU busy {busy:.1f}% of step time{unprof} (>= {GPU_BOUND_BUSY_PCT:g}%): "
                      f"{best.replace('_', ' ')} explains {sc[best]:.1f}%"), sc
    others = {k: v for k, v in sc.items() if k != "gpu_bound"}
    best = max(others, key=others.get)
    return best, (f"GPU busy only {busy:.1f}% of step time{unprof}; {best.replace('_', ' ')} explains "
                  f"{sc[best]:.1f}% of it"), sc
