"""Which number format the matrix-multiply kernels run in, by share of their GPU time.

Definitions (also in docs/mfu.md):
- GEMM kernels: kernels of category `gemm_conv` or `attention` (kernels.py) in the analysis window.
- a kernel's dtype: from its name first (first match of NAME_RULES: fp8 = e4m3/e5m2/fp8; bf16;
  fp16 = fp16/hgemm/h884-style names; tf32 = tf32/s1688gemm; fp32 = sgemm/ffma/simt, the
  non-tensor-core FMA path), else from the op that launched it (the cpu_op with the kernel's
  External id: its first floating input, bf16/fp16/fp8 as is; `float` is tf32 when the kernel's name
  is a tensor-core one (nvjet, tensorop, wgmma, hmma, xmma without ffma), fp32 otherwise), else
  the dtype most launches of the same kernel name had (kernels launched before the profiler
  started carry no External id), else `unknown`. Hopper's cuBLAS `nvjet_*` kernels do not name their dtype: the op does.
- share: kernel time of each dtype over all GEMM kernel time, percent.
- the dominant dtype (largest share) picks the peak that MFU is measured against.
"""

from __future__ import annotations

import functools
import re

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace import launches
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, KernelStats
from gpucheckup.analysis.flops.shape_flops import first_float_dtype
from gpucheckup.trace.tables import Trace

NAME_RULES = [
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"fp16|f16f16|hgemm|(?:^|_)h\d{3,5}gemm|__half|\bhalf\b", re.I)),
    ("tf32", re.compile(r"tf32|xf32|(?:^|_)s1688gemm", re.I)),
    ("fp32", re.compile(r"sgemm|ffma|simt|f32f32_f32f32", re.I)),
]
TENSOR_CORE_MARKS = ("nvjet", "tensorop", "wgmma", "hmma", "gmma", "s16816", "s1688")  # and xmma without ffma after it
GEMM_CATEGORIES = (CATEGORIES.index("gemm_conv"), CATEGORIES.index("attention"))


def is_tensor_core(name: str) -> bool:
    """Whether a kernel's name says tensor cores: a mark of TENSOR_CORE_MARKS, or `xmma` with no `ffma` after its
    last occurrence (case-insensitive; plain substring tests, linear in the name's length)."""
    low = name.lower()
    if any(m in low for m in TENSOR_CORE_MARKS):
        return True
    i = low.rfind("xmma")
    return i >= 0 and "ffma" not in low[i:]


def dtype_from_name(name: str) -> str:
    """The dtype a kernel's name states, or ""."""
    for dt, pat in NAME_RULES:
        if pat.search(name):
            return dt
    return ""


@functools.lru_cache(maxsize=1 << 14)  # a trace has few kernel names; each is matched against NAME_RULES once
def kernel_dtype(name: str, op_dtype: str) -> str:
    """A GEMM kernel's dtype from its name, else from its launching op's input dtype."""
    dt = dtype_from_name(name)
    if dt:
        return dt
    if op_dtype == "fp32":
        return "tf32" if is_tensor_core(name) else "fp32"
    return op_dtype or "unknown"


def plain_fp32_gemms(kstats: KernelStats) -> list[dict]:
    """The GEMM/conv kernel names (kstats.per_name rows) whose names say plain FP32, no tensor cores: the
    one definition of the FP32-GEMM share (rule fp32_gemms, fixes tf32 and bf16_autocast)."""
    return [t for t in kstats.per_name if t["category"] == "gemm_conv" and dtype_from_name(t["name"]) == "fp32"]


def gemm_dtypes(trace: Trace, kstats: KernelStats) -> dict:
    """Percent of GEMM kernel time per dtype, the dominant dtype, and the GEMM time itself."""
    gpu, host = trace.gpu, trace.host
    sel = np.isin(kstats.category_of_row, GEMM_CATEGORIES)
    rows = kstats.rows[sel]
    if len(rows) == 0:
        return {"shares_pct": {}, "dominant": None, "gemm_ms": 0.0, "by_dtype_ms": {}}
    ops = launches.op_rows(trace, rows)
    decoded: dict[bytes | None, str] = {None: ""}
    pair_dtype: dict[tuple[int, str], str] = {}
    names = gpu.name[rows].tolist()
    durs = (gpu.end[rows] - gpu.start[rows]).tolist()
    kernel_dt = []
    name_votes: dict[int, dict[str, float]] = {}  # per kernel name: launches per resolved dtype
    ops = ops.tolist()
    raws = host.dtypes.take(np.maximum(ops, 0)) if len(host.dtypes) else [None] * len(ops)
    for name, op, raw in zip(names, ops, raws):
        raw = raw if op >= 0 else None
        if raw not in decoded:
            try:
                decoded[raw] = first_float_dtype(msgspec.json.decode(raw))
            except msgspec.DecodeError:
                decoded[raw] = ""
        key = (name, decoded[raw])
        if key not in pair_dtype:
            pair_dtype[key] = kernel_dtype(trace.names[name], key[1])
        dt = pair_dtype[key]
        kernel_dt.append(dt)
        if dt != "unknown":
            votes = name_votes.setdefault(name, {})
            votes[dt] = votes.get(dt, 0.0) + 1
    by_dtype: dict[str, float] = {}
    for name, dt, dur in zip(names, kernel_dt, durs):
        if dt == "unknown" and name in name_votes:  # launched before the trace began: the dtype
            votes = name_votes[name]  # most launches of the same kernel name had
            dt = max(votes, key=votes.get)
        by_dtype[dt] = by_dtype.get(dt, 0.0) + dur
    total = sum(by_dtype.values())
    shares = {k: 100 * v / total if total > 0 else 0.0 for k, v in sorted(by_dtype.items(), key=lambda kv: -kv[1])}
    known = {k: v for k, v in shares.items() if k != "unknown"}
    return {
        "shares_pct": shares,
        "dominant": max(known, key=known.get) if known else None,
        "gemm_ms": total / 1000,
        "by_dtype_ms": {k: v / 1000 for k, v in by_dtype.items()},
    }
