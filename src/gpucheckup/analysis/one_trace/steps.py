"""Training steps: `ProfilerStep#N` windows on the host and their projection on the GPU.

Definitions (also in docs/metrics.md):
- host step i: the `ProfilerStep#N` user annotation, [ts, ts + dur].
- GPU projection of step i: from the first start to the last end of the GPU ops (kernels,
  copies, memsets) whose launching CUDA call (matched by correlation id) starts inside host
  step i.
- step end i = max(host end i, GPU end i): the step is over when both sides are done.
- step window i = [step end i-1, step end i], the first one starting at host step 1's start.
  The windows tile the profiled time with no overlap, so per-step shares add up.
- step time = window length. Its median is the headline figure; the spread is reported as
  min, max and the coefficient of variation (std / mean).
A trace with no `ProfilerStep#` gets one window over all its events, and the report says so.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from gpucheckup.analysis.distinct import median
from gpucheckup.trace.tables import USER_ANNOTATION, Trace

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


class Steps(msgspec.Struct):
    """Step windows of one trace, times in microseconds."""

    labels: list[str]
    host_start: np.ndarray
    host_end: np.ndarray
    gpu_start: np.ndarray  # nan where the step launched no GPU work
    gpu_end: np.ndarray
    start: np.ndarray  # step windows: a partition of the profiled time
    end: np.ndarray
    marked: bool  # False: no ProfilerStep# in the trace, one window over the whole trace

    @property
    def count(self) -> int:
        return len(self.start)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    @property
    def window(self) -> tuple[float, float]:
        return float(self.start[0]), float(self.end[-1])

    def index_of(self, t: np.ndarray) -> np.ndarray:
        """The step window each time falls in, or -1 outside all windows."""
        i = np.searchsorted(self.start, t, side="right") - 1
        inside = (i >= 0) & (t <= self.end[np.maximum(i, 0)])
        return np.where(inside, i, -1)


def find_steps(trace: Trace, launch_rows: np.ndarray) -> Steps:
    """Step windows from ProfilerStep# annotations, or one window over the whole trace."""
    host = trace.host
    step_ids = trace.name_ids(lambda n: STEP_NAME.match(n) is not None)
    rows = np.flatnonzero((host.cat == USER_ANNOTATION) & np.isin(host.name, step_ids))
    if len(rows) == 0:
        lo, hi = trace.span
        one = np.array([lo]), np.array([hi])
        g = (np.array([trace.gpu.start.min()]), np.array([trace.gpu.end.max()])) if trace.has_gpu else (
            np.array([np.nan]), np.array([np.nan]))
        return Steps(["whole trace"], one[0], one[1], g[0], g[1], one[0].copy(), one[1].copy(), marked=False)
    rows = rows[np.argsort(host.start[rows], kind="stable")]
    # One ProfilerStep per step: drop annotations nested inside the previous one (other threads' copies);
    # keep ones that merely overlap it, and say so.
    keep, overlapping = [rows[0]], 0
    for r in rows[1:]:
        if host.end[r] <= host.end[keep[-1]] + 1e-3:
            continue
        overlapping += host.start[r] < host.end[keep[-1]] - 1e-3
        keep.append(r)
    if overlapping:
        trace.warnings.append(f"{overlapping} ProfilerStep# annotations overlap the previous step; step windows "
                              "start where the previous one ends")
    rows = np.array(keep)
    hs, he = host.start[rows], host.end[rows]
    gs, ge = _gpu_projection(trace, launch_rows, hs, he)
    step_end = np.fmax(he, ge)  # fmax ignores nan (a step with no GPU work)
    step_end = np.maximum.accumulate(step_end)
    start = np.concatenate(([hs[0]], step_end[:-1]))
    labels = [trace.names[host.name[r]] for r in rows]
    return Steps(labels, hs, he, gs, ge, start, step_end, marked=True)


def _gpu_projection(trace: Trace, launch_rows: np.ndarray, hs: np.ndarray, he: np.ndarray):
    """First start and last end of the GPU ops launched from inside each host step."""
    n = len(hs)
    gs, ge = np.full(n, np.nan), np.full(n, np.nan)
    ok = launch_rows >= 0
    if not ok.any():
        return gs, ge
    t_launch = trace.host.start[launch_rows[ok]]
    op_start, op_end = trace.gpu.start[ok], trace.gpu.end[ok]
    step = np.searchsorted(hs, t_launch, side="right") - 1
    inside = (step >= 0) & (t_launch <= he[np.maximum(step, 0)])
    step, op_start, op_end = step[inside], op_start[inside], op_end[inside]
    np.fmin.at(gs, step, op_start)
    np.fmax.at(ge, step, op_end)
    return gs, ge


class StepSummary(msgspec.Struct):
    """Median and spread of the step windows, in milliseconds (the report's `steps`)."""

    count: int
    marked: bool
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    cv_pct: float
    per_step_ms: list[float]
    host_median_ms: float
    labels: list[str]


def summary(steps: Steps) -> StepSummary:
    """Median and spread of step time, in milliseconds."""
    d = steps.duration / 1000.0
    host = (steps.host_end - steps.host_start) / 1000.0
    return StepSummary(
        count=steps.count,
        marked=steps.marked,
        median_ms=float(median(d)),
        mean_ms=float(np.mean(d)),
        min_ms=float(np.min(d)),
        max_ms=float(np.max(d)),
        cv_pct=float(100 * np.std(d) / np.mean(d)) if np.mean(d) > 0 else 0.0,
        per_step_ms=[round(float(x), 3) for x in d],
        host_median_ms=float(median(host)),
        labels=steps.labels,
    )
