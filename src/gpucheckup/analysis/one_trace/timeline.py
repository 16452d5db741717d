"""The GPU timeline: busy time per device and stream, and every idle gap.

Definitions (also in docs/metrics.md):
- busy: the union of kernel, memcpy and memset intervals on a device (all its streams
  together), clipped to the analysis window (first step start to last step end).
- busy % = busy / window length. With several devices, the headline is their mean.
  Healthy above 85%; under 70% the GPU is starved (the articles' bands).
- gap: a stretch of the window in which a device runs nothing, cut at step boundaries so that
  each gap lies in one step window, with its duration and its position in that step (0 = the
  step's start, 1 = its end).
- idle_at_step_start %: the share of idle time in gaps that begin in the first 10% of their
  step window. Idle spread evenly over the step gives about 10%; most of it means the GPU
  waits at each step's start (data loading, a sync at the step boundary).
- largest_gap_share %: per step, the longest gap's share of that step's idle time, averaged
  with idle time as weights. Small gaps spread between kernels (launch overhead) give a few
  percent; one long wait per step gives most of it.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.trace.tables import Trace

STEP_START = 0.10  # "at the step's start": a gap beginning in the first 10% of the step window


class Gaps(msgspec.Struct):
    """Idle stretches of every device inside the analysis window."""

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray  # step window index of the gap's start
    position: np.ndarray  # gap start within its step, 0..1

    def __len__(self) -> int:
        return len(self.start)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


class Timeline(msgspec.Struct):
    """Busy intervals and idle gaps per device."""

    window: tuple[float, float]
    busy: dict[int, iv.Intervals]  # per device, normalised
    busy_by_stream: dict[tuple[int, int], float]  # (device, stream) -> busy us in window
    gaps: Gaps
    step_busy_pct: np.ndarray  # per step, mean over devices

    @property
    def length(self) -> float:
        return self.window[1] - self.window[0]

    def busy_us(self, device: int) -> float:
        return iv.total(self.busy[device])

    @property
    def busy_pct(self) -> float:
        if not self.busy or self.length <= 0:
            return 0.0
        return float(np.mean([100 * self.busy_us(d) / self.length for d in self.busy]))


def gpu_timeline(trace: Trace, steps: Steps) -> Timeline:
    """Busy time and idle gaps of each device over the step windows."""
    lo, hi = steps.window
    gpu = trace.gpu
    busy: dict[int, iv.Intervals] = {}
    by_stream: dict[tuple[int, int], float] = {}
    gap_parts = []
    step_busy = np.zeros(steps.count)
    order = np.lexsort((gpu.stream, gpu.device))  # one stable sort: each device's, each stream's events a slice
    dv, sm = gpu.device[order], gpu.stream[order]
    cut = np.flatnonzero(np.r_[True, dv[1:] != dv[:-1], True]) if len(dv) else np.zeros(1, dtype=int)
    for a, b in zip(cut[:-1], cut[1:]):
        dev, on = dv[a], order[a:b]
        busy[int(dev)] = iv.clip(iv.union(gpu.start[on], gpu.end[on]), lo, hi)
        scut = np.flatnonzero(np.r_[True, sm[a + 1:b] != sm[a:b - 1], True])
        for c, d in zip(scut[:-1], scut[1:]):
            m = order[a + c:a + d]
            by_stream[(int(dev), int(sm[a + c]))] = iv.total(iv.clip(iv.union(gpu.start[m], gpu.end[m]), lo, hi))
        gs, ge = _split_at(iv.gaps(busy[int(dev)], lo, hi), steps.start[1:])
        gap_parts.append((np.full(len(gs), int(dev)), gs, ge))
        step_busy += iv.covered_between(busy[int(dev)], steps.start, steps.end)
    n_dev = max(len(busy), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        step_busy_pct = np.nan_to_num(100 * step_busy / n_dev / steps.duration)
    if gap_parts:
        dev_a, gs, ge = (np.concatenate(x) for x in zip(*gap_parts))
    else:
        dev_a, gs, ge = np.zeros(0, dtype=int), np.zeros(0), np.zeros(0)
    step = steps.index_of(gs)
    safe = np.maximum(step, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = np.clip((gs - steps.start[safe]) / steps.duration[safe], 0, 1)
    gaps = Gaps(device=dev_a, start=gs, end=ge, step=step, position=np.nan_to_num(pos))
    return Timeline(window=(lo, hi), busy=busy, busy_by_stream=by_stream, gaps=gaps, step_busy_pct=step_busy_pct)


def _split_at(gaps: iv.Intervals, cuts: np.ndarray) -> iv.Intervals:
    """Cut intervals at the given times (step boundaries)."""
    s, e = gaps
    if len(s) == 0 or len(cuts) == 0:
        return s, e
    inside = cuts[(cuts > s.min()) & (cuts < e.max())]
    bounds = np.sort(np.concatenate([s, e, inside]), kind="stable")  # three runs in order: merged
    lo, hi = bounds[:-1], bounds[1:]
    mid = (lo + hi) / 2
    k = np.searchsorted(s, mid, side="right") - 1
    keep = (k >= 0) & (mid < e[np.maximum(k, 0)]) & (hi > lo)
    return lo[keep], hi[keep]


class GapPattern(msgspec.Struct):
    """Where a trace's idle time falls: how much, in how many gaps, at step starts, in each step's longest gap."""

    idle_ms: float  # all idle gaps, summed
    gap_count: int
    idle_at_step_start_pct: float  # of the idle time: in gaps at a step's start (position <= STEP_START)
    largest_gap_share_pct: float  # of the idle time: in the longest gap of each (step, device)
    shape: str  # "bunched at step start", "bunched", "mixed", "spread between kernels" or "none"


def gap_pattern(timeline: Timeline, steps: Steps) -> GapPattern:
    """Where idle time falls inside steps: at their start or spread between kernels."""
    g = timeline.gaps
    idle = float(g.dur.sum())
    if idle <= 0 or len(g) == 0:
        return GapPattern(0.0, 0, 0.0, 0.0, "none")
    early = float(g.dur[(g.step >= 0) & (g.position <= STEP_START)].sum())
    m = g.step >= 0  # the longest gap of each (step, device): one sort, not a mask per step
    order = np.lexsort((g.device[m], g.step[m]))
    st, dv, du = g.step[m][order], g.device[m][order], g.dur[m][order]
    first = np.flatnonzero(np.r_[True, (st[1:] != st[:-1]) | (dv[1:] != dv[:-1])]) if len(st) else []
    largest = sum(np.maximum.reduceat(du, first).tolist()) if len(st) else 0.0
    start_pct = 100 * early / idle
    largest_pct = 100 * largest / idle
    if largest_pct >= 50:
        shape = "bunched at step start" if start_pct >= 50 else "bunched"
    elif largest_pct < 20:
        shape = "spread between kernels"
    else:
        shape = "mixed"
    return GapPattern(idle / 1000, int(len(g)), start_pct, largest_pct, shape)
