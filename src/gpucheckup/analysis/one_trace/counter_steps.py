"""A light window's counter steps: the job's steps with no kernel record, and the GPU's activity counters over them.

The CUPTI light window (capture/agent/cupti_window.py) samples the GPU's activity counters (CUPTI's PM sampling,
capture/agent/pm_counters.py) from before its first counter step to its end, and takes kernel records only after its
counter steps. The counters cost a step nothing measurable; the records cost every launch (docs/validation.md 6j, 6k).
So the counter steps are the job's own steps seen from inside the window, and comparing them with the record steps
measures what the records cost this run.

Definitions (docs/metrics.md, "Counter steps"):
- counter step time (`step_ms`): the median of the counter steps' lengths (the agent's step marks, as a ProfilerStep
  window is).
- counters' GPU busy over some windows: the compute engine's active share of each sample
  (`gr__compute_cycles_active.avg / gr__cycles_elapsed.max`), weighted by the sample's overlap with the windows, over
  the overlap in all. It read the kernels' union within 0.0-1.5 points over the same steps on seven loops (6k, 6m); it
  counts the compute engine only (a copy engine's transfer is not in it).
  `busy_pct`: over the counter steps; `record_busy_pct`: over the record steps (the analysis window), beside
  `record_kernels_busy_pct`, the kernels' union over the same steps (analysis/one_trace/timeline.py): two sources
  of one GPU-busy metric, within AGREE_POINTS of each other on every loop measured (`agrees`).
- coverage: the samples' overlap with the counter steps over the counter steps' length (under 100% where the
  hardware buffer dropped samples or the counters started late).
- launches per step: the dispatches counted in each counter step (each sample's share by its overlap), median over
  the counter steps; None where the chip's metric set had no dispatch counter.
- records' cost (`records_cost_pct`): the record steps' median step (the trace's, analysis/one_trace/window.py
  `traced_step_ms`) over the counter step time, less one, in percent.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import median
from gpucheckup.document import Counters as CounterSteps  # the report's `counters`: the analysis builds it itself
from gpucheckup.trace.tables import Counters

AGREE_POINTS = 2.0  # the two busy sources differ by at most this much on the loops measured (6k, 6m: 0.0-1.5 points)


def overlap(c: Counters, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """[sample, window] overlap in us of each sample with each window [lo, hi)."""
    a = np.maximum(c.start[:, None], lo[None, :])
    b = np.minimum(c.end[:, None], hi[None, :])
    return np.clip(b - a, 0.0, None)


def busy_over(c: Counters, lo: np.ndarray, hi: np.ndarray) -> tuple[float | None, float]:
    """(counters' GPU busy % over the windows, or None where no sample falls in them; the samples' coverage of them, %)."""
    if not len(c) or not len(lo):
        return None, 0.0
    ov = overlap(c, lo, hi).sum(axis=1)
    span = float((hi - lo).sum())
    got = float(ov.sum())
    if got <= 0:
        return None, 0.0
    return float((c.busy_pct * ov).sum() / got), min(100.0 * got / span, 100.0) if span > 0 else 0.0


def launches_per_step(c: Counters, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """The median over the windows of the dispatches counted in each (a sample's count shared by its overlap)."""
    if not len(c) or not len(lo) or np.isnan(c.launches).any():
        return None
    dur = np.maximum(c.end - c.start, 1e-9)
    per = (overlap(c, lo, hi) * (c.launches / dur)[:, None]).sum(axis=0)
    return float(median(per))


def counter_steps(c: Counters | None, record_lo: np.ndarray, record_hi: np.ndarray, traced_step_ms: float,
                  kernels_busy_pct: float) -> CounterSteps | None:
    """The counter steps' figures, beside the record steps [record_lo, record_hi) whose median step is traced_step_ms
    and whose kernels' union is kernels_busy_pct of their time; None for a trace without counter steps."""
    if c is None or not len(c.step_start):
        return None
    lo, hi = c.step_start, c.step_end
    step_ms = float(median(hi - lo)) / 1000
    busy, coverage = busy_over(c, lo, hi)
    rec_busy, _ = busy_over(c, record_lo, record_hi)
    agrees = None if rec_busy is None else abs(rec_busy - kernels_busy_pct) <= AGREE_POINTS
    return CounterSteps(
        steps=len(lo), step_ms=step_ms, busy_pct=busy, coverage_pct=coverage,
        launches_per_step=launches_per_step(c, lo, hi), record_step_ms=traced_step_ms,
        records_cost_pct=100 * (traced_step_ms / step_ms - 1) if step_ms > 0 else 0.0,
        record_busy_pct=rec_busy, record_kernels_busy_pct=kernels_busy_pct, agrees=agrees, samples=len(c),
        interval_us=c.interval_us, metrics=list(c.metrics))
