"""What each fix would save: the fix applied as an edit of the replay graph (replay.py), replayed.

Definitions (also in docs/metrics.md, "What-if"):
- predicted step = median replayed step with the edit; before = median replayed step unchanged
  (both with replay.calibrate's correction of the profiler's host cost: on the unprofiled step
  when it is known and can calibrate, else by the profiler's per-event cost).
- saving = before - predicted step (ms per step; for `larger_batch`, per original batch).
Each transformation is keyed in TRANSFORMS and states its mechanism in its docstring; what it
does not change is held as measured. The fix catalogue (diagnosis/fixes.py) names, per fix, the
transformation and parameters that predict it; diagnosis/savings.py runs them for a report. A
transformation that finds nothing to change (no syncs, no collectives, ...) predicts no change
and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import numpy as np

from gpucheckup.analysis.distinct import median, unique
from gpucheckup.analysis.flops.gemm_dtype import GEMM_CATEGORIES, kernel_dtype
from gpucheckup.analysis.flops.shape_flops import first_float_dtype
from gpucheckup.analysis.groups import by_key
from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace import launches
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES
from gpucheckup.analysis.one_trace.host.optimizer_spans import optimizer_rows
from gpucheckup.hardware import peaks
from gpucheckup.hardware.peaks import PINNED_GB_S  # when the trace has no pinned copy to measure
from gpucheckup.trace.tables import CPU_OP, KERNEL, MEMCPY, Trace
from gpucheckup.whatif import replay
from gpucheckup.whatif.replay import CALL, MARK, NO_DEP, SYNC, Graph
from gpucheckup.whatif.compiled import cuda_graphs, torch_compile
from gpucheckup.whatif.optimizer_passes import fused_work, optimizer_class
from gpucheckup.whatif.nodes import (Edit, after_backward, autograd_thread, categories, drop_reads, enclosing_ops,
                                     has_operators, in_optimizer, outermost_op, outermost_ops, starts_inside, step_of)

MIN_PINNED_BYTES = 1 << 20  # pinned copies at least this big measure the link's rate
DEFAULT_WORKERS = 4  # DataLoader workers the fix adds to an in-process loader
WORKER_FACTOR = 2.0  # how many times the workers a multi-process loader gets
BATCH_FACTOR = 2.0  # larger_batch: the batch grows by this factor
SCALAR_READS = frozenset({"aten::item", "aten::_local_scalar_dense"})  # a read of one value: no host work on arrays
# What a scalar read after the backward computes just for itself (`_read_producers`): reductions to a few values and
# finiteness checks
READ_PRODUCERS = frozenset({"aten::norm", "aten::linalg_vector_norm", "aten::sum", "aten::mean", "aten::amax",
                            "aten::amin", "aten::max", "aten::min", "aten::any", "aten::all", "aten::isnan",
                            "aten::isinf", "aten::isfinite", "aten::logical_or", "aten::logical_and"})
LOW_PRECISION = "tf32"  # the format the fp32 GEMMs move to (tf32 needs no model change)


@dataclass
class Prediction:
    """One fix's predicted effect on the median step."""

    fix: str
    step_ms_before: float
    step_ms_after: float
    transform: str  # what the edit did, in one sentence
    changed: int = 0  # graph nodes or GPU ops the edit changed (0: not applicable)
    unmodelled: str = ""  # the edit's Edit.unmodelled: a cost it leaves out, so the saving is an upper bound

    @property
    def saving_ms(self) -> float:
        return self.step_ms_before - self.step_ms_after

    @property
    def saving_pct(self) -> float:
        return 100 * self.saving_ms / self.step_ms_before if self.step_ms_before > 0 else 0.0

    def to_dict(self) -> dict:
        return {"fix": self.fix, "step_ms_before": self.step_ms_before, "step_ms_after": self.step_ms_after,
                "saving_ms": self.saving_ms, "saving_pct": self.saving_pct, "transform": self.transform,
                "changed": self.changed}


def remove_syncs(g: Graph, ops: frozenset | None = None, reads: bool = False) -> Edit:
    """The host stops waiting for the GPU at its sync calls (sync APIs, reads of GPU values into
    pageable memory): each keeps only its own cost; the copies stay on the GPU. Input copies to
    the GPU are pin_memory's. With `ops`, only the syncs made inside one of those operators (on
    the calling thread: e.g. aten::item) are edited; with `reads` also those that wait for a copy
    to the host (`.cpu()`, `.to("cpu")`). Those reads happen every N steps instead of every step
    (or not at all: a static bound instead of a size read), so the read itself goes too: its
    operator's dispatch, its calls (the copy call, the stream sync after it) and the copy it
    launched. A copy read brings arrays the host then computes on (metrics in numpy): that work,
    the host time after the read up to the next operator that launches GPU work, goes with it. A scalar read
    after the step's backward of a value computed just for it (`_read_producers`: a gradient-norm or NaN check)
    takes that computation with it. The other syncs still wait."""
    g = g.copy()
    names = g.trace.names
    host, gpu = g.trace.host, g.trace.gpu
    h2d_nodes = set(g.g_launch[replay.copy_rows(g, "HtoD")].tolist())
    nodes = [j for j in np.flatnonzero(g.h_kind == SYNC)
             if j not in h2d_nodes and (names[host.name[g.h_row[j]]] in host_calls.SYNC_CALLS
                                        or g.h_waited[j])]
    to_host = set(np.flatnonzero((gpu.kind == MEMCPY) & np.isin(gpu.name, g.trace.name_ids(lambda n: "DtoH" in n)))
                  .tolist())
    copy_read = {j for j in nodes if any(int(o) in to_host for o in g.h_await[j])
                 and not enclosing_ops(g, j) & SCALAR_READS}
    if ops is not None:
        nodes = [j for j in nodes if enclosing_ops(g, j) & ops or (reads and j in copy_read)]
    trailing: list[int] = []  # the calls after a read that go with it (the stream sync after its copy)
    if ops is None:
        for j in nodes:
            g.h_kind[j] = CALL
            g.h_await[j] = np.zeros(0, dtype=np.int64)
    else:  # the reads themselves go (made every N steps, or not at all with a static bound)
        for j, k in zip(nodes, drop_reads(g, nodes)):
            trailing += range(j + 1, k)
            if reads and j in copy_read and k < len(g.h_gap) and g.h_gap[k] > 0:  # the host's work on the arrays
                g.h_gap[k] = min(g.h_gap[k], g.h_dispatch[k])
    producers = _read_producers(g, [j for j in nodes if enclosing_ops(g, j) & SCALAR_READS]) if ops else []
    gone = set(nodes) | set(trailing) | set(producers)
    for k in producers:  # with the read gone before it too, the Python between them (the loop calling both) goes
        if g.h_gap[k] > 0:
            g.h_gap[k] -= g.h_gap[k] if k - 1 in gone else min(g.h_dispatch[k], g.h_gap[k])
        g.h_dur[k] = 0.0
    g.g_dur[np.isin(g.g_launch, producers)] = 0.0
    which = f" inside {', '.join(sorted(ops))}" if ops is not None else ""
    which += " or reading copies to the host" if ops is not None and reads else ""
    also = f"; {len(producers)} launches computing only what was read go with it" if len(producers) else ""
    return Edit(g, f"{len(nodes)} sync calls{which} no longer wait for the GPU{also}", len(nodes))


def _read_producers(g: Graph, reads: list[int]) -> list[int]:
    """The nodes of the operators that compute only what a scalar read takes, for the reads in `reads` made after
    their step's backward: the operator that launched last before the read on its thread, when it is one of
    READ_PRODUCERS (a reduction to a few values or a finiteness check). After the backward nothing of the step
    differentiates it, and a value read right after it is computed is computed for the read (a per-parameter
    gradient norm checked on the host, Trainer's NaN filter); read every N steps, it is computed every N steps. A
    read before the backward (the loss, a forward statistic) keeps what it reads: the backward may need it."""
    host = g.trace.host
    after = after_backward(g)
    launching = np.zeros(len(g.h_kind), dtype=bool)
    launching[replay.launch_nodes(g)] = True
    ops: set[int] = set()
    for j in reads:
        if not after[j]:
            continue
        tid, read = host.tid[g.h_row[j]], outermost_op(g, g.h_row[j])
        k = j - 1
        while k >= 0 and (g.h_row[k] < 0 or host.tid[g.h_row[k]] != tid or not launching[k]
                          or (read >= 0 and host.start[g.h_row[k]] >= host.start[read])):
            if g.h_kind[k] == MARK or not after[k]:
                break
            k -= 1
        if k < 0 or g.h_kind[k] == MARK or not after[k] or not launching[k]:
            continue
        op = outermost_op(g, g.h_row[k])
        if op >= 0 and g.trace.names[host.name[op]] in READ_PRODUCERS:
            ops.add(op)
    rows = np.fromiter(sorted(ops), dtype=np.int64, count=len(ops))
    inside = starts_inside(g, host.start[rows].astype(np.float64), host.end[rows].astype(np.float64), host.tid[rows])
    return np.flatnonzero(inside).tolist()


# static_shapes: operators whose work is set by their index tensor (the rows they gather or scatter), not by the
# size of the buffer they index: a padded buffer does not make them do more
INDEXED_WORK = frozenset({"aten::index", "aten::index_put_", "aten::_index_put_impl_", "aten::index_select",
                          "aten::gather", "aten::scatter", "aten::scatter_", "aten::scatter_add_", "aten::index_add_",
                          "aten::take", "aten::masked_select", "aten::masked_scatter_"})
MAX_VARYING_SHARE = 0.5  # more than this share of the step's operators changing shape is a changing input (e.g.
# sequence length), not sizes read from the data
BOUND_FACTOR = 1.0  # static_shapes' default bound: the largest data-set size the window saw (drops nothing it saw)


@dataclass
class _DataSized:
    """Operators whose size along one dimension is set by data, and that size (per operator row)."""

    rows: np.ndarray  # host rows of the operators
    size: np.ndarray  # the data-set dimension's value for each
    seen: np.ndarray  # the largest value seen at each one's position across the window's steps
    how: str  # which signature found them


def static_shapes(g: Graph, ops: frozenset | None = None, reads: bool = False, bound: float | None = None,
                  bound_factor: float = BOUND_FACTOR) -> Edit:
    """A static bound instead of sizes read from the data (e.g. a fixed expert capacity instead of
    int(counts.max())): the data-dependent syncs (those made inside `ops`) go as in remove_syncs, and
    the work whose size the data set is padded to the bound. Which operators the data sized (needs
    record_shapes and marked steps; only operators that start after their step's first data-dependent
    read): those at the same position in every step (steps that ran the same operators in the same
    order) whose input shapes change from step to step while most keep theirs (at most
    MAX_VARYING_SHARE of the positions change), sized by the largest of their changing dimensions; else, where the sizes do not vary (the same data every
    step), the size the host read: the first integer of a size list the host passes after the read
    that no operator of the step had before it and that is a dimension of an operator's inputs after
    it; the operators with it in their first input's shape are sized by it. Operators in INDEXED_WORK
    are left: their work is their index count. The bound B is `bound`, else `bound_factor` x the
    largest size seen at that position in the window; each kernel those operators launch (by External
    id) keeps the trace's per-kernel fixed cost (its shortest kernel) and scales the rest by B / size
    (GEMM and elementwise work is linear in the rows). Without shapes, or without `ops`, the edit is
    the sync removal alone, and says so."""
    base = remove_syncs(g, ops, reads)
    e = base.graph
    read_nodes = np.flatnonzero((g.h_kind == SYNC) & (e.h_kind == CALL))
    shapes = bool(len(g.trace.host.shapes)) and bool(g.trace.host.shapes.present().any())
    sized = _data_sized(g, read_nodes) if ops is not None and shapes else None
    if sized is None:
        why = ("no recorded shapes" if not shapes else "no data-dependent operators named"
               if ops is None else "no data-dependent reads" if not len(read_nodes)
               else "no shapes set by the data-dependent reads")
        return Edit(e, f"{base.what}; {why}: nothing padded (the sync removal alone)", base.changed)
    gpu = g.trace.gpu
    kernels = np.flatnonzero(gpu.kind == KERNEL)
    op = launches.op_rows(g.trace, kernels)
    at = np.searchsorted(sized.rows, op)
    hit = (op >= 0) & (sized.rows[np.minimum(at, len(sized.rows) - 1)] == op)
    kernels, at = kernels[hit], at[hit]
    if not len(kernels):
        return Edit(e, f"{base.what}; {sized.how}, but they launch no kernel: nothing padded", base.changed)
    b = np.full(len(at), float(bound)) if bound else bound_factor * sized.seen[at]
    factor = b / sized.size[at]
    floor = _kernel_floor_us(g)
    d = e.g_dur[kernels]
    e.g_dur[kernels] = np.where(d > floor, floor + (d - floor) * factor, d)
    bound_s = f"{bound:g}" if bound else f"{bound_factor:g} x the largest seen ({int(sized.seen.max())})"
    return Edit(e, f"{base.what}; {len(kernels)} kernels of {len(unique(op[hit]))} operators sized by data "
                   f"({sized.how}) padded to the static bound {bound_s}: time x{factor.min():.3f} to "
                   f"x{factor.max():.3f} (median x{median(factor):.3f}), "
                   f"{d.sum() / 1000:.2f} -> {e.g_dur[kernels].sum() / 1000:.2f} ms over the trace",
                base.changed + len(kernels))


def _op_table(g: Graph) -> tuple[np.ndarray, list, np.ndarray]:
    """Operators with recorded input shapes inside a marked step, by start: rows, decoded input shapes (a list
    per input), step index."""
    host = g.trace.host
    if not g.steps.marked or not len(host.shapes):
        return np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=np.int64)
    rows = np.flatnonzero((host.cat == CPU_OP) & host.shapes.present())
    step = _host_step(g, host.start[rows])
    rows, step = rows[step >= 0], step[step >= 0]
    o = np.argsort(host.start[rows], kind="stable")
    rows, step = rows[o], step[o]
    memo: dict = {}
    shapes = [memo[r] if r in memo else memo.setdefault(r, _decoded(r) or []) for r in host.shapes.take(rows)]
    return rows, shapes, step


def _host_step(g: Graph, t: np.ndarray) -> np.ndarray:
    """The step whose host window (its ProfilerStep# range) holds each time, or -1."""
    i = np.searchsorted(g.steps.host_start, t, side="right") - 1
    return np.where((i >= 0) & (t <= g.steps.host_end[np.maximum(i, 0)]), i, -1)


def _decoded(raw: bytes | str | None):
    """A JSON value decoded, or None."""
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _flat(shapes: list) -> tuple[int, ...]:
    """Every dimension of an operator's input shapes, in order."""
    return tuple(d for s in shapes if isinstance(s, list) for d in s if isinstance(d, int))


def _passed_sizes(raw: bytes | None) -> tuple[list[int], list[int]]:
    """From an operator's Concrete Inputs: the integers of the size lists the host passed, and its integer scalars."""
    lists, scalars = [], []
    for x in _decoded(raw) or []:
        if not isinstance(x, str):
            continue
        if x.startswith("["):
            v = _decoded(x)
            lists += [d for d in (v if isinstance(v, list) else []) if isinstance(d, int)]
        elif x.lstrip("-").isdigit():
            scalars.append(int(x))
    return lists, scalars


def _data_sized(g: Graph, read_nodes: np.ndarray) -> _DataSized | None:
    """The operators whose size the data set (see static_shapes), or None when none are found: only operators
    that start after their step's first data-dependent read (before it, nothing read can have sized them)."""
    rows, shapes, step = _op_table(g)
    r = g.h_row[read_nodes]
    r = r[r >= 0]
    at = _host_step(g, g.trace.host.start[r])
    first_read = np.full(g.steps.count, np.inf)
    np.minimum.at(first_read, at[at >= 0], g.trace.host.start[r][at >= 0])
    if not len(rows) or not np.isfinite(first_read).any():
        return None
    return _varying(g, rows, shapes, step, first_read) or _read_size(g, rows, shapes, step, first_read)


def _sized(rows: list, size: list, seen: list, how: str) -> _DataSized:
    """A _DataSized sorted by row."""
    o = np.argsort(rows, kind="stable")
    return _DataSized(np.asarray(rows, dtype=np.int64)[o], np.asarray(size, dtype=float)[o],
                      np.asarray(seen, dtype=float)[o], how)


def _varying(g: Graph, rows: np.ndarray, shapes: list, step: np.ndarray,
             first_read: np.ndarray) -> _DataSized | None:
    """Signature 1: operators at the same position in every step whose input shapes change from step to step,
    while at most MAX_VARYING_SHARE of the positions do. Steps are compared when they ran the same operators in
    the same order (the most common sequence; a first step with extra operators is left out), at least two."""
    host, names = g.trace.host, g.trace.names
    key = list(zip(host.pid[rows].tolist(), host.tid[rows].tolist(), host.name[rows].tolist()))
    per_step = {s: np.flatnonzero(step == s) for s in unique(step).tolist()}
    seqs = {s: tuple(key[i] for i in idx) for s, idx in per_step.items()}
    common = max(set(seqs.values()), key=list(seqs.values()).count) if seqs else ()
    same = [per_step[s] for s in sorted(seqs) if seqs[s] == common]
    if len(same) < 2:
        return None
    out_rows, out_size, out_seen = [], [], []
    varying = 0
    start = g.trace.host.start[rows]
    for pos in range(len(common)):
        at = [idx[pos] for idx in same]
        if any(start[i] < first_read[step[i]] for i in at):
            continue
        flat = [_flat(shapes[i]) for i in at]
        if len(set(flat)) == 1 or len({len(f) for f in flat}) != 1:
            continue
        varying += 1
        if names[common[pos][2]] in INDEXED_WORK:
            continue
        moving = [j for j in range(len(flat[0])) if len({f[j] for f in flat}) > 1]
        size = [max(f[j] for j in moving) for f in flat]
        if min(size) <= 0:
            continue
        out_rows += [int(rows[i]) for i in at]
        out_size += size
        out_seen += [max(size)] * len(size)
    if not varying or varying > MAX_VARYING_SHARE * len(common) or not out_rows:
        return None
    return _sized(out_rows, out_size, out_seen, f"{varying} of {len(common)} operator positions change shape "
                                                f"across {len(same)} steps")


def _read_size(g: Graph, rows: np.ndarray, shapes: list, step: np.ndarray,
               first_read: np.ndarray) -> _DataSized | None:
    """Signature 2, sizes the same in every step: per step, the value the host read is the first integer of a
    size list passed (Concrete Inputs) after the step's first data-dependent read that no operator of the step had
    before it (as a dimension, a size or a scalar) and that is a dimension of an operator's inputs after it; the
    operators with it in their first input's shape are sized by it."""
    host, names = g.trace.host, g.trace.names
    concrete = host.concrete.take(rows) if len(host.concrete) else [None] * len(rows)
    start = host.start[rows]
    out_rows, out_size, values = [], [], []
    for s in np.flatnonzero(np.isfinite(first_read)).tolist():
        idx = np.flatnonzero(step == s)
        pre, post = idx[start[idx] < first_read[s]], idx[start[idx] >= first_read[s]]
        before = set()
        for i in pre:
            lists, scalars = _passed_sizes(concrete[i])
            before.update(_flat(shapes[i]), lists, scalars)
        later = set()
        for i in post:
            later.update(_flat(shapes[i]))
        value = next((v for i in post for v in _passed_sizes(concrete[i])[0]
                      if v > 1 and v not in before and v in later), None)
        if value is None:
            continue
        values.append(value)
        for i in post:
            first = shapes[i][0] if shapes[i] and isinstance(shapes[i][0], list) else []
            if value in first and names[host.name[rows[i]]] not in INDEXED_WORK:
                out_rows.append(int(rows[i]))
                out_size.append(value)
    if not out_rows:
        return None
    return _sized(out_rows, out_size, [max(values)] * len(out_rows),
                  f"the size the host read, {'/'.join(str(v) for v in sorted(set(values)))}, in {len(values)} "
                  "steps")


def fused_optimizer(g: Graph) -> Edit:
    """One fused kernel per parameter group (taken as one group: the trace does not say how many)
    instead of a launch per tensor (foreach=False: several kernels per parameter) or per tensor
    list (foreach): inside `Optimizer.step` the host's time (the Python loop over parameters,
    operator dispatch, each launch, the per-parameter step counters on the CPU) goes but one
    launch. On the GPU the region's kernels become one kernel: each kernel's time is a fixed cost
    (launch ramp and tail, the trace's shortest kernel bounds it) plus its work; the fused kernel
    pays the fixed cost once and keeps the work of its passes over memory: a for-each update's kernels make
    several passes over the parameters where the fused one reads and writes each tensor once
    (whatif/optimizer_passes.py); where the passes cannot be read it keeps all the work. The operators the
    optimizer's span runs before its first launch go too (`_operators_before`): they run on CPU tensors (the
    foreach and for-loop forms' per-parameter step counters and their reads), which the fused form keeps on the
    GPU and updates inside its kernels; its Python (collecting the parameters, grouping them) stays."""
    g = g.copy()
    inside = in_optimizer(g) & (g.h_kind != MARK)
    launching = np.isin(g.g_launch, np.flatnonzero(inside))
    if not launching.any():
        return Edit(g, "no Optimizer.step launches in the trace", 0)
    floor = _kernel_floor_us(g)
    names = g.trace.names
    cls = optimizer_class(names)
    changed = 0
    launch_ops, region_all = np.flatnonzero(launching), np.flatnonzero(inside)
    spans = _span_index(optimizer_rows(g.trace))
    cpu_ops = _by_start(g.trace, np.flatnonzero(g.trace.host.cat == CPU_OP))
    for at in by_key(g.g_step[launch_ops]).values():  # one sort by step (a mask per step was steps x ops)
        ops = launch_ops[at]
        lo, hi = np.searchsorted(region_all, [g.g_launch[ops].min(), g.g_launch[ops].max()], side="left")
        region = region_all[lo:hi + 1]  # the optimizer's host nodes from its first launch to its last
        keep, rest = region[0], region[1:]
        if g.h_gap[keep] > 0:
            g.h_gap[keep] -= min(_operators_before(g, keep, spans, cpu_ops), g.h_gap[keep])
        g.h_dur[rest] = 0.0
        g.h_gap[rest] = np.minimum(g.h_gap[rest], 0.0)
        g.h_kind[rest[g.h_kind[rest] == SYNC]] = CALL  # host reads of optimizer state go with the loop
        if g.h_gap[keep] > 0:
            g.h_gap[keep] -= g.h_dispatch[keep]
        kernels = ops[g.trace.gpu.kind[ops] == KERNEL]
        if len(kernels) > 1:
            work = fused_work([names[i] for i in g.trace.gpu.name[kernels].tolist()],
                              np.maximum(g.g_dur[kernels] - floor, 0.0).tolist(), cls)
            g.g_dur[kernels] = 0.0
            g.g_dur[kernels[0]] = work + floor
        g.g_lat[ops[1:]] = NO_DEP  # part of the one kernel: ordered by the stream only
        g.g_gap[ops[1:]] = 0.0
        changed += len(rest)
    return Edit(g, f"the optimizer's host work ({changed} calls in the trace) becomes one launch per step, "
                   f"its kernels one kernel", changed)


def _span_index(spans: tuple) -> dict:
    """Spans (starts, ends, tids) by thread: their starts sorted, their ends in that order, and the running maximum of
    those ends (for `_latest_span_start`: one sorted search per query, not a pass over every span per step)."""
    lo, hi, tids = spans
    index = {}
    for tid, at in by_key(tids).items():
        at = at[np.argsort(lo[at], kind="stable")]
        index[tid] = lo[at], hi[at], np.fmax.accumulate(hi[at])  # fmax: an unknown (nan) end reaches nothing
    return index


def _latest_span_start(index: dict, tid: int, t: float) -> float | None:
    """The latest start among thread tid's spans holding time t (start <= t <= end), None where none does. Back from
    the last span started by t, while some span up to there still reaches t (the running maximum of the ends)."""
    got = index.get(int(tid))
    if got is None:
        return None
    starts, ends, reach = got
    i = int(np.searchsorted(starts, t, side="right")) - 1
    while i >= 0 and reach[i] >= t:
        if ends[i] >= t:
            return float(starts[i])
        i -= 1
    return None


def _by_start(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host rows sorted by their start, and those starts (for a sorted search instead of a pass over all rows)."""
    rows = rows[np.argsort(trace.host.start[rows], kind="stable")]
    return rows, trace.host.start[rows]


def _operators_before(g: Graph, node: int, spans: dict, cpu_ops: tuple) -> float:
    """The host time (us, as traced) of the operators that ran in node's optimizer span before it started: the union
    of their intervals on its thread, from the span's start to the node's call. `spans`: _span_index of
    optimizer_rows(g.trace); `cpu_ops`: the trace's operator rows by start (_by_start)."""
    host = g.trace.host
    r = int(g.h_row[node])
    if r < 0:
        return 0.0
    t, tid = float(host.start[r]), host.tid[r]
    s = _latest_span_start(spans, tid, t)
    if s is None:
        return 0.0
    rows, starts = cpu_ops
    ops = rows[np.searchsorted(starts, s, side="left"):np.searchsorted(starts, t, side="right")]
    # strictly before the call: an operator ending at its start is the call's own dispatch (replay's
    # _dispatch_in_gaps takes a launch at an operator's end as inside it), which the edit removes already
    ops = ops[(host.tid[ops] == tid) & (host.end[ops] < t)]
    covered, reach = 0.0, s
    for a, b in sorted(zip(host.start[ops].tolist(), host.end[ops].tolist())):  # their union: nested ones once
        if b > reach:
            covered += b - max(a, reach)
            reach = b
    return covered


def _kernel_floor_us(g: Graph) -> float:
    """The fixed cost of one kernel: the shortest kernel in the trace (a kernel that did almost no work)."""
    gpu = g.trace.gpu
    d = gpu.dur[(gpu.kind == KERNEL) & (gpu.dur > 0)]
    return float(d.min()) if len(d) else 0.0


def pin_memory(g: Graph, pinned_gb_s: float | None = None) -> Edit:
    """Pageable copies move to pinned memory: each runs at the pinned rate (the trace's own pinned
    copies', else PINNED_GB_S); copies to the GPU become non_blocking, off the host's path (their
    call costs one launch); copies to the host still block (the host reads them)."""
    g = g.copy()
    rate = pinned_gb_s or _pinned_rate(g.trace) or PINNED_GB_S
    h2d, d2h = replay.copy_rows(g, "HtoD"), replay.copy_rows(g, "DtoH")
    ops = np.concatenate([h2d, d2h])
    if len(ops) == 0:
        return Edit(g, "no pageable copies in the trace", 0)
    nbytes = g.trace.gpu.bytes[ops]
    at_rate = np.where(np.isnan(nbytes), g.g_dur[ops], nbytes / (rate * 1e3))  # bytes / (GB/s) in us
    g.g_dur[ops] = np.minimum(g.g_dur[ops], at_rate)
    cost = replay.typical_launch_us(g)
    for j in unique(g.g_launch[h2d][g.g_launch[h2d] >= 0]):
        g.h_kind[j] = CALL
        g.h_dur[j] = min(g.h_dur[j], cost)
        g.h_await[j] = np.zeros(0, dtype=np.int64)
    return Edit(g, f"{len(ops)} pageable copies at {rate:.0f} GB/s pinned, {len(h2d)} to the GPU non_blocking",
                len(ops))


def _pinned_rate(trace: Trace) -> float | None:
    """The fastest rate of the trace's pinned host<->device copies of at least MIN_PINNED_BYTES, GB/s."""
    gpu = trace.gpu
    ids = trace.name_ids(lambda n: "Pinned" in n and ("HtoD" in n or "DtoH" in n))
    m = np.isin(gpu.name, ids) & (gpu.bytes >= MIN_PINNED_BYTES) & (gpu.dur > 0)
    return float(np.max(gpu.bytes[m] / gpu.dur[m])) / 1e3 if m.any() else None


def dataloader_workers(g: Graph, workers: int = DEFAULT_WORKERS, factor: float = WORKER_FACTOR) -> Edit:
    """More DataLoader workers: the wait drops to what the loader's throughput allows. In-process
    loading (`_SingleProcessDataLoaderIter`, num_workers=0) took the wait L per batch; `workers`
    processes as fast deliver one per L / workers while the step runs, so the wait becomes
    max(0, L / workers - rest of the step). A multi-process loader that made the step wait
    delivers one batch per step; `factor` times the workers deliver one per step / factor, so
    the wait becomes max(0, step / factor - rest of the step). Assumes free CPU cores."""
    if not g.loaders:
        return Edit(g.copy(), "no DataLoader waits in the trace", 0)
    base = replay.replay(g)
    g = g.copy()
    t = base.node_start[[s for s, _, _ in g.loaders]]
    step_of = np.searchsorted(base.start, t, side="right") - 1  # the replayed step each wait starts in
    step_of = np.where((step_of >= 0) & (t <= base.end[np.maximum(step_of, 0)]), step_of, -1)
    for (s, e, in_process), i in zip(g.loaders, step_of):
        wait = base.node_start[e] - base.node_start[s]
        if i < 0:
            continue
        rest = base.duration[i] - wait
        period = wait / workers if in_process else base.duration[i] / factor
        new_wait = max(0.0, period - rest)
        inner = np.arange(s + 1, e + 1)
        g.h_gap[inner] = 0.0
        g.h_dur[inner[:-1]] = 0.0
        g.h_gap[e] = new_wait
        g.h_dispatch[inner] = 0.0
    how = f"{workers} workers" if any(p for _, _, p in g.loaders) else f"{factor:g}x the workers"
    return Edit(g, f"{len(g.loaders)} DataLoader waits cut to the loader's throughput with {how}", len(g.loaders))


def tf32(g: Graph, target: str = LOW_PRECISION) -> Edit:
    """fp32 GEMMs run in `target` (tf32, or bf16 under autocast): each fp32 GEMM kernel's time is
    scaled by the datasheet peak ratio fp32 / target (hardware/peaks.py); a GEMM limited by memory
    speeds up less, so this is the most it saves."""
    g = g.copy()
    trace = g.trace
    peak = peaks.lookup(trace.devices[0].name) if trace.devices else None
    if peak is None or not peak.peak("fp32") or not peak.peak(target):
        return Edit(g, "the GPU is not in the peak table: no peak ratio", 0)
    ratio = peak.peak("fp32") / peak.peak(target)
    rows = _fp32_gemms(g)
    g.g_dur[rows] *= ratio
    return Edit(g, f"{len(rows)} fp32 GEMM kernels scaled by the {peak.id} peak ratio fp32/{target} = {ratio:.3f}",
                len(rows))


# What autocast's cast of a GEMM's operand costs the host, in launch calls (`replay.typical_launch_us`), forward (its
# `aten::to` inside the GEMM's operator) and backward (the engine's call of its `ToCopyBackward0`, one per forward
# cast): medians over the three bf16-autocast traces of the H200 corpus (accelerate, timm and the bf16 transformer:
# 3.3 / 4.2 / 3.6 forward, 3.5 / 4.4 / 3.8 backward, each against its trace's median cudaLaunchKernel;
# docs/validation.md 7j). Per GEMM operator autocast casts its fp32 operands that are not already bf16: with the
# trace's dtypes its fp32 inputs less one (the activation, most often a bf16 GEMM's output passed through elementwise
# work); without them its parameters as the operator usually takes them (AUTOCAST_CASTS: nn.Linear's weight and bias, a
# convolution's weight, HF's Conv1D addmm's weight and bias, one operand of a product of activations).
CAST_LAUNCHES = (3.6, 3.8)
AUTOCAST_CASTS = {"aten::linear": 2, "aten::addmm": 2, "aten::conv1d": 1, "aten::conv2d": 1, "aten::conv3d": 1,
                  "aten::convolution": 1, "aten::_convolution": 1, "aten::matmul": 1, "aten::mm": 1, "aten::bmm": 1,
                  "aten::baddbmm": 1, "aten::einsum": 1}


def bf16(g: Graph) -> Edit:
    """fp32 GEMMs run in bf16 under autocast: `tf32` with the bf16 tensor-core peak as the target; and autocast casts
    each GEMM operator's fp32 operands to bf16 on the host, each cast one more operator and launch, and each cast's
    gradient back in the backward (`_autocast_casts`): on a host-bound loop the casts cost more than the GEMMs save."""
    e = tf32(g, "bf16")
    if not e.changed:
        return e
    n = _autocast_casts(e.graph)
    return Edit(e.graph, e.what + (f"; {n / max(g.steps.count, 1):.0f} operand casts a step by autocast, each with its "
                                   "gradient's cast back, on the host" if n else ""), e.changed)


def _autocast_casts(g: Graph) -> int:
    """Autocast's casts of the fp32 GEMMs' operands, on the host: per forward GEMM operator (outermost on a thread
    that is not autograd's) its casts (CAST_LAUNCHES[0] launch calls each) before its first GEMM launch; in each
    step as many casts back in the backward (CAST_LAUNCHES[1] each), shared among the step's fp32 GEMM launches on
    autograd's thread. Edits g; the forward casts, 0 in a trace without operators."""
    host, names = g.trace.host, g.trace.names
    rows = _fp32_gemms(g)
    node = g.g_launch[rows]
    rows, node = rows[node >= 0], node[node >= 0]
    if not len(rows) or not has_operators(g):
        return 0
    unit = replay.typical_launch_us(g)
    backward = autograd_thread(g)[node]
    ops = outermost_ops(g, g.h_row[node])
    first: dict[int, int] = {}
    for op, j in zip(ops[~backward].tolist(), node[~backward].tolist()):
        if op >= 0 and (op not in first or j < first[op]):
            first[op] = j
    casts = np.zeros(len(g.h_kind))
    for op, j in first.items():
        casts[j] = _casts_of(names[host.name[op]], host.dtypes[op] if len(host.dtypes) else None)
    g.h_gap[casts > 0] = np.maximum(g.h_gap[casts > 0], 0.0) + casts[casts > 0] * CAST_LAUNCHES[0] * unit
    steps = step_of(g, np.arange(len(g.h_kind)))
    back = unique(node[backward])
    back, back_step = back[steps[back] >= 0], steps[back][steps[back] >= 0]
    n = len(g.step_start_node)
    total = np.bincount(steps[steps >= 0], weights=casts[steps >= 0], minlength=n)  # forward casts per step
    per = total[back_step] / np.bincount(back_step, minlength=n)[back_step]
    g.h_gap[back] = np.maximum(g.h_gap[back], 0.0) + per * CAST_LAUNCHES[1] * unit
    return int(casts.sum())


def _casts_of(name: str, raw: bytes | str | None) -> int:
    """How many operands autocast casts for one GEMM operator: its fp32 inputs less one where the trace has their
    dtypes, else AUTOCAST_CASTS' count for its name."""
    dtypes = _decoded(raw)
    if isinstance(dtypes, list) and dtypes:
        return max(sum(d == "float" for d in dtypes) - 1, 0)
    return AUTOCAST_CASTS.get(name, 1)


def _fp32_gemms(g: Graph) -> np.ndarray:
    """Kernel rows of GEMMs that run in plain fp32 (gemm_dtype.kernel_dtype), classified once per trace and
    once per (kernel name, launching op's dtypes)."""
    if "fp32_gemms" in g.memo:
        return g.memo["fp32_gemms"]
    trace = g.trace
    gpu, host, names = trace.gpu, trace.host, trace.names
    rows = np.flatnonzero((gpu.kind == KERNEL) & np.isin(categories(g)[gpu.name], GEMM_CATEGORIES))
    ops = launches.op_rows(trace, rows)
    raws = host.dtypes.take(np.maximum(ops, 0)) if len(host.dtypes) else [None] * len(ops)
    keys = [(n, raw if op >= 0 else None) for n, op, raw in zip(gpu.name[rows].tolist(), ops.tolist(), raws)]
    fp32 = {}
    for name, raw in set(keys):
        dt = ""
        if raw is not None:
            try:
                dt = first_float_dtype(msgspec.json.decode(raw))
            except msgspec.DecodeError:
                dt = ""
        fp32[(name, raw)] = kernel_dtype(names[name], dt) == "fp32"
    out = rows[np.fromiter((fp32[k] for k in keys), dtype=bool, count=len(keys))].astype(np.int64)
    g.memo["fp32_gemms"] = out
    return out


def comm_overlap(g: Graph) -> Edit:
    """Collectives overlap compute: each communication kernel moves to its own stream (ordered after
    the previous collective and its launch), compute kernels no longer wait behind it, and the
    first kernel launched in `Optimizer.step` (which reads the reduced gradients) waits for the
    step's last collective."""
    g = g.copy()
    comm = categories(g)[g.trace.gpu.name] == CATEGORIES.index("communication")
    if not comm.any():
        return Edit(g, "no collective kernels in the trace", 0)
    side = int(g.g_stream.max()) + 1
    opt = in_optimizer(g).tolist()
    prev, stream, dep, launch = g.g_prev.tolist(), g.g_stream.tolist(), g.g_dep.tolist(), g.g_launch.tolist()
    is_comm = comm.tolist()
    nxt = [-1] * len(prev)
    for i, p in enumerate(prev):
        if p >= 0:
            nxt[p] = i
    for s in unique(g.g_stream[comm]).tolist():
        o = int(np.flatnonzero((g.g_prev == -1) & (g.g_stream == s))[0])  # the stream's first op (its chain is
        last_compute, last_comm = -1, -1  # not edited yet: each stream's chain is its own)
        while o >= 0:
            if is_comm[o]:
                prev[o], stream[o] = last_comm, side
                last_comm = o
            else:
                prev[o] = last_compute
                last_compute = o
                if last_comm >= 0 and launch[o] >= 0 and opt[launch[o]] and dep[o] < 0:
                    dep[o] = last_comm
            o = nxt[o]
    g.g_prev[:], g.g_stream[:], g.g_dep[:] = prev, stream, dep
    return Edit(g, f"{int(comm.sum())} collective kernels moved off the compute stream", int(comm.sum()))


def larger_batch(g: Graph, factor: float = BATCH_FACTOR) -> Edit:
    """A `factor` times larger batch: the kernels and copies that process samples take `factor`
    times as long (linear in the batch: a larger kernel often runs more efficiently, so at most
    that), the optimizer's and zero_grad's (per parameter) do not, nor does the host's launch
    work; data waits grow by `factor`. The saving is per original batch: step / factor."""
    g = g.copy()
    per_param = in_optimizer(g, zero_grad=True)
    scaled = (g.g_step >= 0) & ~((g.g_launch >= 0) & per_param[np.maximum(g.g_launch, 0)])
    g.g_dur[scaled] *= factor
    for s, e, _ in g.loaders:
        g.h_gap[s + 1:e + 1] = np.where(g.h_gap[s + 1:e + 1] > 0, g.h_gap[s + 1:e + 1] * factor, g.h_gap[s + 1:e + 1])
    return Edit(g, f"batch x{factor:g}: {int(scaled.sum())} GPU ops scaled, host launch work unchanged",
                int(scaled.sum()), per_batch_factor=factor)


# The edits by name (the fix catalogue holds the functions themselves: diagnosis/fixes.py `replay`)
TRANSFORMS = {
    "remove_syncs": remove_syncs,
    "static_shapes": static_shapes,
    "fused_optimizer": fused_optimizer,
    "pin_memory": pin_memory,
    "dataloader_workers": dataloader_workers,
    "cuda_graphs": cuda_graphs,
    "torch_compile": torch_compile,
    "tf32": tf32,
    "bf16": bf16,
    "comm_overlap": comm_overlap,
    "larger_batch": larger_batch,
}


# Edits that only shorten nodes (durations, gaps, latencies): a step cannot end earlier than by the time they take
# out of it, which bounds what the replay may claim (the mechanism's time on the critical path at most).
SHORTENING = frozenset({"tf32", "bf16", "fused_optimizer", "torch_compile", "cuda_graphs"})


def removed_ms(before: Graph, after: Graph) -> float:
    """The most time an edit took out of one step: per step, the host nodes' shortened durations and gaps and the
    GPU ops' shortened durations, gaps and latencies, summed; the largest step's, in ms."""
    n = len(before.step_start_node)
    if n == 0:
        return float("inf")
    h_step = np.searchsorted(before.step_start_node, np.arange(len(before.h_kind)), side="right") - 1
    dh = (np.maximum(before.h_dur - after.h_dur, 0.0)
          + np.maximum(np.maximum(before.h_gap, 0.0) - np.maximum(after.h_gap, 0.0), 0.0))
    lat_b, lat_a = (np.maximum(x, 0.0) for x in (before.g_lat, after.g_lat))  # NO_DEP: a latency that never binds
    dg = (np.maximum(before.g_dur - after.g_dur, 0.0) + np.maximum(np.maximum(before.g_gap, 0.0)
                                                                   - np.maximum(after.g_gap, 0.0), 0.0)
          + np.maximum(lat_b - lat_a, 0.0))
    per = np.zeros(n)
    ok = (h_step >= 0) & (h_step < n)
    np.add.at(per, h_step[ok], dh[ok])
    ok = (before.g_step >= 0) & (before.g_step < n)
    np.add.at(per, before.g_step[ok], dg[ok])
    return float(per.max()) / 1000


def predict(g: Graph, fix: str | Callable[..., Edit], before_ms: float | None = None, **params) -> Prediction:
    """The predicted median step with one edit (a function of this module, or its name in TRANSFORMS) applied to a
    (calibrated) graph; a shortening edit's saving at most the time it took out of a step (SHORTENING), and its
    sentence says when the replay claimed more."""
    if isinstance(fix, str) and fix not in TRANSFORMS:
        raise KeyError(f"no transformation for fix {fix!r}; known: {', '.join(TRANSFORMS)}")
    transform = TRANSFORMS[fix] if isinstance(fix, str) else fix
    fix = fix if isinstance(fix, str) else fix.__name__
    before = replay.replay(g).median_ms if before_ms is None else before_ms
    edit = transform(g, **params)
    after = replay.replay(edit.graph).median_ms / edit.per_batch_factor if edit.changed else before
    what = edit.what
    if fix in SHORTENING and edit.changed:
        bound = removed_ms(g, edit.graph)
        if before - after > bound:
            what += (f"; the replay saved {before - after:.2f} ms, more than the {bound:.2f} ms the edit takes out of "
                     "a step: capped there")
            after = before - bound
    return Prediction(fix, before, after, what, edit.changed, edit.unmodelled)


def predict_all(trace: Trace, unprofiled_step_ms: float | None = None) -> dict[str, Prediction]:
    """Every transformation's prediction for one trace, keyed by fix key."""
    g = replay.build(trace)
    before = replay.calibrate(g, unprofiled_step_ms).replayed_ms  # the replay of g as calibrated
    return {k: predict(g, k, before) for k in TRANSFORMS}
