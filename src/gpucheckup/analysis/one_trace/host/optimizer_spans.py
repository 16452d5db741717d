"""The optimizer's own work on the host: each `Optimizer.step#` range less the closure it calls.

Definition (also in docs/metrics.md, "optimizer's own span"). torch's profiler marks each optimizer step with a
user annotation `Optimizer.step#<Class>.step` on the thread that called it. A step given a closure
(`optimizer.step(closure)`: Lightning's automatic optimization, LBFGS) calls the closure -- the model's forward
and backward -- inside that range, before it updates the parameters. The optimizer's own span is the range from
the end of the last closure work that starts inside it to the range's end. Closure work is
- an `Optimizer.closure#` range (the CUPTI light window records one per closure call), and
- a backward operator (`autograd::engine::evaluate_function: ...`, on any thread of the process: autograd runs the
  backward on its own thread) starting inside the range: the closure's backward. The closure's forward runs
  before its backward, so the cut after the backward's end leaves it out too.
A step with no closure work keeps its whole range. An optimizer that calls its closure between its own updates
(LBFGS) keeps only its work after the last call.

Why: every figure and edit about "the optimizer" (kernels in the `optimizer` category, the GPU idle the fused
optimizer can remove, the what-if edits that fuse or keep the optimizer eager) would otherwise count the
model's forward and backward as optimizer work: on a Lightning job on an H200 the closure held 8 ms of an
11 ms `Optimizer.step` range.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import unique
from gpucheckup.trace.tables import CPU_OP, USER_ANNOTATION, Trace

STEP_RANGE = "Optimizer.step#"
ZERO_GRAD_RANGE = "Optimizer.zero_grad#"
CLOSURE_RANGE = "Optimizer.closure#"  # capture/agent/cupti_window.py writes these (the same text)
BACKWARD_OP = "autograd::engine::evaluate_function"


def _ranges(trace: Trace, prefix: str) -> np.ndarray:
    """Host rows of the user annotations whose name starts with `prefix`."""
    host = trace.host
    ids = trace.name_ids(lambda n: n.startswith(prefix))
    return np.flatnonzero((host.cat == USER_ANNOTATION) & np.isin(host.name, ids))


def _last_end_inside(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window [lo, hi]: the latest end among the intervals starting inside it (NaN where none does)."""
    out = np.full(len(lo), np.nan)
    if len(starts) == 0:
        return out
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    first = np.searchsorted(s, lo, side="left")
    last = np.searchsorted(s, hi, side="right")
    for i in np.flatnonzero(last > first).tolist():
        out[i] = float(e[first[i]:last[i]].max())
    return out


def step_classes(trace: Trace) -> list[str]:
    """The optimizer class each `Optimizer.step#<Class>.step` range names, in optimizer_rows' order ("" where the name
    has another shape)."""
    out = []
    for i in trace.host.name[_ranges(trace, STEP_RANGE)].tolist():
        name = trace.names[int(i)][len(STEP_RANGE):]
        out.append(name.split(".", 1)[0] if name.endswith(".step") else "")
    return out


def closure_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the recorded `Optimizer.closure#` ranges (the model's forward and backward, where the loop
    passes them to the optimizer as a closure); empty where the trace records none."""
    rows = _ranges(trace, CLOSURE_RANGE)
    return trace.host.start[rows].astype(np.float64), trace.host.end[rows].astype(np.float64)


def optimizer_rows(trace: Trace, zero_grad: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, tids) of the optimizer's own span in each `Optimizer.step#` range (see the module docstring),
    with the `Optimizer.zero_grad#` ranges when `zero_grad`."""
    host = trace.host
    rows = _ranges(trace, STEP_RANGE)
    lo, hi = host.start[rows].astype(np.float64), host.end[rows].astype(np.float64)
    backward = np.flatnonzero((host.cat == CPU_OP) & np.isin(host.name, trace.name_ids(
        lambda n: n.startswith(BACKWARD_OP))))
    work = np.concatenate([_ranges(trace, CLOSURE_RANGE), backward])  # the closure's work, whichever records it
    cut = lo.copy()
    for pid in unique(host.pid[rows]).tolist():
        mine, theirs = host.pid[rows] == pid, work[host.pid[work] == pid]
        last = _last_end_inside(host.start[theirs], host.end[theirs], lo[mine], hi[mine])
        cut[mine] = np.fmax(cut[mine], np.minimum(last, hi[mine]))
    z = _ranges(trace, ZERO_GRAD_RANGE) if zero_grad else np.zeros(0, dtype=np.int64)
    return (np.concatenate([cut, host.start[z]]), np.concatenate([hi, host.end[z]]),
            np.concatenate([host.tid[rows], host.tid[z]]))
