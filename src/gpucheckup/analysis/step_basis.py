"""The step time: one definition, and the one place that computes it.

Every step time a person reads (the terminal header's step, `step.ms` in the JSON document, the
`step_ms` figure of `--fail-if` and the Python API, the run's steady step, `compare`'s headline)
comes from here. Definition (also in docs/metrics.md, "The step time"):
- throughput basis: total time over steps (`throughput_ms`: the sum of the step times over their
  count), so fast and slow steps in turn (a DataLoader's workers out of phase with the GPU: 30 and
  300 ms) give the job's real rate, one step per 165 ms, where a median picks one of the two.
- which steps: the run's step log (`steps.csv`) where there is one with enough unprofiled steps,
  its unprofiled steps after warm-up (analysis/run_logs/step_history.py, `unprofiled_ms`): the job as it
  runs without the profiler. Else the profiled window, as analysis/one_trace/window.py states it: the median
  of the step windows, because a profiled window holds few steps (five by the usual schedule)
  and the first of them often carries the profiler's own start (267.9 ms among 118-128 ms steps on
  the H200's compute_bound trace): one outlier moves a mean of five, not their median.
- a job of several ranks: the slowest rank's step, since every rank waits for it at the next
  collective.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.document import Step, StepStats


def throughput_ms(ms) -> float:
    """Total time over steps of the step times given (ms; unmeasured NaN steps left out); NaN for none."""
    a = np.asarray(ms, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.sum() / len(a)) if len(a) else float("nan")


def run_step(stats: StepStats | None, steps_file: str) -> Step | None:
    """The step of a run without a checked-up trace: its unprofiled steps' throughput (step_history's
    `unprofiled_ms`), else the second half's median when its steps never settled; None with neither."""
    if stats is None:
        return None
    if stats.unprofiled_ms is not None:
        first, last = stats.unprofiled_steps
        return Step(ms=stats.unprofiled_ms, basis=f"{steps_file}: total time over the run's unprofiled steps "
                                                  f"{first}-{last} ({stats.unprofiled_basis})")
    if stats.late_median_ms is not None:
        return Step(ms=stats.late_median_ms, basis=f"{steps_file}: median of the second half's steps (the "
                                                    "run's steps never settled)")
    return None


def job_step(steps: list[tuple[str, Step]]) -> Step | None:
    """The step of a job of several ranks (label, step): the slowest rank's, which every rank waits for."""
    known = [(label, s) for label, s in steps if s is not None and s.ms is not None]
    if not known:
        return None
    label, s = max(known, key=lambda p: p[1].ms)
    if len(known) == 1:
        return s
    return Step(ms=s.ms, basis=f"the slowest of {len(known)} ranks, {label} (every rank waits for it): {s.basis}")
