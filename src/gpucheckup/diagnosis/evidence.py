"""The events behind a finding, as `Event`s: name, thread or stream, start in ms from the trace's first
event, duration. Rules pick the rows; this module turns them into events, longest first."""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.gap_causes import CAUSES
from gpucheckup.analysis.kernels import kernel_label
from gpucheckup.diagnosis.findings import Event
from gpucheckup.trace.tables import KERNEL

MAX_EVENTS = 5


def _t0(a: TraceAnalysis) -> float:
    return a.trace.span[0]


def event(a: TraceAnalysis, name: str, where: str, t_us: float, dur_us: float) -> Event:
    """An event on the trace's clock."""
    return Event(name=name, where=where, start_ms=(float(t_us) - _t0(a)) / 1000, dur_ms=float(dur_us) / 1000,
                 t_us=float(t_us))


def thread_name(a: TraceAnalysis, row: int) -> str:
    """The thread a host row ran on, by its trace label, else its id."""
    h = a.trace.host
    key = (int(h.pid[row]), int(h.tid[row]))
    return a.trace.thread_names.get(key) or f"thread {key[1]}"


def gaps(a: TraceAnalysis, causes: tuple[str, ...], n: int = MAX_EVENTS) -> list[Event]:
    """The longest idle gaps whose largest share is one of the causes."""
    g = a.timeline.gaps
    if len(g) == 0:
        return []
    idx = [CAUSES.index(c) for c in causes]
    dom = a.causes.dominant()
    sel = [i for i in g.dur.argsort()[::-1] if dom[i] in idx][:n]
    return [event(a, f"GPU idle ({CAUSES[int(dom[i])]}), step {int(g.step[i])}", f"GPU {int(g.device[i])}",
                  g.start[i], g.dur[i]) for i in sel]


def host_rows(a: TraceAnalysis, rows, n: int = MAX_EVENTS, name: str | None = None) -> list[Event]:
    """The longest of these host rows."""
    h = a.trace.host
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    lo, hi = a.steps.window
    inside = rows[(h.end[rows] >= lo) & (h.start[rows] <= hi)]
    rows = inside if len(inside) else rows
    top = rows[np.argsort(-(h.end[rows] - h.start[rows]), kind="stable")[:n]]
    return [event(a, name or a.trace.names[h.name[r]], thread_name(a, r), h.start[r], h.end[r] - h.start[r])
            for r in top]


def gpu_rows(a: TraceAnalysis, rows, n: int = MAX_EVENTS) -> list[Event]:
    """The longest of these GPU ops (kernels, copies, memsets)."""
    g = a.trace.gpu
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    top = rows[np.argsort(-(g.end[rows] - g.start[rows]), kind="stable")[:n]]
    return [event(a, kernel_label(a.trace.names[g.name[r]]) if g.kind[r] == KERNEL else a.trace.names[g.name[r]],
                  f"GPU {int(g.device[r])} stream {int(g.stream[r])}",
                  g.start[r], g.end[r] - g.start[r]) for r in top]


def kernels_where(a: TraceAnalysis, keep, n: int = MAX_EVENTS) -> list[Event]:
    """The longest counted kernels whose name passes keep(name)."""
    k = a.kernels
    names = a.trace.names
    ids = np.unique(a.trace.gpu.name[k.rows])
    ok = np.array([i for i in ids if keep(names[i])], dtype=np.int64)
    return gpu_rows(a, k.rows[np.isin(a.trace.gpu.name[k.rows], ok)], n)


def steps(a: TraceAnalysis, idx, label: str = "step window") -> list[Event]:
    """Step windows by index."""
    st = a.steps
    return [event(a, f"{label} {st.labels[i]}", "steps", st.start[i], st.end[i] - st.start[i]) for i in idx]
