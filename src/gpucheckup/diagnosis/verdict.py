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
unprofiled step (analysis/one_trace/profiler_overhead.py): the profiler inflates host time, not GPU time.
Rule from savings (first): the verdict is the bottleneck (diagnosis/fixes.py, each entry's
`bottleneck`) of the offered fix whose replayed saving (diagnosis/savings.py) is the largest,
when that saving is at least MIN_SAVING_PCT of the step: below it no fix moves the step beyond
its run-to-run noise, so no fix names the bound. The reason line names that fix and its saving.
A prediction that leaves out a cost of its own change (`upper_bound`: CUDA graphs or torch.compile on a model whose
forward reads GPU values on the host, where each graph break's resume is not modelled) is a bound, not an
estimate: it names no verdict.
A fix that amortizes every per-step cost (larger_batch) or removes launches and kernel time alike
(torch_compile) names no bottleneck and is not counted.
Rule from scores (when no replayed saving decides: no prediction, a CPU-only trace, all below
MIN_SAVING_PCT): when the GPU is busy at least GPU_BOUND_BUSY_PCT (80%) of the step, removing
every idle gap would shorten the step by at most a fifth, so the GPU's own work bounds the job:
`gpu_bound`, unless exposed copies or communication outweigh compute. Below that, the largest
of the other scores names the bound. Findings keep their scores and evidence either way.
"""

from __future__ import annotations

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis.fixes import BY_KEY

GPU_BOUND_BUSY_PCT = 80.0
# A replayed saving below this share of the step is within step-to-step noise (the fixtures' steps
# vary by a few percent): it does not name the bound.
MIN_SAVING_PCT = 5.0


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


def from_savings(fixes: list, step_ms: float) -> tuple[str, str] | None:
    """The verdict and its one-line reason from the offered fixes' replayed savings (catalogue Fix objects
    with `predicted`), or None when none saves at least MIN_SAVING_PCT and names a bottleneck."""
    best = None
    for f in fixes:
        p = f.predicted
        if p is None or not BY_KEY[f.key].bottleneck or p.saving_pct < MIN_SAVING_PCT or p.upper_bound:
            continue
        if best is None or p.saving_ms > best.predicted.saving_ms:
            best = f
    if best is None:
        return None
    p = best.predicted
    verdict = BY_KEY[best.key].bottleneck
    return verdict, (f"of the fixes that remove one bottleneck, the one that saves the most in the replay addresses "
                     f"it: {best.key} saves {p.saving_ms:.2f} "
                     f"ms/step ({p.saving_pct:.1f}%) of the {step_ms:.2f} ms step ({p.transform} edit)")
