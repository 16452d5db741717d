"""Host-GPU synchronizations: how often, how long the host blocked, what caused each one.

Definitions (also in docs/metrics.md).
- sync call: a CUDA call that makes the host wait for the GPU (see `host_calls`: the sync
  APIs, the synchronous cudaMemcpy and copies touching pageable memory).
- sync point: the sync calls inside one outermost operator count once (`x.item()` issues a
  copy and a stream synchronize: one point). A sync call outside every operator is a point
  of its own. Counted in the analysis window.
- blocked time: the summed duration of the point's sync calls (the host waiting).
- GPU idle caused: the idle time of the gaps that the sync drained (see `gap_causes`), which
  is what the sync costs: a sync while the GPU still has queued work blocks the host but
  costs the GPU nothing until its queue runs dry.
- cause: the innermost operator around the sync call (e.g. `aten::_local_scalar_dense`), the
  outermost one (e.g. `aten::item`), and, where the trace has Python stacks, the innermost
  Python frame outside torch (the user's line).
- recorded: whether the trace could hold a sync call at all (`Trace.syncs_recorded`): a CUPTI light
  window records none unless asked (`--light-syncs`); there the count is 0 and `recorded` false,
  and every report says "not recorded", never "0 per step".
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace.host.gap_causes import SYNC, GapCauses
from gpucheckup.analysis.groups import pair_ids
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.trace.tables import CPU_OP, PYTHON, Trace


class SyncCause(msgspec.Struct):
    """The sync points of one cause (outer op, inner op, user frame, calls): how many, the host blocked, the GPU idle."""

    op: str  # the outermost operator (else the first call)
    inner_op: str | None
    frame: str | None  # the innermost Python frame outside torch (None without stacks)
    calls: list[str]
    count: int
    blocked_ms: float
    gpu_idle_ms: float
    per_step: float


class SyncPoint(msgspec.Struct):
    """One sync point: when (the trace's clock), what, the host blocked and the GPU idle it caused."""

    t_us: float
    op: str
    inner_op: str | None
    frame: str | None
    blocked_us: float
    gpu_idle_us: float


class SyncStats(msgspec.Struct):
    """Sync points in the window (module docstring), in total and per step, by cause (most GPU idle first) and each."""

    recorded: bool  # the trace could hold a sync call (Trace.syncs_recorded)
    count: int
    count_per_step: float
    blocked_ms: float
    blocked_ms_per_step: float
    gpu_idle_ms: float
    gpu_idle_ms_per_step: float
    by_cause: list[SyncCause]
    points: list[SyncPoint]  # in time order


def sync_stats(trace: Trace, steps: Steps, launch_rows: np.ndarray, causes: GapCauses) -> SyncStats:
    """Sync points in the window, grouped by what caused them."""
    host = trace.host
    lo, hi = steps.window
    calls = host_calls.sync_call_rows(trace, launch_rows)
    calls = calls[(host.start[calls] >= lo) & (host.start[calls] <= hi)]
    points = _sync_points(trace, calls, _idle_by_call(causes))
    n = len(points)
    return SyncStats(
        recorded=trace.syncs_recorded,
        count=n,
        count_per_step=n / steps.count,
        blocked_ms=sum(p["blocked_us"] for p in points.values()) / 1000,
        blocked_ms_per_step=sum(p["blocked_us"] for p in points.values()) / 1000 / steps.count,
        gpu_idle_ms=sum(p["idle_us"] for p in points.values()) / 1000,
        gpu_idle_ms_per_step=sum(p["idle_us"] for p in points.values()) / 1000 / steps.count,
        by_cause=[SyncCause(**g) for g in _by_cause(points, steps.count)],
        points=sorted(
            (SyncPoint(t_us=p["start"], op=p["outer_op"] or p["calls"][0], inner_op=p["inner_op"], frame=p["frame"],
                       blocked_us=p["blocked_us"], gpu_idle_us=p["idle_us"])
             for p in points.values()),
            key=lambda p: p.t_us,
        ),
    )


def _idle_by_call(causes: GapCauses) -> dict[int, float]:
    """The GPU idle time (us) each sync call's row drained (gap_causes' sync share of each gap)."""
    idle_by_call: dict[int, float] = defaultdict(float)
    times = causes.time[:, SYNC].tolist() if len(causes.time) else []  # Python numbers: no numpy scalar per gap
    for row, t in zip(causes.sync_row.tolist(), times):
        if row >= 0:
            idle_by_call[row] += t
    return idle_by_call


def _sync_points(trace: Trace, calls: np.ndarray, idle_by_call: dict[int, float]) -> dict[tuple, dict]:
    """The sync points (module docstring): the calls inside one outermost operator, or a call outside every one."""
    host = trace.host
    points: dict[tuple, dict] = {}
    around = _enclosing_all(trace, calls, (CPU_OP,))
    frames = _enclosing_all(trace, calls, (PYTHON,)) if trace.with_stack else {}
    for row in calls:
        ops = around[int(row)]
        key = ("op", ops[0]) if ops else ("call", int(row))
        p = points.setdefault(key, {
            "start": float(host.start[row]),
            "calls": [],
            "blocked_us": 0.0,
            "idle_us": 0.0,
            "inner_op": trace.names[host.name[ops[-1]]] if ops else None,
            "outer_op": trace.names[host.name[ops[0]]] if ops else None,
            "frame": host_calls.innermost_user_frame([trace.names[host.name[f]] for f in frames[int(row)]])
            if trace.with_stack else None,
            "thread": int(host.tid[row]),
        })
        p["calls"].append(trace.names[host.name[row]])
        p["blocked_us"] += float(host.end[row] - host.start[row])
        p["idle_us"] += idle_by_call.get(int(row), 0.0)
    return points


def _by_cause(points: dict[tuple, dict], n_steps: int) -> list[dict]:
    """The points grouped by cause (operators, user frame, calls), the most GPU idle first."""
    groups: dict[tuple, dict] = {}
    for p in points.values():
        key = (p["outer_op"], p["inner_op"], p["frame"], tuple(sorted(set(p["calls"]))))
        g = groups.setdefault(key, {
            "op": p["outer_op"] or p["calls"][0],
            "inner_op": p["inner_op"],
            "frame": p["frame"],
            "calls": sorted(set(p["calls"])),
            "count": 0,
            "blocked_ms": 0.0,
            "gpu_idle_ms": 0.0,
        })
        g["count"] += 1
        g["blocked_ms"] += p["blocked_us"] / 1000
        g["gpu_idle_ms"] += p["idle_us"] / 1000
    by_cause = sorted(groups.values(), key=lambda g: (-g["gpu_idle_ms"], -g["count"]))
    for g in by_cause:
        g["per_step"] = g["count"] / n_steps
    return by_cause


def _enclosing_all(trace: Trace, rows: np.ndarray, cats: tuple[int, ...]) -> dict[int, list[int]]:
    """`host_calls.enclosing` for many rows at once: per thread, one sweep in start order with a stack of the
    open candidates, over only the candidates that contain some row's start (a candidate that contains no
    row's start encloses no row), found with two binary searches (linear in rows and in those candidates)."""
    host = trace.host
    out: dict[int, list[int]] = {int(r): [] for r in rows}
    if not len(rows):
        return out
    cand = np.flatnonzero(np.isin(host.cat, cats))
    # One sort groups candidates and rows by thread (a mask per thread was threads x candidates).
    pid = np.concatenate([host.pid[cand], host.pid[rows]])
    tid = np.concatenate([host.tid[cand], host.tid[rows]])
    thread = pair_ids(pid, tid)
    c_thread, r_thread = thread[: len(cand)], thread[len(cand):]
    srt = np.lexsort((-host.end[cand], host.start[cand], c_thread))  # per thread by start, outermost first
    order, o_thread = cand[srt], c_thread[srt]
    srt = np.lexsort((host.start[rows], r_thread))  # per thread by start (stable: equal starts in `rows` order)
    q_rows, q_thread = rows[srt], r_thread[srt]
    q_cut = np.flatnonzero(np.r_[True, q_thread[1:] != q_thread[:-1], True])
    for a, b in zip(q_cut[:-1], q_cut[1:]):
        q = q_rows[a:b]
        lo, hi = np.searchsorted(o_thread, q_thread[a], "left"), np.searchsorted(o_thread, q_thread[a], "right")
        mine = order[lo:hi]
        contains = (np.searchsorted(host.start[q], host.end[mine], "right")
                    > np.searchsorted(host.start[q], host.start[mine], "left"))
        mine = mine[contains]
        cands, c_start, c_end = mine.tolist(), host.start[mine].tolist(), host.end[mine].tolist()
        stack, i = [], 0  # indices into cands
        for r, t0, t1 in zip(q.tolist(), host.start[q].tolist(), host.end[q].tolist()):
            while i < len(cands) and c_start[i] <= t0:  # open every candidate that starts by t0
                while stack and c_end[stack[-1]] < c_start[i]:
                    stack.pop()  # ended before this start: contains no later row
                stack.append(i)
                i += 1
            while stack and c_end[stack[-1]] < t0:
                stack.pop()
            out[r] = [cands[k] for k in stack if c_start[k] <= t0 and c_end[k] >= t1 and cands[k] != r]
    return out
