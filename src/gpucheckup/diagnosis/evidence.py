"""The events behind a finding, as `Event`s: name, thread or stream, start in ms from the trace's first
event, duration. Rules pick the rows; this module turns them into events, longest first."""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.distinct import median, unique
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES
from gpucheckup.analysis.one_trace.gpu.kernels import kernel_label
from gpucheckup.diagnosis.findings import Event
from gpucheckup.trace.tables import KERNEL

MAX_EVENTS = 5


def _t0(a: TraceAnalysis) -> float:
    return a.trace.span[0]


def event(a: TraceAnalysis, name: str, where: str, t_us: float, dur_us: float) -> Event:
    """An event on the trace's clock."""
    return Event(name=name, where=where, start_ms=(float(t_us) - _t0(a)) / 1000, dur_ms=float(dur_us) / 1000,
                 t_us=float(t_us))


def _step(a: TraceAnalysis, i: int) -> str:
    """A step as every report numbers it: `#12` for ProfilerStep#12 (report/text/lines.py step_label)."""
    label = a.steps.labels[i] if 0 <= i < len(a.steps.labels) else str(i)
    return label.removeprefix("ProfilerStep")


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
    return [event(a, f"GPU idle ({CAUSES[int(dom[i])]}), step {_step(a, int(g.step[i]))}",
                  f"GPU {int(g.device[i])}", g.start[i], g.dur[i]) for i in sel]


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
    ids = unique(a.trace.gpu.name[k.rows])
    ok = np.array([i for i in ids if keep(names[i])], dtype=np.int64)
    return gpu_rows(a, k.rows[np.isin(a.trace.gpu.name[k.rows], ok)], n)


def steps(a: TraceAnalysis, idx, label: str = "step window") -> list[Event]:
    """Step windows by index."""
    st = a.steps
    return [event(a, f"{label} {st.labels[i]}", "steps", st.start[i], st.end[i] - st.start[i]) for i in idx]


# ---- run-level events: off the trace, timed in ms from the run's start, from the run directory's files ----

def _run_t0(ra) -> float:
    """The run's start in epoch seconds: the manifest's, else the earliest sample or step end."""
    m = ra.run.manifest.get("started_epoch_s")
    if m:
        return float(m)
    firsts = []
    if ra.run.nvml is not None and len(ra.run.nvml.get("t_s", [])):
        firsts.append(float(np.nanmin(ra.run.nvml["t_s"])))
    for st in ra.run.steps.values():
        t = np.asarray(st.get("t_end_s", []), dtype=float)
        if len(t) and np.isfinite(t).any():
            firsts.append(float(np.nanmin(t)))
    return min(firsts) if firsts else 0.0


def run_event(ra, name: str, where: str, start_s: float, dur_s: float) -> Event:
    """An event at epoch seconds start_s, as ms from the run's start."""
    return Event(name=name, where=where, start_ms=1000 * (float(start_s) - float(_run_t0(ra))),
                 dur_ms=1000 * float(dur_s))  # plain floats: the JSON encoder takes no numpy scalars


def run_steps(ra, steps, n: int = MAX_EVENTS) -> list[Event]:
    """Events for the given step numbers of the run's steps file, longest first."""
    key = ra.steps_key
    if key is None:
        return []
    st = ra.run.steps[key]
    where = "steps.csv" if key == "main" else f"steps-{key}.csv"
    num = np.asarray(st["step"])
    ms = np.asarray(st["ms"], dtype=float)
    t_end = np.asarray(st.get("t_end_s", [np.nan] * len(num)), dtype=float)
    if not np.isfinite(t_end).any():  # no wall clock: place steps by their summed times
        t_end = _run_t0(ra) + np.nancumsum(ms) / 1000
    rows = [i for i in np.flatnonzero(np.isin(num, list(steps))) if np.isfinite(ms[i])]
    rows = sorted(rows, key=lambda i: -ms[i])[:n]
    return [run_event(ra, f"step {int(num[i])} ({ms[i]:.1f} ms)", where, t_end[i] - ms[i] / 1000, ms[i] / 1000)
            for i in rows]


def run_stretches(ra, t_s: np.ndarray, mask: np.ndarray, name: str, n: int = MAX_EVENTS) -> list[Event]:
    """The longest stretches of consecutive NVML samples where mask holds."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(int), [0]))))
    spans = list(zip(edges[::2], edges[1::2] - 1))
    step = float(median(np.diff(t_s))) if len(t_s) > 1 else 0.0
    spans.sort(key=lambda ab: -(t_s[ab[1]] - t_s[ab[0]]))
    return [run_event(ra, name, "nvml.csv", float(t_s[a]), float(t_s[b] - t_s[a]) + step) for a, b in spans[:n]]
