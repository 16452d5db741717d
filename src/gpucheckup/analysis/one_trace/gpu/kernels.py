"""Kernel statistics: counts, durations, top kernels, GPU time by category, launch delay.

Definitions (also in docs/metrics.md). Counted: kernels (not copies or memsets) that start
inside the analysis window.
- small kernel: shorter than 20 us. At that size the ~5-10 us it costs the host to launch a
  kernel is comparable to the kernel itself, so the GPU cannot be kept busy from eager Python
  (the articles' "small-kernel storm": mean kernel time under 20 us is too fragmented, over
  50 us is healthy).
- category: the first rule of CATEGORY_RULES whose pattern is found in the names of what the kernel runs
  (work_names: never its template's types nor its parameters), except
  that any kernel launched inside the optimizer's own span (analysis/one_trace/host/optimizer_spans.py: an
  `Optimizer.step#...` range less the closure it calls, where the model's forward and backward run) is
  `optimizer`.
  Shares are percent of summed kernel time. A trace with no launch call (a light window recorded
  through CUPTI) does not say where a kernel was launched; there a kernel is `optimizer` when it
  started inside the optimizer's own span after the GPU had gone idle in that span (its device
  running nothing for at least CAUGHT_UP_US): a kernel starting after that moment was launched after
  it, so inside the span.
  Where the GPU never catches up inside the range (work queued ahead, a GPU-bound job) no kernel
  is attributed so: the kernels it runs then were launched earlier.
- data_movement: kernels that move or rearrange data without arithmetic (index, gather, scatter,
  sort, copy, cat, repeat_interleave, embedding, transpose): the MoE article's "moving, not
  computing". Each is also given its family (the keyword that matched) so the report can name
  them.
- launch delay: kernel start minus the start of the CUDA call that launched it. A median under
  50 us means kernels run as soon as they are launched (the GPU waits for the host: starved);
  over 1 ms means the host runs ahead and work sits queued (the GPU is the bottleneck).
"""

from __future__ import annotations

import functools
import re

import msgspec
import numpy as np

from gpucheckup.analysis.distinct import median, percentile, unique
from gpucheckup.analysis.intervals import inside_any
from gpucheckup.analysis.one_trace.host.optimizer_spans import optimizer_rows
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.trace.tables import KERNEL, Trace

SMALL_KERNEL_US = 20.0
# An idle stretch this long means the GPU had caught up with the host: kernels queued back to back start 1-3 us apart
# on an H200 (the launch-bound MLP's kernels, each launched as the host gets to it, 10-30 us apart)
CAUGHT_UP_US = 10.0
STARVED_DELAY_US = 50.0
QUEUED_DELAY_US = 1000.0
TOP_N = 10

CATEGORIES = (
    "gemm_conv", "attention", "elementwise", "reduction_norm", "data_movement", "optimizer",
    "communication", "other",
)
# (category, pattern), first match wins. Attention before GEMM: fused attention kernels are
# built from GEMMs and their names say so.
CATEGORY_RULES = [
    ("communication", re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|attn", re.I)),
    ("gemm_conv", re.compile(
        r"gemm|xmma|cutlass|nvjet|cublas|gemv|cudnn|conv|fprop|dgrad|wgrad|matmul|splitKreduce|triton_tem|bmm",
        re.I)),
    ("optimizer", re.compile(r"adam|FusedOptimizer|lamb_|sgd_|_fused_sgd", re.I)),
    ("data_movement", re.compile(
        r"(?<!with_)index|gather|scatter|sort|copy|CatArray|\bcat\b|concat|repeat_interleave|embedding|"
        r"transpose|permute|padding|DeviceSelect|DeviceUnique", re.I)),
    ("reduction_norm", re.compile(
        r"reduce|norm|softmax|welford|Scan|cumsum|pool|nll_loss|cross_entropy|GammaBeta|triton_red|triton_per",
        re.I)),
    ("elementwise", re.compile(r"elementwise|Functor|triton_poi|gelu|relu|silu|dropout|fill|arange|clamp|scal_kernel",
                               re.I)),
]
# Data-movement kernels by what they do, first match wins. PyTorch's scatter/gather kernel is
# one template: `_cuda_scatter_gather_internal_kernel<true, ...>` scatters, `<false, ...>` gathers.
DATA_MOVEMENT_FAMILIES = [
    ("sort", re.compile(r"sort", re.I)),
    ("scatter", re.compile(r"scatter_gather_internal_kernel<true|scatter(?!_gather)|index_put|indexing_backward", re.I)),
    ("gather", re.compile(r"gather", re.I)),
    ("index", re.compile(r"(?<!with_)index", re.I)),
    ("cat", re.compile(r"CatArray|\bcat\b|concat", re.I)),
    ("repeat_interleave", re.compile(r"repeat_interleave", re.I)),
    ("embedding", re.compile(r"embedding", re.I)),
    ("transpose", re.compile(r"transpose|permute", re.I)),
    ("copy", re.compile(r"copy", re.I)),
]


_WORD = re.compile(r"\w+")
_GENERIC = {"gpu_kernel_impl", "gpu_kernel_impl_nocast", "ReduceOp", "AUnaryFunctor", "BUnaryFunctor",
            "BinaryFunctor", "UnaryFunctor"}
LABEL_WIDTH = 72


def kernel_label(name: str) -> str:
    """A short, recognisable label: the kernel's base name and the op inside its template.
    e.g. `index_elementwise_kernel (index_put_kernel_impl)`."""
    head = name.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    base = re.split(r"[<(]", head, maxsplit=1)[0].split("::")[-1] or head
    if base.lower() in ("kernel", "kernel2") and "<" in head:  # CUTLASS: the template argument names the kernel
        base = re.split(r"[<>(,]", head.split("<", 1)[1], maxsplit=1)[0].split("::")[-1].strip() or base
    inner = [i for w in _WORD.findall(head[len(base):]) for i in _inner_names(w) if i != base]
    specific = [i for i in inner if i not in _GENERIC]
    label = f"{base} ({(specific or inner)[0]})" if inner else base
    return label if len(label) <= LABEL_WIDTH else label[: LABEL_WIDTH - 3] + "..."


def _inner_names(w: str) -> list[str]:
    """The op names inside one word of a kernel's template: `*_kernel_impl*`, `*Functor*`, `*_kernel_cuda`,
    `Reduce*`, `*_functor`, found with `str.find` (a regex such as `\\w+_kernel_cuda` scanned over a long word
    takes time quadratic in its length)."""
    out = []
    while w:
        if "_kernel_impl" in w[1:] or "Functor" in w:
            return out + [w]
        cut = next((w.rindex(x) + len(x) for x in ("_kernel_cuda",) if x in w[1:]), 0)
        if not cut and w.startswith("Reduce") and len(w) > 6:
            return out + [w]
        cut = cut or next((w.rindex(x) + len(x) for x in ("_functor",) if x in w[1:]), 0)
        if not cut:
            i = w.find("Reduce", 1)
            return out + [w[i:]] if 0 < i < len(w) - 6 else out
        out.append(w[:cut])
        w = w[cut:]
    return out


def _lowered(rules: list) -> list:
    """The same rules for an ASCII name lowered once: there re.I matches exactly what the lowered pattern
    matches in the lowered name, several times faster (no pattern here may use an escape such as \\S, that
    lowering would change)."""
    assert not any(re.search(r"\\[A-Z]", p.pattern) for _, p in rules)
    return [(k, re.compile(p.pattern.lower())) for k, p in rules]


_CATEGORY_LOWER = _lowered(CATEGORY_RULES)


_CALLED = re.compile(r"(\w+)\(")  # an identifier called: in a template argument, the function a lambda comes from


def work_names(name: str) -> str:
    """The names in a kernel's name that say what it does: its function's qualified name, and inside its
    template arguments the functions and functors it runs (`direct_copy_kernel_cuda(...)::{lambda}`,
    `FusedAdamMathFunctor`, `index_put_kernel_impl`), never the types (`index_t`, `OpaqueType<4>`, accessors) nor
    the parameter list. A CUTLASS `Kernel`/`Kernel2` is named by its first template argument."""
    head = name.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    cut = min((i for i in (head.find("<"), head.find("(")) if i > 0), default=len(head))
    qualified, template = head[:cut], ""
    if head[cut:cut + 1] == "<":
        depth = 0
        for i in range(cut, len(head)):
            depth += {"<": 1, ">": -1}.get(head[i], 0)
            if depth == 0:
                template = head[cut + 1:i]
                break
        else:
            template = head[cut + 1:]
    words = _CALLED.findall(template) + [i for w in _WORD.findall(template) for i in _inner_names(w)]
    base = qualified.split("::")[-1]
    if base.lower() in ("kernel", "kernel2") and template:
        words.insert(0, re.split(r"[<>(,]", template, maxsplit=1)[0].strip())
    if base in _BY_OP_ARGUMENT:  # the op is a template argument (`at::native::Copy<float, float>`): name each one
        words += [_WORD.findall(a.split("<", 1)[0])[-1] for a in _top_level(template) if _WORD.search(a)]
    return " ".join([qualified, *dict.fromkeys(words)])


_BY_OP_ARGUMENT = {"multi_tensor_apply_kernel"}  # launchers whose work is a template argument, not a function


def _top_level(template: str) -> list[str]:
    """A template's arguments at its top level (not those of the templates inside it)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(template):
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(template[start:i])
            start = i + 1
    return out + [template[start:]]


@functools.lru_cache(maxsize=1 << 14)  # asked for the same names by several analyses of each trace
def categorize(name: str) -> str:
    """The category of a kernel by the names of what it runs (work_names), never by its template's types."""
    name = work_names(name)
    rules, text = (_CATEGORY_LOWER, name.lower()) if name.isascii() else (CATEGORY_RULES, name)
    for cat, pattern in rules:
        if pattern.search(text):
            return cat
    return "other"


def data_movement_family(name: str) -> str:
    """Which kind of data movement a data-movement kernel does."""
    for fam, pattern in DATA_MOVEMENT_FAMILIES:
        if pattern.search(name):
            return fam
    return "other"


class KernelStats(msgspec.Struct):
    """Everything `kernel_stats` computes; `to_dict` gives the report's view."""

    count: int
    total_us: float
    mean_us: float
    median_us: float
    small_pct: float
    categories_pct: dict[str, float]
    categories_us: dict[str, float]
    top: list[dict]  # the TOP_N kernels by total time
    per_name: list[dict]  # every kernel name, by total time
    data_movement: list[dict]  # per family: share and the kernels
    launch_delay_median_us: float | None
    launch_delay_p90_us: float | None
    rows: np.ndarray  # rows of trace.gpu counted
    category_of_row: np.ndarray  # category index per counted row

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "total_ms": self.total_us / 1000,
            "mean_us": self.mean_us,
            "median_us": self.median_us,
            "small_pct": self.small_pct,
            "small_threshold_us": SMALL_KERNEL_US,
            "categories": self.categories_pct,
            "categories_ms": {k: v / 1000 for k, v in self.categories_us.items()},
            "top": self.top,
            "by_name": self.per_name,
            "data_movement": self.data_movement,
            "launch_delay_median_us": self.launch_delay_median_us,
            "launch_delay_p90_us": self.launch_delay_p90_us,
        }


def kernel_stats(trace: Trace, steps: Steps, launch_rows: np.ndarray) -> KernelStats:
    """Counts, durations, categories and launch delay of the kernels in the analysis window."""
    gpu = trace.gpu
    lo, hi = steps.window
    rows = np.flatnonzero((gpu.kind == KERNEL) & (gpu.start >= lo) & (gpu.start <= hi))
    dur = gpu.end[rows] - gpu.start[rows]
    names = gpu.name[rows]
    uniq, inv = np.unique(names, return_inverse=True)
    cat_of_name = np.array([CATEGORIES.index(categorize(trace.names[i])) for i in uniq], dtype=np.int8)
    cat = cat_of_name[inv] if len(rows) else np.zeros(0, dtype=np.int8)
    in_opt = (_launched_in_optimizer(trace, launch_rows[rows]) if (launch_rows >= 0).any()
              else _started_in_optimizer(trace, rows))
    cat = np.where(in_opt & (cat != CATEGORIES.index("communication")), CATEGORIES.index("optimizer"), cat)
    total = float(dur.sum())
    cat_us = {c: float(dur[cat == i].sum()) for i, c in enumerate(CATEGORIES)}
    cat_pct = {c: (100 * v / total if total > 0 else 0.0) for c, v in cat_us.items()}

    per_name_us = np.bincount(inv, weights=dur, minlength=len(uniq)) if len(rows) else np.zeros(0)
    per_name_n = np.bincount(inv, minlength=len(uniq)) if len(rows) else np.zeros(0, dtype=int)
    # Category counts per name (a name can be optimizer in one place and elementwise in another).
    cat_counts = np.bincount(inv * len(CATEGORIES) + cat, minlength=len(uniq) * len(CATEGORIES)).reshape(
        len(uniq), len(CATEGORIES)) if len(rows) else np.zeros((0, len(CATEGORIES)), dtype=int)
    per_name = []
    for i in np.argsort(-per_name_us):
        per_name.append({
            "name": trace.names[uniq[i]],
            "category": CATEGORIES[int(cat_counts[i].argmax())],
            "count": int(per_name_n[i]),
            "total_ms": float(per_name_us[i]) / 1000,
            "mean_us": float(per_name_us[i] / per_name_n[i]),
            "pct": 100 * float(per_name_us[i]) / total if total > 0 else 0.0,
        })

    data_movement = _data_movement(trace, uniq, cat_counts, per_name_us, per_name_n, total)

    lr = launch_rows[rows]
    ok = lr >= 0
    delay = gpu.start[rows][ok] - trace.host.start[lr[ok]]
    return KernelStats(
        count=int(len(rows)),
        total_us=total,
        mean_us=float(dur.mean()) if len(rows) else 0.0,
        median_us=float(median(dur)) if len(rows) else 0.0,
        small_pct=float(100 * np.mean(dur < SMALL_KERNEL_US)) if len(rows) else 0.0,
        categories_pct=cat_pct,
        categories_us=cat_us,
        top=per_name[:TOP_N],
        per_name=per_name,
        data_movement=data_movement,
        launch_delay_median_us=float(median(delay)) if len(delay) else None,
        launch_delay_p90_us=float(percentile(delay, 90)) if len(delay) else None,
        rows=rows,
        category_of_row=cat,
    )


def _data_movement(trace, uniq, cat_counts, per_name_us, per_name_n, total) -> list[dict]:
    """Data-movement kernels grouped by family, largest share first."""
    dm = CATEGORIES.index("data_movement")
    families: dict[str, dict] = {}
    for i, name_id in enumerate(uniq):
        if cat_counts[i, dm] == 0:
            continue
        name = trace.names[name_id]
        fam = families.setdefault(data_movement_family(name), {"us": 0.0, "count": 0, "kernels": []})
        fam["us"] += float(per_name_us[i])
        fam["count"] += int(per_name_n[i])
        fam["kernels"].append((float(per_name_us[i]), name))
    out = []
    for fam, d in sorted(families.items(), key=lambda kv: -kv[1]["us"]):
        out.append({
            "family": fam,
            "pct": 100 * d["us"] / total if total > 0 else 0.0,
            "total_ms": d["us"] / 1000,
            "count": d["count"],
            "kernels": [n for _, n in sorted(d["kernels"], reverse=True)[:5]],
            "labels": [kernel_label(n) for _, n in sorted(d["kernels"], reverse=True)[:5]],
        })
    return out


def _started_in_optimizer(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For a trace without launch calls: whether each GPU op of `rows` started inside the optimizer's own span
    after its device went idle in that span for at least CAUGHT_UP_US (see the module docstring)."""
    gpu = trace.gpu
    out = np.zeros(len(rows), dtype=bool)
    span_lo, span_hi, _ = optimizer_rows(trace)
    if len(span_lo) == 0 or len(rows) == 0:
        return out
    spans = []  # per device: from the first long gap ending after each span's start (the device caught up) to its end
    for dev in unique(gpu.device[rows]).tolist():
        on = np.flatnonzero((gpu.device == dev) & np.isfinite(gpu.start) & np.isfinite(gpu.end))
        bs, be = _busy_spans(gpu.start[on], gpu.end[on])
        gs, ge = be[:-1], bs[1:]  # the device's idle gaps between its busy spans
        long = ge - gs >= CAUGHT_UP_US
        gs, ge = gs[long], ge[long]
        if len(bs) == 0:
            continue
        j = np.searchsorted(ge, span_lo, side="right")  # the first long gap ending after each span's start
        ok = span_lo >= bs[0]  # before the device's first recorded op: its state is unknown
        ok[ok] = j[ok] < len(gs)
        ok[ok] = gs[j[ok]] < span_hi[ok]
        spans.append((np.maximum(gs[j[ok]], span_lo[ok]), span_hi[ok], np.full(int(ok.sum()), dev)))
    if not spans:
        return out
    s, e, d = (np.concatenate(x) for x in zip(*spans))
    return inside_any(gpu.start[rows], gpu.device[rows], s, e, d)


def _busy_spans(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as sorted, disjoint (starts, ends)."""
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def _launched_in_optimizer(trace: Trace, launch_rows: np.ndarray) -> np.ndarray:
    """Whether each kernel's launching call lies inside the optimizer's own span on its thread."""
    host = trace.host
    out = np.zeros(len(launch_rows), dtype=bool)
    lo, hi, tid = optimizer_rows(trace)
    ok = launch_rows >= 0
    if len(lo) and ok.any():
        rows = launch_rows[ok]
        out[ok] = inside_any(host.start[rows], host.tid[rows], lo, hi, tid)
    return out
