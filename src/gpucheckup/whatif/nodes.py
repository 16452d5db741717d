"""Which nodes of the replay graph (replay.py) are what, as the edits ask it: inside the optimizer's own span, run by
autograd's thread (the backward), after the step's last backward, inside which outermost operator, in which step; the
kernel category of each GPU op's name; and `Edit`, what every graph edit returns. Facts of the shared trace are
computed once and kept in the graph's memo (`remembered`), which the copies an edit makes share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.intervals import inside_any
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, categorize
from gpucheckup.analysis.one_trace.host.optimizer_spans import optimizer_rows
from gpucheckup.trace.tables import CPU_OP, MEMCPY
from gpucheckup.whatif.replay import CALL, SYNC, Graph


AUTOGRAD_THREAD_OP = "autograd::engine::evaluate_function"  # operators run by the backward's thread


@dataclass
class Edit:
    """A transformation's result: the edited graph, what it did, how many things it changed."""

    graph: Graph
    what: str
    changed: int
    per_batch_factor: float = 1.0  # larger_batch: the step now carries this many original batches
    unmodelled: str = ""  # a cost of the change the edit does not model: its saving is an upper bound, and why


def drop_reads(g: Graph, nodes: list[int]) -> list[int]:
    """Reads of GPU values gone from the host's chain (made every N steps, or never): each sync node of `nodes`, in
    order, waits for nothing, its operator's dispatch, its call and the copies it launched cost nothing, nor do the
    calls right after it that wait on nothing (the stream sync after its copy). Edits g; per node, the first node
    after those trailing calls."""
    after = []
    for j in nodes:
        g.h_kind[j] = CALL
        g.h_await[j] = np.zeros(0, dtype=np.int64)
        if g.h_gap[j] > 0:
            g.h_gap[j] -= min(g.h_dispatch[j], g.h_gap[j])
        g.h_dur[j] = 0.0
        k = j + 1
        while k < len(g.h_gap) and g.h_kind[k] == SYNC and not len(g.h_await[k]):
            g.h_dur[k] = 0.0
            k += 1
        after.append(k)
    dropped = np.zeros(len(g.h_kind) + 1, dtype=bool)  # looked up by launching node (-1: the last, never set)
    dropped[nodes] = True
    g.g_dur[dropped[g.g_launch] & (g.trace.gpu.kind == MEMCPY)] = 0.0
    return after


def has_operators(g: Graph) -> bool:
    """Whether the trace records CPU operators (a light window does not: launch calls and ranges only)."""
    if "has_operators" not in g.memo:
        g.memo["has_operators"] = bool((g.trace.host.cat == CPU_OP).any())
    return g.memo["has_operators"]


def in_optimizer(g: Graph, zero_grad: bool = False) -> np.ndarray:
    """Per node: whether its host row starts inside the optimizer's own span on its thread
    (analysis/one_trace/host/optimizer_spans.py: not the closure's forward and backward), or in an
    `Optimizer.zero_grad#` range when `zero_grad`."""
    return starts_inside(g, *optimizer_rows(g.trace, zero_grad))


def starts_inside(g: Graph, lo: np.ndarray, hi: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per node: whether its host row starts inside one of the intervals [lo, hi] on its thread."""
    host = g.trace.host
    rows = g.h_row[g.h_row >= 0]
    out = np.zeros(len(g.h_kind), dtype=bool)
    out[g.h_row >= 0] = inside_any(host.start[rows], host.tid[rows], lo, hi, tid)
    return out


def remembered(g: Graph, name: str, arrays: tuple, compute):
    """compute() once for the graphs whose `arrays` (what it reads) are equal: every fix's edit starts from a copy of
    the same calibrated graph, whose memo the copies share (torch_compile and cuda_graphs fuse the same kernels)."""
    got = g.memo.get(name)
    if got is not None and all(np.array_equal(a, b) for a, b in zip(got[0], arrays)):
        return got[1]
    value = compute()
    g.memo[name] = (tuple(a.copy() for a in arrays), value)
    return value


def outermost_op(g: Graph, r: int) -> int:
    """The host row of the outermost CPU operator that encloses host row r on its thread, -1 when none does."""
    return int(outermost_ops(g, np.asarray([r]))[0])


def outermost_ops(g: Graph, rows: np.ndarray) -> np.ndarray:
    """Per host row: the row of the outermost CPU operator enclosing it on its thread (process and thread), -1
    where none does. The operators no other encloses are found once per trace, per thread."""
    host = g.trace.host
    if "top_ops" not in g.memo:
        g.memo["top_ops"] = _top_ops(g)
    out = np.full(len(rows), -1, dtype=np.int64)
    want = host.pid[rows].astype(np.int64) * (1 << 32) + host.tid[rows].astype(np.int64)
    for key, (start, end, op) in g.memo["top_ops"].items():
        mine = np.flatnonzero(want == key)
        i = np.searchsorted(start, host.start[rows[mine]], side="right") - 1
        ok = (i >= 0) & (end[np.maximum(i, 0)] >= host.end[rows[mine]])
        out[mine[ok]] = op[i[ok]]
    return out


def _top_ops(g: Graph) -> dict:
    """Per thread (pid << 32 | tid): its outermost CPU operators (start, end, host row), by start."""
    host = g.trace.host
    ops = np.flatnonzero(host.cat == CPU_OP)
    key = host.pid[ops].astype(np.int64) * (1 << 32) + host.tid[ops].astype(np.int64)
    out = {}
    for k in unique(key).tolist():
        mine = ops[key == k]
        mine = mine[np.lexsort((-host.end[mine], host.start[mine]))]  # by start, the longer first
        end = host.end[mine]
        reach = np.maximum.accumulate(end)
        top = np.concatenate(([True], host.start[mine[1:]] >= reach[:-1]))  # not inside one before it
        out[k] = (host.start[mine[top]], end[top], mine[top])
    return out


def enclosing_ops(g: Graph, j: int) -> set[str]:
    """Names of the CPU operators that enclose node j's call on its thread."""
    host = g.trace.host
    r = g.h_row[j]
    if r < 0:
        return set()
    m = ((host.cat == CPU_OP) & (host.tid == host.tid[r]) & (host.pid == host.pid[r])
         & (host.start <= host.start[r]) & (host.end >= host.end[r]))
    return {g.trace.names[int(i)] for i in unique(host.name[m])}


def step_of(g: Graph, nodes: np.ndarray) -> np.ndarray:
    """Per node: the index of the step window (step start to end node) holding it, -1 for none."""
    i = np.searchsorted(g.step_start_node, nodes, side="right") - 1
    return np.where((i >= 0) & (nodes <= g.step_end_node[np.maximum(i, 0)]), i, -1)


def after_backward(g: Graph) -> np.ndarray:
    """Per node (markers excepted): whether it comes after its step's last node on autograd's thread."""
    backward = np.flatnonzero(autograd_thread(g))
    step = step_of(g, backward)
    last_bw = np.full(len(g.step_start_node), -1)
    np.maximum.at(last_bw, step[step >= 0], backward[step >= 0])
    nodes = np.arange(len(g.h_kind))
    mine = step_of(g, nodes)
    after = (mine >= 0) & (last_bw[np.maximum(mine, 0)] >= 0) & (nodes > last_bw[np.maximum(mine, 0)])
    return after & (g.h_row >= 0)


def autograd_thread(g: Graph) -> np.ndarray:
    """Per node: whether autograd's thread runs it (the thread that runs AUTOGRAD_THREAD_OP: the backward)."""
    host = g.trace.host
    if "autograd_tids" not in g.memo:
        ids = g.trace.name_ids(lambda n: n.startswith(AUTOGRAD_THREAD_OP))
        g.memo["autograd_tids"] = set(unique(host.tid[(host.cat == CPU_OP) & np.isin(host.name, ids)]).tolist())
    tid = np.where(g.h_row >= 0, host.tid[np.maximum(g.h_row, 0)], -1)
    return np.isin(tid, np.fromiter(g.memo["autograd_tids"], dtype=np.int64)) & (g.h_row >= 0)


def categories(g: Graph) -> np.ndarray:
    """Per name of the trace's GPU ops: its kernel category's index in kernels.CATEGORIES (kernels.categorize;
    -1 for the names of host events), once per trace."""
    if "categories" not in g.memo:
        names, used = g.trace.names, unique(g.trace.gpu.name)
        cat = np.full(len(names), -1, dtype=np.int8)
        cat[used] = [CATEGORIES.index(categorize(names[i])) for i in used.tolist()]
        g.memo["categories"] = cat
    return g.memo["categories"]
