"""Replay a trace's steps through a dependency graph, so that a fix can be applied as a graph edit.

The model (also in docs/metrics.md, "Replay"), after Daydream (Zhu et al., USENIX ATC 2020):
- **Host chain.** One chain per trace: every CUDA runtime/driver call of every host thread (the
  main thread and the autograd thread take turns: the main thread blocks in `backward()`), plus
  zero-length markers at the `ProfilerStep#` starts and ends and the DataLoader `__next__`
  annotations, in start order. Node j starts `gap_j` after the latest end of the nodes before it
  (its *frontier*); `gap_j` is the host's own work between GPU calls (Python, operator dispatch,
  data loading), held fixed; it is negative where another thread's call was still running.
- **Calls** keep their measured duration. **Sync calls** (`host_calls.sync_call_rows`: the sync
  APIs, the synchronous `cudaMemcpy`, copies to or from pageable memory) wait for the GPU: when
  the GPU was still busy at the call's start, the call ends `ret` after the last awaited GPU op
  (per stream, the last op launched up to the call that ended during it), else after its
  measured duration. Their own cost (without a wait) is `min(duration, ret)`.
- **GPU ops** (kernels, copies, memsets) run in launch order on their stream. An op launched
  while its stream predecessor still ran was *queued*: it starts `gap` after the predecessor
  ends (the measured GPU-side gap held fixed) and no sooner than the trace's typical launch
  latency after its call. An op launched onto an idle stream was *host-bound*: it starts `lat`
  after its call starts (the measured launch latency held fixed) and no sooner than the trace's
  typical back-to-back gap after its predecessor. Ops without a launching call in the trace
  (launched before it began) keep their gap to their predecessor, or their start when first.
  GPU op durations are held fixed.
- **Steps** are then cut from the replayed times exactly as `steps.py` cuts the measured ones:
  step end = max(host step end, end of the GPU ops launched inside the host step).
Replaying the graph unchanged gives back the measured step times (the test checks every
fixture within REPRODUCE_TOLERANCE). Cross-stream events: all fixtures use one stream; ops on
other streams are ordered on their own stream and by their launches only (cudaStreamWaitEvent
is not modelled).

**Profiler overhead.** The profiler slows the host, not the kernels (profiler_overhead.py). When
the step time without the profiler is known and the trace is at least MIN_INFLATION_PCT slower,
the host's own time (positive gaps and call durations; not the waits) is scaled by one factor k,
the largest k in (0, 1] whose replayed median step is at most the unprofiled one (on a grid of
SCALE_TOLERANCE steps: at most that below it; found by the ITP method, as the median is
non-decreasing in k); when the GPU's work alone is longer, the k that brings the replay within
CALIBRATION_FLOOR of its all-GPU floor.

**Per-event cost** (a trace whose step cannot calibrate it: within MIN_INFLATION_PCT of its known
unprofiled step, a job the GPU paces, whose step the profiler's host cost does not reach; or with
no unprofiled step at all; not a trace without `ProfilerStep#`, which has no step to count in, nor
one without operator records, a CUPTI or CUDA-only window, whose per-event cost is smaller). The
profiler costs the host a roughly fixed time per event it records (each operator, runtime call,
annotation), so the host time it added per step is about events per step x that cost, whatever the
step shows; a fix that makes such a job host-bound (faster GEMMs) would otherwise replay the host
at its profiled speed. The cost, in launch calls of the trace (the median duration of the calls
that launch GPU work: a yardstick of the host's speed, as whatif.py's compile costs are), is
PROFILER_EVENT_LAUNCHES; host_scale = 1 - events x cost / host time (per step, medians over the
steps). The unprofiled step is not used as a bound on it: where the GPU paces the step, the step
hardly moves with k (the reason such a trace is not calibrated), so a step 1-2% off (the noise
between steps) would move k by a quarter or more. `Calibration.how` says which correction was made.
"""

from __future__ import annotations

import copy
import math

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace import launches
from gpucheckup.analysis.distinct import median, unique
from gpucheckup.analysis.groups import by_key, pair_ids
from gpucheckup.analysis.one_trace.profiler_overhead import MIN_INFLATION_PCT
from gpucheckup.analysis.one_trace.steps import Steps, find_steps
from gpucheckup.trace.tables import CPU_OP, DRIVER, MEMCPY, PYTHON, RUNTIME, Trace

CALL, SYNC, MARK = 0, 1, 2  # host node kinds
REPRODUCE_TOLERANCE = 0.05  # an unchanged replay must give each step's time within 5%
CALIBRATION_FLOOR = 0.01  # with GPU work above the unprofiled step: within 1% of the replay's all-GPU floor
SCALE_TOLERANCE = 2.0 ** -24  # calibration's grid of host_scale values: the k 24 bisections of [0, 1] find
ITP_K1, ITP_K2, ITP_N0 = 0.2, 2.0, 1  # the ITP method's truncation (k1 (b - a)^k2) and its slack over bisection
NO_DEP = -1e18  # a latency or gap that never binds
# replay() by segments costs about as much per segment and stream as walking this many nodes and ops (~35 us of numpy
# calls against ~0.35 us a node or op walked; on the fixtures, 23 segments: input_bound's 5.3k nodes and ops replay in
# 0.9 ms by segments against 1.6 ms walked, moe_seed's 1.4k in 0.9 against 0.5; launch_bound_stacks, 3 segments of
# 21.8k: 2 against 8 ms): below it the walk is quicker
SEGMENT_COST_NODES = 100
# The profiler's host cost per recorded event, in launch calls of the trace: (1 - host_scale) x host time per step /
# events per step, over the calibrated H200 traces of docs/validation.md section 7 (full torch.profiler windows, the
# unprofiled step as analysis/run_logs/step_history.py takes it), each against its median launch call: launch_bound
# 5.33 us / 8.57 (0.62), launch call1 2.48 / 5.72 (0.43), call5 5.23 / 8.02 (0.65), launch --compile 6.10 / 7.43
# (0.82), --cuda-graphs 1.89 / 5.33 (0.35), input 6.79 / 8.92 (0.76), moe call2 5.32 / 5.87 (0.91), call6 6.75 /
# 7.65 (0.88) (with the unprofiled step as a median of steps; as their throughput, launch_bound 0.62, moe 0.97 and
# 0.91); the median, 0.70 (1.9-6.8 us per event; docs/validation.md 6c measured 1.9-5.5 us per op for a
# CUDA-only window).
# Left out: the copies example (its host time is mostly pageable copies' own duration, not the profiler's).
PROFILER_EVENT_LAUNCHES = 0.70


class Graph(msgspec.Struct):
    """The dependency graph of one trace (see the module docstring); arrays indexed by node or GPU op."""

    trace: Trace
    steps: Steps  # the measured step windows
    launch_rows: np.ndarray
    t0: float  # the first node's start
    # host chain, in order
    h_row: np.ndarray  # row in trace.host, -1 for markers
    h_kind: np.ndarray  # CALL, SYNC, MARK
    h_gap: np.ndarray  # host time from the frontier to the node's start, us
    h_dur: np.ndarray  # duration (SYNC: its own cost without a wait), us
    h_ret: np.ndarray  # SYNC: end after the last awaited op's end, us
    h_await: list  # SYNC: GPU op indices it waits for
    h_dispatch: np.ndarray  # part of h_gap spent inside operators that launch GPU work, us
    h_waited: np.ndarray  # bool: SYNC nodes that waited on the GPU in the trace
    step_start_node: np.ndarray
    step_end_node: np.ndarray
    loaders: list  # (start node, end node, in-process: bool)
    # GPU ops, row-aligned with trace.gpu
    g_launch: np.ndarray  # launching node, -1 when the trace lacks it
    g_stream: np.ndarray
    g_prev: np.ndarray  # the op before it on its stream, -1
    g_lat: np.ndarray  # earliest start after the launching call's start, us
    g_gap: np.ndarray  # earliest start after the predecessor's end, us
    g_dur: np.ndarray
    g_abs: np.ndarray  # first unlinked op of a stream: its measured start
    g_dep: np.ndarray  # an extra op it must start after (-1: none)
    g_step: np.ndarray  # the step whose host window launched it, -1
    host_scale: float = 1.0
    typical_lat: float = 0.0
    typical_gap: float = 0.0
    notes: list = msgspec.field(default_factory=list)
    order_cache: object = None  # replay's _Order, checked against the arrays
    chain_cache: tuple | None = None  # _chain_arrays' (g_prev, g_launch, chains), checked against the arrays
    memo: dict = msgspec.field(default_factory=dict)  # facts of the (shared) trace, kept by copies

    def copy(self) -> "Graph":
        """An independent copy for a transformation to edit (the trace is shared)."""
        g = copy.copy(self)
        for k in self.__struct_fields__:
            v = getattr(self, k)
            if isinstance(v, np.ndarray):
                setattr(g, k, v.copy())
        g.h_await = list(self.h_await)
        g.loaders = list(self.loaders)
        g.notes = list(self.notes)
        return g


class Replayed(msgspec.Struct):
    """Step windows of one replay, in microseconds."""

    start: np.ndarray
    end: np.ndarray
    host_end: np.ndarray
    gpu_end: np.ndarray
    node_start: np.ndarray
    node_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    @property
    def median_ms(self) -> float:
        return float(median(self.duration)) / 1000.0


def build(trace: Trace, steps: Steps | None = None, launch_rows: np.ndarray | None = None) -> Graph:
    """The dependency graph of a trace's profiled steps."""
    lr = launches.launch_rows(trace) if launch_rows is None else launch_rows
    st = find_steps(trace, lr) if steps is None else steps
    h = _host_chain(trace, st, lr)
    o = _gpu_ops(trace, st, lr, h.node_of_row)
    h_ret, h_await, h_waited = _sync_waits(trace, h, o.g_launch, o.g_launch >= 0)
    m = len(trace.gpu)
    return Graph(trace=trace, steps=st, launch_rows=lr, t0=float(h.start[0]) if len(h.start) else 0.0, h_row=h.row,
                 h_kind=h.kind, h_gap=h.gap, h_dur=h.dur, h_ret=h_ret, h_await=h_await,
                 h_dispatch=_dispatch_in_gaps(trace, lr, h.frontier, h.start), h_waited=h_waited,
                 step_start_node=h.step_start_node, step_end_node=h.step_end_node, loaders=h.loaders,
                 g_launch=o.g_launch, g_stream=trace.gpu.stream.copy(), g_prev=o.g_prev, g_lat=o.g_lat, g_gap=o.g_gap,
                 g_dur=trace.gpu.dur.copy(), g_abs=o.g_abs, g_dep=np.full(m, -1, dtype=np.int64), g_step=o.g_step,
                 typical_lat=o.typical_lat, typical_gap=o.typical_gap)


class _HostChain(msgspec.Struct):
    """The host chain as measured, in node order: each node's start, end, kind and trace row; its gap to the frontier
    and duration; the step and DataLoader markers' nodes; each host row's node (-1: none)."""

    start: np.ndarray
    end: np.ndarray
    frontier: np.ndarray
    kind: np.ndarray
    row: np.ndarray
    gap: np.ndarray
    dur: np.ndarray
    step_start_node: np.ndarray
    step_end_node: np.ndarray
    loaders: list
    node_of_row: np.ndarray


def _host_chain(trace: Trace, st: Steps, lr: np.ndarray) -> _HostChain:
    """The nodes: the runtime and driver calls (sync calls marked), then the step starts and ends and the DataLoader
    starts and ends as zero-length markers, sorted by (start, -end)."""
    host = trace.host
    calls = np.flatnonzero(np.isin(host.cat, (RUNTIME, DRIVER)))
    sync_rows = host_calls.sync_call_rows(trace, lr)
    loader_rows = host_calls.dataloader_rows(trace)
    starts = [host.start[calls], st.host_start if st.marked else st.start[:1],
              st.host_end if st.marked else st.end[:1], host.start[loader_rows], host.end[loader_rows]]
    ends = [host.end[calls], starts[1], starts[2], starts[3], starts[4]]
    kind = np.concatenate([np.where(np.isin(calls, sync_rows), SYNC, CALL), np.full(sum(len(s) for s in starts[1:]),
                                                                                       MARK)]).astype(np.int8)
    row = np.concatenate([calls, np.full(len(kind) - len(calls), -1)])
    tag = np.concatenate([np.zeros(len(calls), int)] + [np.full(len(s), i + 1) for i, s in enumerate(starts[1:])])
    idx = np.concatenate([np.zeros(len(calls), int)] + [np.arange(len(s)) for s in starts[1:]])
    s_all, e_all = np.concatenate(starts), np.concatenate(ends)
    order = np.lexsort((-e_all, s_all))
    s_all, e_all, kind, row, tag, idx = s_all[order], e_all[order], kind[order], row[order], tag[order], idx[order]
    frontier = np.concatenate(([s_all[0]], np.maximum.accumulate(e_all)[:-1])) if len(order) else np.zeros(0)
    node_of = {(int(t), int(i)): j for j, (t, i) in enumerate(zip(tag, idx)) if t > 0}
    node_of_row = np.full(len(host), -1, dtype=np.int64)
    node_of_row[row[row >= 0]] = np.flatnonzero(row >= 0)
    return _HostChain(
        start=s_all, end=e_all, frontier=frontier, kind=kind, row=row, gap=s_all - frontier, dur=e_all - s_all,
        step_start_node=np.array([node_of[(1, i)] for i in range(len(starts[1]))], dtype=np.int64),
        step_end_node=np.array([node_of[(2, i)] for i in range(len(starts[2]))], dtype=np.int64),
        loaders=[(node_of[(3, i)], node_of[(4, i)], "SingleProcess" in trace.names[host.name[r]])
                 for i, r in enumerate(loader_rows)],
        node_of_row=node_of_row)


class _GpuOps(msgspec.Struct):
    """Each GPU op's launching node, stream predecessor, latency and gap held fixed, start when unlinked, step."""

    g_launch: np.ndarray
    g_prev: np.ndarray
    g_lat: np.ndarray
    g_gap: np.ndarray
    g_abs: np.ndarray
    g_step: np.ndarray
    typical_lat: float
    typical_gap: float


def _gpu_ops(trace: Trace, st: Steps, lr: np.ndarray, node_of_row: np.ndarray) -> _GpuOps:
    """GPU ops: launch node, stream predecessor, latency and gap held fixed (queued ops and host-bound ones as the
    module docstring says), and the step whose host window launched each."""
    host, gpu = trace.host, trace.gpu
    m = len(gpu)
    g_launch = np.where(lr >= 0, node_of_row[np.maximum(lr, 0)], -1)
    g_prev = np.full(m, -1, dtype=np.int64)
    for s in unique(gpu.stream):
        ops = np.flatnonzero(gpu.stream == s)
        ops = ops[np.lexsort((gpu.end[ops], gpu.start[ops]))]
        g_prev[ops[1:]] = ops[:-1]
    has_prev = g_prev >= 0
    lat_m = np.where(g_launch >= 0, gpu.start - host.start[np.maximum(lr, 0)], NO_DEP)
    gap_m = np.where(has_prev, gpu.start - gpu.end[np.maximum(g_prev, 0)], NO_DEP)
    linked = g_launch >= 0
    queued = linked & has_prev & (gap_m < lat_m)  # the predecessor still ran when the call was made
    host_bound = linked & ~queued
    typical_lat = float(median(lat_m[host_bound & has_prev])) if (host_bound & has_prev).any() else 0.0
    typical_gap = float(median(np.maximum(gap_m[queued], 0))) if queued.any() else 0.0
    g_step = np.full(m, -1, dtype=np.int64)
    if st.marked:
        t = host.start[np.maximum(lr, 0)]
        i = np.searchsorted(st.host_start, t, side="right") - 1
        ok = linked & (i >= 0) & (t <= st.host_end[np.maximum(i, 0)])
        g_step[ok] = i[ok]
    else:
        g_step[:] = 0
    return _GpuOps(g_launch=g_launch, g_prev=g_prev, g_lat=np.where(queued, np.minimum(lat_m, typical_lat), lat_m),
                   g_gap=np.where(host_bound & has_prev, np.minimum(gap_m, typical_gap), gap_m),
                   g_abs=np.where(~linked & ~has_prev, gpu.start, np.nan), g_step=g_step, typical_lat=typical_lat,
                   typical_gap=typical_gap)


def _sync_waits(trace: Trace, h: _HostChain, g_launch: np.ndarray, linked: np.ndarray) -> tuple:
    """Sync nodes: the ops each waited for (per stream, the last op launched up to the call that ended during it),
    how long after the last of them it returned, and whether it waited; a waiting sync's own cost (h.dur) becomes
    min(duration, return)."""
    gpu = trace.gpu
    n = len(h.kind)
    h_ret = np.zeros(n)
    h_await: list = [np.zeros(0, dtype=np.int64)] * n
    h_waited = np.zeros(n, dtype=bool)
    sync_nodes = np.flatnonzero(h.kind == SYNC)
    if not len(sync_nodes):
        return h_ret, h_await, h_waited
    per_stream = []  # per stream, its ops by start: the last op launched up to the call that started before it ended
    for s in unique(gpu.stream):
        ops = np.flatnonzero(gpu.stream == s)
        ops = ops[np.lexsort((gpu.end[ops], gpu.start[ops]))]
        per_stream.append((ops, gpu.start[ops], np.where(linked[ops], g_launch[ops], -1)))
    for j in sync_nodes:
        a, e = h.start[j], h.end[j]
        last = []
        for ops, start, by in per_stream:
            p = int(np.searchsorted(start, e, side="left")) - 1
            while p >= 0 and by[p] > j:  # launched after the call (by another thread): not awaited
                p -= 1
            if p >= 0:
                last.append(int(ops[p]))
        if not last:
            continue
        cand = np.array(last)
        waited = cand[(gpu.end[cand] > a) & (gpu.end[cand] <= e + 1.0)]
        if len(waited):
            h_await[j] = waited
            h_ret[j] = e - gpu.end[waited].max()
            h.dur[j] = min(h.dur[j], max(h_ret[j], 0.0))
            h_waited[j] = True
    return h_ret, h_await, h_waited


def _dispatch_in_gaps(trace: Trace, lr: np.ndarray, frontier: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each node's gap [frontier, start], the time covered by outermost operators that launch GPU work."""
    host = trace.host
    ops = np.flatnonzero(host.cat == CPU_OP)
    launch_t = {}
    for rows in _by_thread(host, lr[lr >= 0]):
        launch_t[(int(host.pid[rows[0]]), int(host.tid[rows[0]]))] = np.sort(host.start[rows], kind="stable")
    intervals = []  # per thread, in any order: the merge below does not depend on it
    for rows in _by_thread(host, ops):
        k = (int(host.pid[rows[0]]), int(host.tid[rows[0]]))
        rows = rows[np.lexsort((-host.end[rows], host.start[rows]))]
        s, e = host.start[rows], host.end[rows]
        run_end = np.concatenate(([-np.inf], np.maximum.accumulate(e)[:-1]))
        top = s >= run_end  # not inside an earlier operator on this thread
        s, e = s[top], e[top]
        lt = launch_t.get(k, np.zeros(0))
        launches_in = np.searchsorted(lt, e, side="right") - np.searchsorted(lt, s, side="left")
        intervals.append(np.stack([s[launches_in > 0], e[launches_in > 0]], axis=1))
    if not intervals or not sum(len(i) for i in intervals):
        return np.zeros(len(start))
    iv = np.concatenate(intervals)
    iv = iv[np.argsort(iv[:, 0])]
    run_end = np.maximum.accumulate(iv[:, 1])  # merged: a new interval where a start passes every end before it
    new = np.concatenate(([True], iv[1:, 0] > run_end[:-1]))
    last = np.concatenate((np.flatnonzero(new)[1:] - 1, [len(iv) - 1]))
    mv = np.stack([iv[new, 0], run_end[last]], axis=1)
    cum = np.concatenate(([0.0], np.cumsum(mv[:, 1] - mv[:, 0])))

    def covered(t):
        i = np.searchsorted(mv[:, 0], t, side="right") - 1
        inside = np.where(i >= 0, np.minimum(t, mv[np.maximum(i, 0), 1]) - mv[np.maximum(i, 0), 0], 0.0)
        return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0.0)

    return np.maximum(covered(start) - covered(np.minimum(frontier, start)), 0.0)


def _by_thread(host, rows: np.ndarray) -> list[np.ndarray]:
    """The rows of each thread (pid, tid), in increasing order within each (one sort, not a mask per thread)."""
    return [rows[i] for i in by_key(pair_ids(host.pid[rows], host.tid[rows])).values()]


def replay(g: Graph) -> Replayed:
    """Run the graph: every node and op as early as its dependencies allow (see the module docstring)."""
    fast = _replay_by_segments(g)
    if fast is not None:
        return fast
    n, m = len(g.h_kind), len(g.g_dur)
    order = _order(g)
    k = g.host_scale
    gap = np.where(g.h_gap > 0, g.h_gap * k, g.h_gap).tolist()
    dur = np.where(g.h_kind != MARK, g.h_dur * k, 0.0).tolist()
    kind, ret, h_await = g.h_kind.tolist(), g.h_ret.tolist(), g.h_await
    ns, ne = [0.0] * n, [0.0] * n
    nan = float("nan")
    os_, oe = [nan] * m, [nan] * m
    chains, stream_of, after = order.chains, order.stream_of, order.after
    done = [-1]  # the last host node placed: an op launched by a later one waits
    advance = _op_placer(g, chains, done, ns, os_, oe)
    for f in range(len(chains)):
        advance(f)
    frontier = g.t0
    t_prev = -np.inf
    for j in range(n):
        if j:
            s = frontier + gap[j]
            if t_prev > s:
                s = t_prev
        else:
            s = g.t0
        ns[j] = s
        e = s + dur[j]
        if kind[j] == SYNC:
            aw = h_await[j]
            if len(aw):
                aw = aw.tolist()
                for o in aw:
                    x = oe[o]
                    if x != x:
                        done[0] = j
                        advance(stream_of[o])
                e = max(e, max([oe[o] for o in aw]) + ret[j])
        ne[j] = e
        done[0] = j
        streams = after[j]
        if streams:
            for f in streams:
                advance(f)
        if e > frontier:
            frontier = e
        t_prev = s
    done[0] = n
    for _ in range(3):  # extra dependencies across streams may need a second pass
        for f in range(len(chains)):
            advance(f)
    node_start, node_end = np.array(ns), np.array(ne)
    op_start, op_end = np.array(os_, dtype=float), np.array(oe, dtype=float)
    return _windows(g, node_start, node_end, op_start, op_end)


def _op_placer(g: Graph, chains: list, done: list, ns: list, os_: list, oe: list):
    """advance(f): place the ops of stream chain f in order (start os_, end oe) while each one's launching node is
    placed (at or before done[0]) and its extra dependency has ended; the walk of replay() calls it."""
    lat, ggap, gdur, gabs = g.g_lat.tolist(), g.g_gap.tolist(), g.g_dur.tolist(), g.g_abs.tolist()
    ptr = [0] * len(chains)  # per stream: the next op to place

    def advance(f):
        chain, p = chains[f], ptr[f]
        end = len(chain)
        done_node = done[0]
        while p < end:
            o, lo, pv, d = chain[p]
            if lo > done_node:
                break
            if d >= 0:
                s = oe[d]
                if s != s:  # not placed yet
                    break
            s = NO_DEP
            if lo >= 0:
                s = ns[lo] + lat[o]
            if pv >= 0:
                t = oe[pv] + ggap[o]
                if t > s:
                    s = t
            elif lo < 0:
                s = gabs[o]
            if d >= 0:
                t = oe[d]
                if t > s:
                    s = t
            os_[o] = s
            oe[o] = s + gdur[o]
            p += 1
        ptr[f] = p

    return advance


def _replay_by_segments(g: Graph) -> Replayed | None:
    """replay()'s result, computed a segment of the host chain at a time: the nodes up to the next sync call, then
    the GPU ops they launched, then the sync's end. None where only the walk applies: a negative host gap or
    duration (the frontier is then not the previous node's end), an extra dependency between ops, a sync awaiting
    an op that cannot run by then, short segments (SEGMENT_COST_NODES), no node, or a near tie (_place). With every
    gap and duration >= 0 each node starts `gap` after the previous node's end, so the host chain is one running
    sum in the walk's order of additions; an op started by its launch is `lat` after its node's start, and the ops
    queued behind another are done one by one as the walk does them: the same floats as the walk
    (tests/test_replay_segments.py)."""
    n, m = len(g.h_kind), len(g.g_dur)
    if n == 0 or (g.g_dep >= 0).any() or (g.h_gap < 0).any() or (g.h_dur < 0).any() or (g.g_dur < 0).any():
        return None
    chains = _chain_arrays(g)
    ends = np.flatnonzero(g.h_kind == SYNC).tolist()
    if (len(ends) + 1) * len(chains) * SEGMENT_COST_NODES > n + m:  # short segments: the walk is quicker
        return None
    k = g.host_scale
    gap = np.where(g.h_gap > 0, g.h_gap * k, g.h_gap)
    dur = np.where(g.h_kind != MARK, g.h_dur * k, 0.0)
    ns, ne = np.empty(n), np.empty(n)
    os_, oe = np.full(m, np.nan), np.full(m, np.nan)
    placed = [0] * len(chains)  # per chain: ops placed so far
    first = 0
    if not ends or ends[-1] != n - 1:
        ends.append(n - 1)
    for last in ends:
        steps = np.empty(2 * (last - first) + 1)  # the running sum: start, dur, gap, dur, gap, ..., gap
        steps[0] = g.t0 if first == 0 else ne[first - 1] + gap[first]
        steps[1::2] = dur[first:last]
        steps[2::2] = gap[first + 1:last + 1]
        run = np.cumsum(steps)
        ns[first:last + 1] = run[0::2]
        ne[first:last] = run[1::2]
        for c, (ops, lo_max) in enumerate(chains):
            upto = int(np.searchsorted(lo_max, last, side="right"))  # the ops launched by then, in stream order
            if upto > placed[c]:
                if not _place(g, ops[placed[c]:upto], ops[placed[c] - 1] if placed[c] else -1, ns, os_, oe):
                    return None
                placed[c] = upto
        e = ns[last] + dur[last]
        aw = g.h_await[last] if g.h_kind[last] == SYNC else ()
        if len(aw):
            got = oe[aw]
            if np.isnan(got).any():
                return None
            e = max(e, float(got.max()) + g.h_ret[last])
        ne[last] = e
        first = last + 1
    for c, (ops, _) in enumerate(chains):  # ops launched after the last node's start: none here, by construction
        if placed[c] < len(ops) and not _place(g, ops[placed[c]:], ops[placed[c] - 1] if placed[c] else -1, ns,
                                               os_, oe):
            return None
    return _windows(g, ns, ne, os_, oe)


def _place(g: Graph, ops: np.ndarray, before: int, ns: np.ndarray, os_: np.ndarray, oe: np.ndarray) -> bool:
    """Start and end the next ops of one stream (in stream order; `before`: the op placed last on it, -1 none), in the
    walk's floats: False (nothing placed) where an op the running maximum took as started by its launch turns out to
    wait for the op before it (a near tie the scan's roundings misjudged)."""
    lo, gd, gg = g.g_launch[ops], g.g_dur[ops], g.g_gap[ops]
    a = np.where(lo >= 0, ns[np.maximum(lo, 0)] + g.g_lat[ops], np.where(g.g_prev[ops] < 0, g.g_abs[ops], NO_DEP))
    end_before = float(oe[before]) if before >= 0 else -np.inf
    # which ops wait for the one before them: s_p = c_p + max over q <= p of (a_q - c_q), c the running sum of
    # d_(p-1) + gap_p, near the trace's start (a - t0 is exact); good to a few roundings, so only to choose
    w = np.empty(len(ops))
    w[1:] = gd[:-1] + gg[1:]
    w[0] = g.g_dur[before] + gg[0] if before >= 0 else 0.0
    c = np.cumsum(w)
    prev_start = float(os_[before]) if before >= 0 else -np.inf
    s = g.t0 + (c + np.maximum(np.maximum.accumulate((a - g.t0) - c), prev_start - g.t0))
    queued = np.concatenate(([end_before], s[:-1] + gd[:-1])) + gg > a
    s, e = a.copy(), a + gd  # an op started by its launch: exactly the walk's s and s + d
    qi = np.flatnonzero(queued)
    if len(qi):  # the others: each run of them from the end of the op before it, adding as the walk does
        cut = np.flatnonzero(np.diff(qi) != 1) + 1
        first, length = qi[np.concatenate(([0], cut))], np.diff(np.concatenate(([0], cut, [len(qi)])))
        s[qi], e[qi] = _runs_of_adds(np.concatenate(([end_before], e[:-1]))[first], first, length, gg, gd)
        if (s[qi] < a[qi]).any():  # one started by its launch after all: its run's sums do not hold
            return False
    if ((np.concatenate(([end_before], e[:-1])) + gg > a) & ~queued).any():
        return False
    os_[ops], oe[ops] = s, e
    return True


def _runs_of_adds(e0: np.ndarray, first: np.ndarray, length: np.ndarray, gap: np.ndarray,
                  dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of runs of queued ops (run r: ops first[r] .. first[r] + length[r] - 1, after an op that ended
    at e0[r]): s = previous end + gap, end = s + dur, added in that order as the walk adds them. Each row of a matrix
    holds one run, e0, gap, dur, gap, dur, ...; a running sum along the rows is each run's additions in order (runs
    grouped by length within a factor of two, so the padding at most doubles the matrix). Returned in run order."""
    s_out, e_out = np.empty(int(length.sum())), np.empty(int(length.sum()))
    at = np.concatenate(([0], np.cumsum(length)[:-1]))  # each run's place in the output
    band = np.log2(length).astype(np.int64)
    for b in unique(band):
        rows = np.flatnonzero(band == b)
        width = int(length[rows].max())
        k = np.arange(width)
        inside = k[None, :] < length[rows, None]
        op = np.where(inside, first[rows, None] + k[None, :], 0)
        m = np.zeros((len(rows), 2 * width + 1))
        m[:, 0] = e0[rows]
        m[:, 1::2] = np.where(inside, gap[op], 0.0)
        m[:, 2::2] = np.where(inside, dur[op], 0.0)
        run = np.cumsum(m, axis=1)
        out = (at[rows, None] + k[None, :])[inside]
        s_out[out], e_out[out] = run[:, 1::2][inside], run[:, 2::2][inside]
    return s_out, e_out


def _chain_arrays(g: Graph) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stream (g_prev's chains): its ops in stream order and the running maximum of their launching nodes (an op
    runs only after every op before it on its stream was launched); cached on the graph, rebuilt when an edit
    changed g_prev or g_launch."""
    c = g.chain_cache
    if c is not None and np.array_equal(c[0], g.g_prev) and np.array_equal(c[1], g.g_launch):
        return c[2]
    m = len(g.g_prev)
    # per op: its chain's first op (head) and its place in the chain (depth), by list ranking: `up` is the op the
    # walk has reached, `depth` the links to it, `head` that op (its own head once up is -1)
    head, depth, up = np.arange(m), (g.g_prev >= 0).astype(np.int64), g.g_prev.copy()
    head[up >= 0] = up[up >= 0]
    while (more := up >= 0).any():  # pointer jumping: each pass doubles the links followed
        k = up[more]
        depth[more] += depth[k]
        head[more] = head[k]
        up[more] = up[k]
    order = np.lexsort((depth, head))
    cut = np.flatnonzero(np.diff(head[order])) + 1
    chains = [(ops, np.maximum.accumulate(g.g_launch[ops])) for ops in (np.split(order, cut) if m else [])]
    g.chain_cache = (g.g_prev.copy(), g.g_launch.copy(), chains)
    return chains


class _Order(msgspec.Struct):
    """What replay() walks, from the graph's structure alone (g_prev, g_launch, g_dep and the node count)."""

    key: tuple  # copies of the arrays it was built from, and the node count
    chains: list  # per stream (by its first op, in op order): (op, launching node, predecessor, extra dep) in order
    stream_of: list  # per op: its chain
    after: list  # per node: the chains to advance once it ran (in order, no repeat in a row), or None


def _order(g: Graph) -> _Order:
    """The graph's _Order, cached on the graph and rebuilt whenever an edit changed its structure."""
    c = g.order_cache
    if (c is not None and c.key[3] == len(g.h_kind) and np.array_equal(c.key[0], g.g_prev)
            and np.array_equal(c.key[1], g.g_launch) and np.array_equal(c.key[2], g.g_dep)):
        return c
    n, m = len(g.h_kind), len(g.g_dur)
    launch, prev, dep = g.g_launch.tolist(), g.g_prev.tolist(), g.g_dep.tolist()
    nxt = [-1] * m
    for i in range(m):
        if prev[i] >= 0:
            nxt[prev[i]] = i
    chains, stream_of = [], [-1] * m
    for f in range(m):
        if prev[f] >= 0:
            continue
        chain, o = [], f
        while o >= 0:
            chain.append((o, launch[o], prev[o], dep[o]))
            stream_of[o] = len(chains)
            o = nxt[o]
        chains.append(chain)
    waiting_on: dict[int, list[int]] = {}  # op -> streams blocked by an extra dependency on it
    for o in range(m):
        if dep[o] >= 0:
            waiting_on.setdefault(dep[o], []).append(stream_of[o])
    after: list = [None] * n
    for o in range(m):
        j = launch[o]
        if j < 0:
            continue
        seq = after[j]
        if seq is None:
            seq = after[j] = []
        for f in (stream_of[o], *waiting_on[o]) if o in waiting_on else (stream_of[o],):
            if not seq or seq[-1] != f:  # advancing a stream twice in a row: the second finds nothing new
                seq.append(f)
    c = _Order((g.g_prev.copy(), g.g_launch.copy(), g.g_dep.copy(), n), chains, stream_of, after)
    g.order_cache = c
    return c


def _windows(g: Graph, ns, ne, os_, oe) -> Replayed:
    """Step windows from replayed times, by the rule of steps.py."""
    hs, he = ns[g.step_start_node], ns[g.step_end_node]
    count = len(hs)
    ge = np.full(count, np.nan)
    ok = (g.g_step >= 0) & ~np.isnan(oe)
    np.fmax.at(ge, g.g_step[ok], oe[ok])
    if not g.steps.marked and len(oe) and not np.isnan(oe).all():
        ge[0] = np.nanmax(oe)
    end = np.maximum.accumulate(np.fmax(he, ge))
    start = np.concatenate(([hs[0]], end[:-1]))
    if not g.steps.marked and len(os_) and not np.isnan(os_).all():
        start[0] = min(start[0], np.nanmin(os_))
    return Replayed(start, end, he, ge, ns, ne, os_, oe)


class Calibration(msgspec.Struct):
    """The profiler-overhead correction of a graph's host time."""

    host_scale: float
    traced: float | None  # median replayed step at scale 1 (= the trace's); None: not replayed yet (traced_ms)
    unprofiled_ms: float | None
    replayed_ms: float  # median replayed step at host_scale
    applied: bool  # host_scale from the unprofiled step
    how: str = "none"  # "unprofiled step", "per event" (PROFILER_EVENT_LAUNCHES), or "none" (host as traced)
    graph: Graph | None = None  # where `traced` is None: the graph it is replayed from when asked for

    @property
    def traced_ms(self) -> float:
        """The median replayed step at scale 1 (= the trace's); the per-event calibration, which does not need it,
        leaves it to be replayed here when asked for."""
        if self.traced is None:
            g, k = self.graph, self.graph.host_scale
            g.host_scale = 1.0
            try:
                self.traced = replay(g).median_ms
            finally:
                g.host_scale = k
        return self.traced


def calibrate(g: Graph, unprofiled_step_ms: float | None) -> Calibration:
    """Scale the graph's host time so the replay matches the unprofiled step, or by the profiler's per-event cost
    when that step is unknown or the trace is within MIN_INFLATION_PCT of it (see the module docstring)."""
    g.host_scale = 1.0
    per_event = g.steps.marked and not unprofiled_step_ms  # the trace's own replayed step decides nothing then
    k_event = event_scale(g) if per_event else None
    if per_event and k_event < 1.0:
        g.host_scale = k_event
        return Calibration(k_event, None, unprofiled_step_ms, replay(g).median_ms, False, "per event", g)
    traced = replay(g).median_ms
    if not g.steps.marked:  # one window over several steps: not comparable
        return Calibration(1.0, traced, unprofiled_step_ms, traced, False)

    def at(k):
        g.host_scale = k
        return replay(g).median_ms

    if not unprofiled_step_ms or 100 * (traced / unprofiled_step_ms - 1) < MIN_INFLATION_PCT:
        k = k_event if per_event else event_scale(g)
        if k >= 1.0:
            g.host_scale = 1.0
            return Calibration(1.0, traced, unprofiled_step_ms, traced, False)
        return Calibration(k, traced, unprofiled_step_ms, at(k), False, "per event")
    floor = at(0.0)
    target = max(unprofiled_step_ms, floor * (1 + CALIBRATION_FLOOR))
    k, replayed = largest_within(at, target, floor, traced)
    g.host_scale = k
    return Calibration(k, traced, unprofiled_step_ms, replayed, True, "unprofiled step")


def host_per_step(g: Graph) -> tuple[float, float]:
    """(host time the calibration scales, host events recorded) per step, medians over the steps: positive gaps and
    call durations between each step's start and end markers; host rows that start inside its host window, less the
    Python function events of a trace recorded with stacks (PROFILER_EVENT_LAUNCHES was measured without them: at
    its cost per event, a with-stack trace's 3.3k Python events a step cost more than the whole step, and its host
    was calibrated to nothing; their cost shows instead in its slower launch calls, the yardstick)."""
    own = np.where(g.h_gap > 0, g.h_gap, 0.0) + np.where(g.h_kind != MARK, g.h_dur, 0.0)
    cum = np.concatenate(([0.0], np.cumsum(own)))
    time = cum[g.step_end_node + 1] - cum[g.step_start_node]
    host = g.trace.host
    starts = np.sort(host.start[host.cat != PYTHON], kind="stable")  # nearly in order already: timsort runs through it
    events = np.searchsorted(starts, g.steps.host_end, side="left") - np.searchsorted(starts, g.steps.host_start,
                                                                                      side="left")
    return float(median(time)), float(median(events))


def event_scale(g: Graph) -> float:
    """1 - the profiler's host cost per step (events x PROFILER_EVENT_LAUNCHES launch calls) / host time per step,
    in [0, 1]; 1 when the trace has no launch call to measure the cost by, or records no operators (a CUPTI or
    CUDA-only window: the cost was measured on full torch.profiler windows, whose operator records are most of it)."""
    if not (g.trace.host.cat == CPU_OP).any():
        return 1.0
    time, events = host_per_step(g)
    launch = typical_launch_us(g)
    if not launch > 0 or not time > 0:
        return 1.0
    return min(max(1.0 - events * PROFILER_EVENT_LAUNCHES * launch / time, 0.0), 1.0)


def launch_nodes(g: Graph) -> np.ndarray:
    """Nodes that launch at least one GPU op."""
    return unique(g.g_launch[g.g_launch >= 0])


def typical_launch_us(g: Graph) -> float:
    """Median duration of the calls that launch GPU work (the cost of one launch); 0 when there are none."""
    nodes = launch_nodes(g)
    nodes = nodes[g.h_kind[nodes] == CALL]
    return float(median(g.h_dur[nodes])) if len(nodes) else 0.0


def largest_within(f, target: float, f0: float, f1: float) -> tuple[float, float]:
    """The largest k in [0, 1) on the grid of SCALE_TOLERANCE steps with f(k) <= target, and f(k), for f
    non-decreasing with f(0) = f0 <= target and f(1) = f1 > target (k = 1 when f1 <= target): the k a bisection
    of [0, 1] down to SCALE_TOLERANCE finds, at most SCALE_TOLERANCE below the true one. Found by the ITP method
    (Oliveira and Takahashi, ACM TOMS 2020) on f - target with its points rounded to the grid: a regula falsi
    point, truncated and projected toward the bracket's midpoint, so about bisection's evaluations at most
    (ITP_N0 more) and far fewer where f is locally linear."""
    if f1 <= target:
        return 1.0, f1
    n = round(1 / SCALE_TOLERANCE)  # grid steps in [0, 1]
    a, b, fa, ya, yb = 0, n, f0, f0 - target, f1 - target  # a, b: grid indices, f(a) <= target < f(b)
    n_max = math.ceil(math.log2(n)) + ITP_N0
    j, probed = 0, False
    while b - a > 1:
        half = (a + b) / 2
        r = 2.0 ** (n_max - j - 1) - (b - a) / 2  # how far from the midpoint the point may go, in grid steps
        if ya == 0:  # f(a) is the target: f is flat there (in the float quantum, at least), the point sought is
            # the top of the flat part: one step above a (the bracket is done if f rises there), else bisection
            x = a + 1 if not probed and abs(a + 1 - half) <= r else half
            probed = True
        else:
            delta = ITP_K1 * n * ((b - a) / n) ** ITP_K2
            xf = (yb * a - ya * b) / (yb - ya)
            sigma = 1.0 if half > xf else -1.0 if half < xf else 0.0
            xt = xf + sigma * delta if delta <= abs(half - xf) else half
            x = xt if abs(xt - half) <= r else half - sigma * r
        i = min(max(round(x), a + 1), b - 1)
        fx = f(i / n)
        if fx <= target:
            a, fa, ya = i, fx, fx - target
        else:
            b, yb = i, fx - target
        j += 1
    return a / n, fa


def copy_rows(g: Graph, direction: str) -> np.ndarray:
    """GPU op rows of pageable copies in one direction ("HtoD" or "DtoH")."""
    trace = g.trace
    ids = trace.name_ids(lambda s: "Pageable" in s and direction in s)
    return np.flatnonzero((trace.gpu.kind == MEMCPY) & np.isin(trace.gpu.name, ids))
