"""FLOPs of a step read off the trace: from operator shapes (`record_shapes=True`) or from the
profiler's own FLOP annotations (`with_flops=True`).

Definitions (also in docs/mfu.md):
- counted ops: matrix multiplies (aten::linear, matmul, mm, addmm, bmm, baddbmm, addbmm, _scaled_mm),
  convolutions (aten::conv1d/2d/3d, conv_transpose1d/2d/3d, convolution, _convolution,
  convolution_backward) and attention (aten::scaled_dot_product_attention, its
  `_scaled_dot_product_*_attention` forward and backward ops, `_flash_attention_*`,
  `_efficient_attention_*`). Elementwise, normalisation and optimizer ops are not counted: they
  are not model FLOPs (FlopCounterMode does not count them either).
- each op is counted once: a counted op that runs inside another counted op (same thread, inside
  its time span) is covered by the outer op's formula and skipped. This removes autocast's
  aten::linear -> aten::linear -> aten::matmul -> aten::mm chains and SDPA's dispatch to its
  cuDNN/flash kernel op. Backward matmuls are the aten::mm ops autograd runs on its own thread;
  they are counted like forward ones. convolution_backward counts one convolution per gradient
  it computes (grad input, grad weight, from its output_mask); SDPA backward counts twice the
  forward (four matmuls against two).
- formulas follow torch.utils.flop_counter (FlopCounterMode): 2 FLOPs per multiply-add; a bias
  add is not counted; attention counts the full Sq x Sk score matrix even when causal.
- FLOPs per step: the sum over counted ops starting inside each `ProfilerStep#` host window
  ([ts, ts + dur]), median over steps.
- bytes of an op: each tensor input read once and each output written once (compulsory
  traffic); arithmetic intensity = FLOPs / bytes (used by roofline.py).
- annotated FLOPs: the `flops` argument that `torch.profiler.profile(with_flops=True)` writes on
  a few ops (aten::mm, addmm, bmm, baddbmm, conv2d, and elementwise mul/add); summed over the
  outermost annotated ops per step, the same way.
"""

from __future__ import annotations

import math
import re

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace import launches
from gpucheckup.analysis.distinct import median
from gpucheckup.analysis.groups import by_key, pair_ids
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.trace.tables import CPU_OP, KERNEL, Trace

ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# The compute dtype an op runs in, by its first floating input.
DTYPE_NAMES = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
}

MATMUL_OPS = {"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::addbmm", "aten::_scaled_mm"}
CONV_OPS = {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
            "aten::conv_transpose3d", "aten::convolution", "aten::_convolution", "aten::convolution_backward"}
SDPA_BHSD = {  # (q, k, v) are inputs 0-2 in [batch, heads, seq, dim] layout; backward ops take grad_out first
    "aten::scaled_dot_product_attention": 0,
    "aten::_scaled_dot_product_attention_math": 0,
    "aten::_scaled_dot_product_flash_attention": 0,
    "aten::_scaled_dot_product_efficient_attention": 0,
    "aten::_scaled_dot_product_cudnn_attention": 0,
    "aten::_scaled_dot_product_fused_attention_overrideable": 0,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 0,
    "aten::_scaled_dot_product_flash_attention_backward": 1,
    "aten::_scaled_dot_product_efficient_attention_backward": 1,
    "aten::_scaled_dot_product_cudnn_attention_backward": 1,
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": 1,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 1,
}
SDPA_BSHD = {  # the lower-level flash / mem-efficient ops take [batch, seq, heads, dim]
    "aten::_flash_attention_forward": 0,
    "aten::_efficient_attention_forward": 0,
    "aten::_flash_attention_backward": 1,
    "aten::_efficient_attention_backward": 1,
}
COUNTED_OPS = MATMUL_OPS | CONV_OPS | set(SDPA_BHSD) | set(SDPA_BSHD)
KIND = {**{n: "matmul" for n in MATMUL_OPS}, **{n: "conv" for n in CONV_OPS},
        **{n: "attention" for n in (*SDPA_BHSD, *SDPA_BSHD)}}


class OpFlops(msgspec.Struct):
    """One counted op's FLOPs and compulsory bytes, or why it could not be counted."""

    flops: float
    elements: float  # tensor elements read and written (compulsory traffic)
    dtype: str  # bf16, fp16, fp32, fp8, fp64, or "" when unknown
    shapes: list  # the tensor input shapes used

    def bytes(self, dtype: str | None = None) -> float:
        """Compulsory bytes at the element size of a dtype (the op's own by default)."""
        return self.elements * ELEMENT_BYTES.get(dtype or self.dtype, 2)


class FlopCount(msgspec.Struct):
    """FLOPs per step from one source, with the ops behind it."""

    source: str  # "shapes" or "annotations"
    per_step: list[float]  # FLOPs of each step window
    flops_per_step: float  # median of per_step
    ops_counted: int  # ops counted, over all steps
    ops_skipped: int  # counted-kind ops whose shapes could not be read
    by_kind: dict[str, float] = msgspec.field(default_factory=dict)  # FLOPs per step by matmul / conv / attention
    groups: list[dict] = msgspec.field(default_factory=list)  # ops grouped by (name, shapes, dtype), largest first

    def to_dict(self, top: int = 10) -> dict:
        return {
            "source": self.source,
            "flops_per_step": self.flops_per_step,
            "per_step": self.per_step,
            "ops_counted": self.ops_counted,
            "ops_skipped": self.ops_skipped,
            "by_kind": self.by_kind,
            "top_ops": self.groups[:top],
        }


# ---- formulas ---------------------------------------------------------------------------------

MAX_DIM = 2 ** 40  # a tensor dimension larger than this is not a real shape (a trace's shapes are ints)


def _prod(xs) -> int:
    return int(math.prod(xs)) if xs else 1


def _elements(shapes: list[list[int]]) -> float:
    return float(sum(_prod(s) for s in shapes))


def matmul_flops(name: str, shapes: list[list[int]]) -> tuple[float, list[list[int]], list[list[int]]]:
    """FLOPs of a matrix-multiply op, its tensor operands and its output shapes."""
    if name == "aten::linear":
        x, w = shapes[0], shapes[1]
        out = [*x[:-1], w[0]]
        return 2.0 * _prod(x[:-1]) * x[-1] * w[0], [x, w], [out]
    if name in ("aten::mm", "aten::_scaled_mm"):
        a, b = shapes[0], shapes[1]
        return 2.0 * a[0] * a[1] * b[1], [a, b], [[a[0], b[1]]]
    if name == "aten::addmm":
        a, b = shapes[1], shapes[2]
        return 2.0 * a[0] * a[1] * b[1], [shapes[0], a, b], [[a[0], b[1]]]
    if name == "aten::bmm":
        a, b = shapes[0], shapes[1]
        return 2.0 * a[0] * a[1] * a[2] * b[2], [a, b], [[a[0], a[1], b[2]]]
    if name in ("aten::baddbmm", "aten::addbmm"):
        a, b = shapes[1], shapes[2]
        out = [a[0], a[1], b[2]] if name == "aten::baddbmm" else [a[1], b[2]]
        return 2.0 * a[0] * a[1] * a[2] * b[2], [shapes[0], a, b], [out]
    if name == "aten::matmul":
        a, b = shapes[0], shapes[1]
        if len(a) == 1 and len(b) == 1:
            return 2.0 * a[0], [a, b], [[]]
        m = 1 if len(a) == 1 else a[-2]
        n = 1 if len(b) == 1 else b[-1]
        k = a[-1]
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])) if len(a) > 2 or len(b) > 2 else ()
        out = [*batch, *([m] if len(a) > 1 else []), *([n] if len(b) > 1 else [])]
        return 2.0 * _prod(batch) * m * k * n, [a, b], [out]
    raise ValueError(name)


def _int_list(v: str, dims: int) -> list[int]:
    """A concrete int-list argument: "[2, 2]" -> [2, 2]; a single int broadcasts over dims."""
    v = v.strip()
    nums = [int(x) for x in re.findall(r"-?\d+", v)]
    if not nums:
        raise ValueError(v)
    return nums * dims if len(nums) == 1 else nums


def _bool_list(v: str) -> list[bool]:
    return [x.strip().lower() == "true" for x in v.strip("[] ").split(",")]


def conv_out_spatial(inp: list[int], k: list[int], stride, padding, dilation) -> list[int]:
    """Output spatial size of a (non-transposed) convolution."""
    return [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, kk, s, p, d in zip(inp, k, stride, padding, dilation)]


def conv_flops(name: str, shapes: list[list[int]],
               concrete: list[str]) -> tuple[float, list[list[int]], list[list[int]]]:
    """FLOPs of a convolution op (forward, transposed or backward), its tensor operands and outputs."""
    if name == "aten::convolution_backward":
        grad_out, x, w = shapes[0], shapes[1], shapes[2]
        transposed = concrete[7].strip().lower() == "true"
        mask = _bool_list(concrete[10]) if len(concrete) > 10 and concrete[10] else [True, True, True]
        spatial = x[2:] if transposed else grad_out[2:]
        one = 2.0 * x[0] * _prod(w) * _prod(spatial)
        n = int(mask[0]) + int(mask[1])
        return one * n, [grad_out, x, w], ([x] if mask[0] else []) + ([w] if mask[1] else [])
    x, w = shapes[0], shapes[1]
    dims = len(x) - 2
    if name.startswith("aten::conv_transpose"):
        # (input, weight, bias, stride, padding, output_padding, groups, dilation)
        stride = _int_list(concrete[3], dims)
        padding = _int_list(concrete[4], dims)
        out_pad = _int_list(concrete[5], dims)
        groups = int(concrete[6])
        dilation = _int_list(concrete[7], dims)
        transposed = True
    else:
        stride = _int_list(concrete[3], dims)
        pad_arg = concrete[4].strip().strip('"').lower()
        dilation = _int_list(concrete[5], dims)
        if name in ("aten::conv1d", "aten::conv2d", "aten::conv3d"):
            transposed, out_pad, groups = False, [0] * dims, int(concrete[6])
        else:  # convolution / _convolution: (..., dilation, transposed, output_padding, groups, ...)
            transposed = concrete[6].strip().lower() == "true"
            out_pad = _int_list(concrete[7], dims)
            groups = int(concrete[8])
        if pad_arg == "same":
            padding = None
        elif pad_arg == "valid":
            padding = [0] * dims
        else:
            padding = _int_list(pad_arg, dims)
    k = w[2:]
    if transposed:
        cout = w[1] * groups
        out = [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
               for i, kk, s, p, d, op in zip(x[2:], k, stride, padding, dilation, out_pad)]
        flops = 2.0 * x[0] * _prod(w) * _prod(x[2:])
    else:
        cout = w[0]
        out = list(x[2:]) if padding is None else conv_out_spatial(x[2:], k, stride, padding, dilation)
        flops = 2.0 * x[0] * _prod(w) * _prod(out)
    return flops, [x, w], [[x[0], cout, *out]]


def attention_flops(name: str, shapes: list[list[int]]) -> tuple[float, list[list[int]], list[list[int]]]:
    """FLOPs of a scaled-dot-product-attention op (forward: QK^T and PV; backward: twice that)."""
    if name in SDPA_BHSD:
        first = SDPA_BHSD[name]
        q, k, v = shapes[first], shapes[first + 1], shapes[first + 2]
        bh, sq, d = _prod(q[:-2]), q[-2], q[-1]
        sk, dv = k[-2], v[-1]
    else:
        first = SDPA_BSHD[name]
        q, k, v = shapes[first], shapes[first + 1], shapes[first + 2]
        bh, sq, d = q[0] * q[2], q[1], q[3]
        sk, dv = k[1], v[3]
    fwd = 2.0 * bh * sq * sk * d + 2.0 * bh * sq * sk * dv
    backward = first == 1
    operands = shapes[: first + 3]
    out = [[bh * sq * dv]] if not backward else [[bh * sq * d], [bh * sk * d], [bh * sk * dv]]
    return (2 * fwd if backward else fwd), operands, out


def op_flops(name: str, shapes_raw: bytes | None, types_raw: bytes | None,
             concrete_raw: bytes | None) -> OpFlops | None:
    """FLOPs and compulsory bytes of one counted op, or None when its shapes cannot be read."""
    if not shapes_raw:
        return None
    try:
        shapes = msgspec.json.decode(shapes_raw)
        types = msgspec.json.decode(types_raw) if types_raw else []
        concrete = msgspec.json.decode(concrete_raw) if concrete_raw else []
        if not isinstance(shapes, list):
            return None  # `Input Dims` an object or a number: not a list of shapes
        kind = KIND[name]
        if kind == "matmul":
            flops, operands, out = matmul_flops(name, shapes)
        elif kind == "conv":
            flops, operands, out = conv_flops(name, shapes, [str(c) for c in concrete])
        else:
            flops, operands, out = attention_flops(name, shapes)
        if not all(type(d) is int and 0 <= d <= MAX_DIM for s in (*operands, *out) for d in s):
            return None  # not a tensor shape: a float, a string, a negative or absurd size
        return OpFlops(flops=float(flops), elements=_elements(operands) + _elements(out),
                       dtype=first_float_dtype(types),
                       shapes=[s for s in shapes if isinstance(s, list) and s])
    except (msgspec.DecodeError, IndexError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None


def first_float_dtype(types: list) -> str:
    """bf16 / fp16 / fp32 / fp8 / fp64 of an op's first floating input, or ""."""
    for t in types if isinstance(types, list) else ():  # a trace may say `"Input type": null`
        if isinstance(t, str) and t in DTYPE_NAMES:
            return DTYPE_NAMES[t]
    return ""


# ---- counting over the trace -------------------------------------------------------------------

def outermost(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For candidate host rows: whether each is outermost among them (not inside another on the same
    thread), and for each row the index (into rows) of its outermost enclosing candidate."""
    host = trace.host
    order = np.lexsort((-host.end[rows], host.start[rows], host.tid[rows], host.pid[rows]))
    is_root = np.zeros(len(rows), dtype=bool)
    root_of = np.arange(len(rows))
    start, end = host.start[rows].tolist(), host.end[rows].tolist()
    threads = list(zip(host.pid[rows].tolist(), host.tid[rows].tolist()))
    cur_root, cur_end, cur_thread = -1, -math.inf, None
    for i in order.tolist():
        thread = threads[i]
        if thread == cur_thread and start[i] < cur_end:
            root_of[i] = cur_root
            continue
        is_root[i] = True
        cur_root, cur_end, cur_thread = i, end[i], thread
    return is_root, root_of


def _step_of(steps: Steps, t: np.ndarray) -> np.ndarray:
    """The host step window (ProfilerStep annotation span) each time falls in, or -1."""
    i = np.searchsorted(steps.host_start, t, side="right") - 1
    ok = (i >= 0) & (t <= steps.host_end[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def shape_flops(trace: Trace, steps: Steps) -> FlopCount | None:
    """FLOPs per step from the shapes of GEMM, convolution and attention ops; None without shapes."""
    host = trace.host
    ids = trace.name_ids(lambda n: n in COUNTED_OPS)
    rows = np.flatnonzero((host.cat == CPU_OP) & np.isin(host.name, ids))
    if len(rows) == 0 or not any(host.shapes[r] for r in rows[:50]):
        return None
    is_root, root_of = outermost(trace, rows)
    names = [trace.names[n] for n in host.name[rows].tolist()]
    args = list(zip(names, host.shapes.take(rows), host.dtypes.take(rows),
                    host.concrete.take(rows) if host.concrete else [None] * len(rows)))
    roots = root_of.tolist()
    inner_dtype = _inner_dtypes(args, roots, host.start[rows].tolist())
    step = _step_of(steps, host.start[rows])
    t = _Tally(np.zeros(steps.count), {"matmul": 0.0, "conv": 0.0, "attention": 0.0})
    kernel_us = _kernel_time_per_root(trace, rows, root_of, is_root)
    seen: dict[tuple, OpFlops | None] = {}  # op_flops by (name, raw arguments): ops recur every step
    members: dict[int, list[int]] = {}
    for i, root in enumerate(roots):
        if i != root:
            members.setdefault(root, []).append(i)
    for i in np.flatnonzero(is_root & (step >= 0)).tolist():
        counted_here = _count_op(trace, rows, i, members.get(i, []), seen, args)
        if not counted_here:
            t.skipped += 1
            continue
        for n, (j, of) in enumerate(counted_here):
            dtype = inner_dtype.get(i, of.dtype) if j == i else (of.dtype or inner_dtype.get(i, ""))
            t.add(names[j], of, dtype, int(step[i]), kernel_us.get(i, 0.0) / 1000 if n == 0 else None)
    if t.counted == 0:
        return None
    return FlopCount(
        source="shapes",
        per_step=[float(x) for x in t.per_step],
        flops_per_step=float(median(t.per_step)),
        ops_counted=t.counted,
        ops_skipped=t.skipped,
        by_kind={k: v / steps.count for k, v in t.by_kind.items()},
        groups=_ranked_groups(t.groups, steps.count),
    )


def _inner_dtypes(args: list[tuple], roots: list[int], starts: list[float]) -> dict[int, str]:
    """Each root op's dtype: that of the innermost counted op inside it (autocast casts on the way down)."""
    inner_dtype: dict[int, str] = {}
    depth_seen: dict[int, float] = {}
    dtype_of: dict[bytes, str] = {}  # the same raw types recur every step: decoded once
    for i, (_, _, raw, _) in enumerate(args):
        if raw is None:
            continue
        root = roots[i]
        if starts[i] >= depth_seen.get(root, -math.inf):
            dt = dtype_of.get(raw)
            if dt is None:
                try:
                    dt = dtype_of[raw] = first_float_dtype(msgspec.json.decode(raw))
                except msgspec.DecodeError:
                    dt = dtype_of[raw] = ""
            if dt:
                inner_dtype[root], depth_seen[root] = dt, starts[i]
    return inner_dtype


class _Tally(msgspec.Struct):
    """The counted FLOPs so far: per step, per kind, per group of (op, shapes, dtype); ops counted and skipped."""

    per_step: np.ndarray
    by_kind: dict[str, float]
    groups: dict[tuple, dict] = {}
    counted: int = 0
    skipped: int = 0

    def add(self, name: str, of: OpFlops, dtype: str, step: int, kernel_ms: float | None) -> None:
        """Count one op's FLOPs in its step, kind and group (`kernel_ms`: its root's kernel time, for the first
        op counted of a root only)."""
        self.counted += 1
        self.per_step[step] += of.flops
        self.by_kind[KIND[name]] += of.flops
        g = self.groups.setdefault((name, str(of.shapes), dtype), {
            "op": name, "kind": KIND[name], "shapes": of.shapes, "dtype": dtype, "count": 0, "flops_each": of.flops,
            "bytes_each": of.bytes(dtype), "flops_total": 0.0, "kernel_ms": 0.0})
        g["count"] += 1
        g["flops_total"] += of.flops
        if kernel_ms is not None:
            g["kernel_ms"] += kernel_ms


def _ranked_groups(groups: dict[tuple, dict], n_steps: int) -> list[dict]:
    """The groups by FLOPs, most first, with their intensity, achieved TFLOPS and FLOPs per step."""
    out = sorted(groups.values(), key=lambda g: -g["flops_total"])
    for g in out:
        g["intensity"] = g["flops_each"] / g["bytes_each"] if g["bytes_each"] > 0 else None
        g["achieved_tflops"] = g["flops_total"] / (g["kernel_ms"] / 1000) / 1e12 if g["kernel_ms"] > 0 else None
        g["flops_per_step"] = g["flops_total"] / n_steps
    return out


def _count_op(trace: Trace, rows: np.ndarray, i: int, inside: list[int], seen: dict[tuple, OpFlops | None],
              args: list[tuple]) -> list[tuple[int, OpFlops]]:
    """The FLOPs of counted op i (an index into rows); when its own shapes cannot be read (a conv
    with padding="same" records no padding), those of the outermost counted ops inside it instead.
    `inside`: the indices of the counted ops nested in op i; `seen`: op_flops's results by its arguments;
    `args`: op_flops's arguments (name and raw JSON arguments) of each row."""
    out = []
    todo = [(i, inside)]  # depth first, first op first: a stack, not recursion (thousands of nested ops)
    while todo:
        i, inside = todo.pop()
        a = args[i]
        of = seen[a] if a in seen else seen.setdefault(a, op_flops(*a))
        if of is not None:
            out.append((i, of))
            continue
        if not inside:
            continue
        sub = np.array(inside)
        is_root, root_of = outermost(trace, rows[sub])
        of_root = by_key(root_of)  # one sort, not a scan of sub per outermost op (quadratic)
        todo += reversed([(int(sub[k]), [int(sub[j]) for j in of_root[int(k)] if j != k])
                          for k in np.flatnonzero(is_root)])
    return out


def _kernel_time_per_root(trace: Trace, rows: np.ndarray, root_of: np.ndarray, is_root: np.ndarray) -> dict:
    """GPU kernel time (us) launched from inside each root op, by index into rows.

    A kernel belongs to the cpu_op whose `External id` it carries (the innermost op at launch); that
    op belongs to the root whose span holds it on the same thread."""
    host, gpu = trace.host, trace.gpu
    root_idx = np.flatnonzero(is_root)
    k = np.flatnonzero((gpu.kind == KERNEL) & (gpu.external_id >= 0))
    if len(root_idx) == 0 or len(k) == 0:
        return {}
    op = launches.op_rows(trace, k)
    k, op = k[op >= 0], op[op >= 0]
    dur = gpu.end[k] - gpu.start[k]
    total = np.zeros(len(rows))
    root_rows = rows[root_idx]
    key = pair_ids(np.concatenate([host.pid[root_rows], host.pid[op]]),
                   np.concatenate([host.tid[root_rows], host.tid[op]]))
    roots_of, ops_of = by_key(key[: len(root_rows)]), by_key(key[len(root_rows):])  # one sort, not a mask per thread
    none = np.zeros(0, dtype=np.int64)
    for thread, pos in roots_of.items():
        sel = root_idx[pos]
        sel = sel[np.argsort(host.start[rows[sel]])]
        starts, ends = host.start[rows[sel]], host.end[rows[sel]]
        on = ops_of.get(thread, none)
        t = host.start[op[on]]
        j = np.searchsorted(starts, t, side="right") - 1
        inside = (j >= 0) & (t <= ends[np.maximum(j, 0)])
        np.add.at(total, sel[j[inside]], dur[on][inside])
    return {int(i): float(total[i]) for i in np.flatnonzero(total)}


def annotated_flops(trace: Trace, steps: Steps) -> FlopCount | None:
    """FLOPs per step from the profiler's `flops` annotations (with_flops=True); None without them."""
    host = trace.host
    rows = np.flatnonzero((host.cat == CPU_OP) & np.isfinite(host.flops) & (host.flops >= 0))  # 1e308, inf: not a count
    if len(rows) == 0:
        return None
    is_root, _ = outermost(trace, rows)
    step = _step_of(steps, host.start[rows])
    per_step = np.zeros(steps.count)
    ok = is_root & (step >= 0)
    with np.errstate(over="ignore"):  # a sum (or median) past 1.8e308 is inf, refused below
        np.add.at(per_step, step[ok], host.flops[rows[ok]])
        mid = float(median(per_step)) if ok.any() else math.inf
    if not math.isfinite(mid) or not np.isfinite(per_step).all():  # annotations that sum past 1.8e308
        return None
    return FlopCount(source="annotations", per_step=[float(x) for x in per_step],
                     flops_per_step=mid, ops_counted=int(ok.sum()), ops_skipped=0)
