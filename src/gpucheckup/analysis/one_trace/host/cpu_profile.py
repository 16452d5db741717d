"""The CPU side of a trace without device activity: operators by self time, DataLoader, Python between ops, threads.

Definitions (also in docs/metrics.md, "CPU-side check-up"):
- operator: a `cpu_op` event. Its self time is its duration less the durations of the operators
  directly inside it on the same thread (nesting by start and end times).
- span: the union of the `ProfilerStep#N` annotations when the trace has them, else the main
  thread's first operator start to its last operator end. The main thread is the thread with the
  most top-level operator time (top-level: inside no other operator).
- busy: the union of a thread's top-level operators inside the span, as a share of the span.
- Python between ops: the main thread's span less its busy time: the host runs Python (or waits)
  with no operator open.
- DataLoader: the union of `enumerate(DataLoader)#...__next__` annotations (and operators) on the
  main thread, as a share of the span: the training loop waiting for its next batch (with
  num_workers=0, the loading itself). `loader_iterators`: their distinct names, which say whether
  the loader runs in-process (_SingleProcessDataLoaderIter) or in workers (_MultiProcessingDataLoaderIter).
- Python outside the DataLoader: Python between ops less the DataLoader's time (the Dataset's Python
  runs inside `__next__` with no operator open; it is the DataLoader's, not the loop's).
- per step: a figure over the span divided by the number of ProfilerStep windows (1 without them: the
  span is one step); when the job's step time without the profiler is known (`step_ms`: a run
  directory's unprofiled steps), its share of the span times that step, so that no per-step figure
  exceeds the step the job really runs (the profiler slows the profiled steps' host side).
- steps: `ProfilerStep#N` annotations, when the trace has them; their median length.
Analysis reads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.distinct import median, unique
from gpucheckup.analysis.groups import by_key
from gpucheckup.analysis.one_trace.steps import STEP_NAME
from gpucheckup.trace.tables import CPU_OP, USER_ANNOTATION, Trace

TOP_OPS = 15  # operators listed by self time
TOP_THREADS = 8  # threads listed by busy time
DATALOADER_PREFIX = "enumerate(DataLoader)"
DATALOADER_HIGH_PCT = 10.0  # a DataLoader share above this leads the summary (as in the GPU check-up)
PYTHON_HIGH_PCT = 30.0  # Python between ops above this share of the span leads the summary


@dataclass
class OpRow:
    """One operator name's totals."""

    name: str
    count: int
    self_ms: float
    total_ms: float  # the summed durations of its calls, the operators inside them included
    self_pct: float  # of all operators' self time


@dataclass
class ThreadRow:
    """One thread's operator activity."""

    pid: int
    tid: int
    name: str
    ops: int
    busy_ms: float
    busy_pct: float  # of the span


@dataclass
class CpuProfile:
    """The CPU-side figures of a trace without device activity."""

    ops_count: int
    self_ms: float  # all operators' self time, every thread
    span_ms: float
    main_thread: ThreadRow
    python_between_ms: float
    python_between_pct: float
    dataloader_ms: float
    dataloader_pct: float
    steps: int
    step_median_ms: float | None
    top_ops: list[OpRow]
    threads: list[ThreadRow]
    summary: str  # one line: where the main thread's time goes
    python_outside_loader_ms: float = 0.0  # Python between ops outside the DataLoader's __next__
    loader_iterators: list[str] = field(default_factory=list)  # the DataLoader annotations' distinct names
    step_ms: float | None = None  # the job's step without the profiler, when known (a run directory's)

    def per_step(self, ms: float) -> float:
        """A figure over the span (ms) per step: its share of the span times the job's unprofiled step when known,
        else over the ProfilerStep windows (the span as one step without them)."""
        if self.step_ms:
            return ms / self.span_ms * self.step_ms if self.span_ms > 0 else 0.0
        return ms / max(self.steps, 1)


def self_times(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Self time of each interval (its length less its direct children's) and whether it is top-level,
    with intervals nested per thread."""
    n = len(start)
    self_t = end - start
    top = np.ones(n, dtype=bool)
    order = np.lexsort((-(end - start), start, thread))  # per thread, by start; a parent before its child
    stack: list[int] = []
    last_thread = None
    for i in order.tolist():
        if thread[i] != last_thread:
            stack, last_thread = [], thread[i]
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        if stack and end[i] <= end[stack[-1]] + 1e-6:
            parent = stack[-1]
            self_t[parent] -= end[i] - start[i]
            top[i] = False
        stack.append(i)
    return np.maximum(self_t, 0.0), top


def cpu_profile(trace: Trace) -> CpuProfile | None:
    """The CPU-side check-up of a trace; None when it has no CPU operators."""
    h = trace.host
    ops = np.flatnonzero(h.cat == CPU_OP)
    if len(ops) == 0:
        return None
    start, end = h.start[ops], h.end[ops]
    key = h.pid[ops].astype(np.int64) * (1 << 32) + h.tid[ops].astype(np.int64)
    self_t, top = self_times(start, end, key)
    step_ids = trace.name_ids(lambda s: STEP_NAME.match(s) is not None)
    st = (h.cat == USER_ANNOTATION) & np.isin(h.name, step_ids)
    step_len = h.end[st] - h.start[st]
    of_thread = by_key(key)  # one sort, not a mask per thread (threads x ops)
    top_union = {k: iv.union(start[i[top[i]]], end[i[top[i]]]) for k, i in of_thread.items()}
    main_key = max(top_union, key=lambda k: iv.total(top_union[k]))
    on = key == main_key
    windows = (iv.union(h.start[st], h.end[st]) if st.any()
               else iv.union(start[on].min(keepdims=True), end[on].max(keepdims=True)))
    span = max(iv.total(windows), 1e-9)
    rows = []
    for k, i in of_thread.items():
        pid, tid = int(h.pid[ops[i[0]]]), int(h.tid[ops[i[0]]])
        busy = iv.total(iv.intersect(top_union[k], windows))
        rows.append(ThreadRow(pid, tid, trace.thread_names.get((pid, tid), ""), len(i), busy / 1e3,
                              100 * busy / span))
    rows.sort(key=lambda r: (r.pid * (1 << 32) + r.tid != main_key, -r.busy_ms))
    main = rows[0]
    busy = main.busy_ms * 1e3
    on_main = (h.pid == main.pid) & (h.tid == main.tid)
    names = np.asarray(trace.names, dtype=object)
    dl_ids = trace.name_ids(lambda s: s.startswith(DATALOADER_PREFIX))
    dl = on_main & np.isin(h.name, dl_ids) & np.isin(h.cat, (CPU_OP, USER_ANNOTATION))
    dl_iv = iv.intersect(iv.union(h.start[dl], h.end[dl]), windows) if dl.any() else None
    dl_us = iv.total(dl_iv) if dl_iv is not None else 0.0
    idle = iv.subtract(windows, iv.intersect(top_union[main_key], windows))  # main thread: no operator open
    outside_us = iv.total(iv.subtract(idle, dl_iv) if dl_iv is not None else idle)
    loaders = sorted({str(names[i]) for i in unique(h.name[dl])}) if dl.any() else []
    total_self = float(self_t.sum())
    by_name: dict[int, list] = {}
    op_names = h.name[ops]
    dur = end - start
    for nid, i in by_key(op_names).items():  # one sort, not a mask per name (names x ops)
        by_name[nid] = [len(i), float(self_t[i].sum()), float(dur[i].sum())]
    top_rows = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
    top_ops = [OpRow(str(names[nid]), c, s / 1e3, t / 1e3, 100 * s / total_self if total_self > 0 else 0.0)
               for nid, (c, s, t) in top_rows]
    between = max(span - busy, 0.0)
    prof = CpuProfile(
        ops_count=int(len(ops)), self_ms=total_self / 1e3, span_ms=span / 1e3, main_thread=main,
        python_between_ms=between / 1e3, python_between_pct=100 * between / span,
        dataloader_ms=dl_us / 1e3, dataloader_pct=100 * dl_us / span,
        steps=int(st.sum()), step_median_ms=float(median(step_len)) / 1e3 if st.any() else None,
        top_ops=top_ops, threads=rows[:TOP_THREADS], summary="", python_outside_loader_ms=outside_us / 1e3,
        loader_iterators=loaders)
    prof.summary = summary_line(prof)
    return prof


def summary_line(p: CpuProfile) -> str:
    """Where the main thread's time goes, the largest part first."""
    if p.dataloader_pct >= DATALOADER_HIGH_PCT:
        return (f"the training loop waits for data {p.dataloader_pct:.1f}% of the time (DataLoader over "
                f"{DATALOADER_HIGH_PCT:g}%)")
    if p.python_between_pct >= PYTHON_HIGH_PCT:
        return (f"Python between operators holds {p.python_between_pct:.1f}% of the main thread's time (over "
                f"{PYTHON_HIGH_PCT:g}%)")
    top = p.top_ops[0]
    return (f"operators run {p.main_thread.busy_pct:.1f}% of the main thread's time; the largest by self time is "
            f"{top.name} ({top.self_pct:.1f}% of operator self time)")
