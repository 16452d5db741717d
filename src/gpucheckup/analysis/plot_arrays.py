"""The arrays behind the report's plots, computed from a `TraceAnalysis`.

These regroup figures that the analysis modules define (idle gaps and their causes, busy
time per step); they add no new metric. Definitions (also in docs/reports.md):
- timeline rows: one per step window and device. `busy_ms` is the device's busy time inside
  the window, `idle_ms[cause]` the gap time attributed to each cause (`gap_causes`). For the
  picture, the row is cut into bins of `bin_ms` from the step's start; each bin shows the state
  that holds most of its time (busy, or the dominant cause of the gaps in it), run-length
  encoded as [first bin, end bin, state index into `states`].
- gap histogram: gaps counted by duration in log-spaced bins (4 per decade), split by each
  gap's dominant cause; `time_ms` is the idle time of those gaps.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES
from gpucheckup.analysis.groups import by_key, pair_ids

TIMELINE_BINS = 300  # bins across the longest step: about one per two pixels of the plot
MAX_TIMELINE_ROWS = 64  # steps x devices shown; the rest is counted in `truncated`
BINS_PER_DECADE = 4
HIST_MIN_US, HIST_MAX_US = 0.1, 1e7  # shorter gaps fall in the first bin, longer ones in the last


def step_timeline(a: TraceAnalysis) -> dict:
    """Per step and device: busy time, idle time by cause, and a binned picture of where each falls."""
    st, tl, g = a.steps, a.timeline, a.timeline.gaps
    dom = a.causes.dominant()
    devices = sorted(tl.busy)
    scale = float(st.duration.max()) if st.count else 0.0
    bin_us = scale / TIMELINE_BINS if scale > 0 else 1.0
    rows = []
    pairs = [(i, dev) for i in range(st.count) for dev in devices]
    busy = {dev: iv.Coverage(tl.busy[dev]) for dev in devices}  # summed once, asked once per step
    row_gaps = by_key(pair_ids(g.step, g.device))  # the gaps of each (step, device), in order: one sort
    gap_row = {(int(g.step[k[0]]), int(g.device[k[0]])): k for k in row_gaps.values()}
    none = np.zeros(0, dtype=np.int64)
    for i, dev in pairs[:MAX_TIMELINE_ROWS]:
        lo, hi = float(st.start[i]), float(st.end[i])
        in_row = gap_row.get((i, dev), none)
        idle = a.causes.time[in_row].sum(axis=0) if len(in_row) else np.zeros(len(CAUSES))
        busy_us = float(busy[dev].between(np.array([lo]), np.array([hi]))[0])
        n_bins = max(1, int(np.ceil((hi - lo) / bin_us - 1e-9)))
        edges = np.minimum(lo + bin_us * np.arange(n_bins + 1), hi)
        share = np.zeros((1 + len(CAUSES), n_bins))
        share[0] = busy[dev].between(edges[:-1], edges[1:])
        for c, m in by_key(dom[in_row]).items():
            m = in_row[m]
            share[1 + c] = iv.covered_between(iv.union(g.start[m], g.end[m]), edges[:-1], edges[1:])
        rows.append({
            "step": i,
            "label": st.labels[i],
            "device": dev,
            "dur_ms": (hi - lo) / 1000,
            "busy_ms": busy_us / 1000,
            "idle_ms": {c: float(idle[k]) / 1000 for k, c in enumerate(CAUSES)},
            "runs": _runs(np.argmax(share, axis=0)),
        })
    return {
        "states": ["busy", *CAUSES],
        "bins": TIMELINE_BINS,
        "bin_ms": bin_us / 1000,
        "scale_ms": scale / 1000,
        "rows": rows,
        "truncated": max(0, len(pairs) - MAX_TIMELINE_ROWS),
    }


def _runs(state: np.ndarray) -> list[list[int]]:
    """Run-length encoding: [first index, end index (exclusive), value] per run of equal values."""
    if len(state) == 0:
        return []
    cut = np.flatnonzero(np.diff(state)) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [len(state)]))
    return [[int(s), int(e), int(state[s])] for s, e in zip(starts, ends)]


def gap_histogram(a: TraceAnalysis) -> dict:
    """Gap counts and idle time per log-spaced duration bin, split by each gap's dominant cause."""
    g = a.timeline.gaps
    decades = np.log10(HIST_MAX_US / HIST_MIN_US)
    edges = HIST_MIN_US * 10 ** (np.arange(int(round(decades * BINS_PER_DECADE)) + 1) / BINS_PER_DECADE)
    dur = g.dur
    k = np.clip(np.searchsorted(edges, dur, side="right") - 1, 0, len(edges) - 2)
    dom = a.causes.dominant()
    n_bins = len(edges) - 1
    count = np.zeros((len(CAUSES), n_bins), dtype=np.int64)
    time = np.zeros((len(CAUSES), n_bins))
    np.add.at(count, (dom, k), 1)
    np.add.at(time, (dom, k), dur)
    used = np.flatnonzero(count.sum(axis=0))
    lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 0)
    return {
        "edges_us": [float(x) for x in edges[lo:hi + 1]] if hi > lo else [],
        "count": {c: [int(x) for x in count[i, lo:hi]] for i, c in enumerate(CAUSES)},
        "time_ms": {c: [float(x) / 1000 for x in time[i, lo:hi]] for i, c in enumerate(CAUSES)},
    }
